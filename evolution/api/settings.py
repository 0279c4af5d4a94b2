"""The loop-settings tools over REST: loop_join, loop_set and loop_widen (seed 003 "Running the loop from an agent").

Each endpoint calls the same function the dashboard's editors call
(``evolution.steering.settings``). ``targetKind`` + ``targetId`` name one
entity; both absent (or null) name the brain tier, ``constitution/MANIFEST.yaml``;
naming only one half is refused. ``dryRun: true`` answers each file the
write would touch with its diff (and, for loop_widen, ``widened``) and writes
nothing; send ``expect`` (the dry run's ``{path: base}``) with the real call
to have it refused with ``conflict`` if the file changed in between.

Writes need a staff user (an agent token acts for its user). An agent may
join and make narrowing writes; its loop_widen opens a widen card a person
approves (202, ``pending``), and so does any of its writes that loosens spend,
the pre-merge check or the watch (``loosened``). A refusal is
``{error, detail, widened?}``: invalid (400), refused (403), not_found (404),
precondition (409), conflict (409), too_many_pending (429: the agent's asks
waiting on people are at the cap).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.steering import asks
from evolution.steering import settings as sw
from singularity.apikit.camel import camel
from singularity.auth import is_agent

HTTP = {
    sw.INVALID: http.HTTP_400_BAD_REQUEST,
    sw.REFUSED: http.HTTP_403_FORBIDDEN,
    sw.NOT_FOUND: http.HTTP_404_NOT_FOUND,
    sw.PRECONDITION: http.HTTP_409_CONFLICT,
    sw.CONFLICT: http.HTTP_409_CONFLICT,
    sw.TOO_MANY: http.HTTP_429_TOO_MANY_REQUESTS,
}


# --- Shapes -------------------------------------------------------------------------------


class _Target(serializers.Serializer):
    target_kind = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, help_text="scenario, heartbeat or role; null: the brain."
    )
    target_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, help_text="The entity's slug; null: the brain."
    )
    dry_run = serializers.BooleanField(required=False, default=False, help_text="Validate and answer the diffs only.")
    expect = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text="{path: base} from a dry run: refused with conflict when a file's bytes changed since.",
    )


class SetRequestSerializer(_Target):
    key = serializers.CharField(help_text='A dotted loop/evaluation key, e.g. "loop.autonomy.decide".')
    op = serializers.ChoiceField(choices=[sw.SET, sw.REMOVE], default=sw.SET)
    value = serializers.JSONField(required=False, allow_null=True, help_text="The value to set (op set).")


class JoinRequestSerializer(_Target):
    daily_cap = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="evaluation.sample.maxPerDay to write: owed by an unattended entity no tier caps.",
    )


class FileDiffSerializer(serializers.Serializer):
    path = serializers.CharField()
    diff = serializers.CharField(help_text="A unified diff of the file.")
    base = serializers.CharField(help_text="sha256 of the bytes the write was validated on.")


class WidenedSerializer(serializers.Serializer):
    subject = serializers.CharField(help_text='"<kind>:<id>", or constitution/MANIFEST.yaml for the loop switch.')
    knob = serializers.CharField(help_text='The dotted knob, e.g. "loop.autonomy.decide".')
    # "from" is a Python keyword: declared through the field map below.
    to = serializers.JSONField(allow_null=True)

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["from"] = serializers.JSONField(allow_null=True)
        return fields


class LoosenedSerializer(WidenedSerializer):
    family = serializers.ChoiceField(choices=["spend", "check", "watch"], help_text="What the knob guards.")


class SettingsAnswerSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="Whether the write changes (or, dry run, would change) a file.")
    dryRun = serializers.BooleanField()
    files = FileDiffSerializer(many=True)
    widened = WidenedSerializer(many=True)
    loosened = LoosenedSerializer(
        many=True, help_text="The loosenings of spend, the check or the watch: an agent's wait on a person's card."
    )
    commit = serializers.CharField(allow_null=True, help_text="The brain commit the write made.")
    pending = serializers.BooleanField(
        help_text="An agent's widening or loosening waits on a person's widen card (cardId)."
    )
    cardId = serializers.CharField(allow_null=True)
    resumed = serializers.BooleanField(required=False, help_text="loop_join: the entity's own enabled went back on.")


class SettingsRefusalSerializer(serializers.Serializer):
    error = serializers.ChoiceField(choices=list(HTTP))
    detail = serializers.CharField()
    widened = WidenedSerializer(many=True, required=False)


REFUSALS = {
    400: OpenApiResponse(SettingsRefusalSerializer, description="invalid: the body, or only one half of the target."),
    403: OpenApiResponse(
        SettingsRefusalSerializer, description="refused: not staff, a write that would break an entity, or a widening."
    ),
    404: OpenApiResponse(SettingsRefusalSerializer, description="not_found: the entity names nothing."),
    409: OpenApiResponse(
        SettingsRefusalSerializer,
        description="precondition (the entity cannot join) or conflict (the file kept changing).",
    ),
    429: OpenApiResponse(
        SettingsRefusalSerializer,
        description="too_many_pending: the agent's asks waiting on people are at the cap (the detail names it).",
    ),
}


def asker_of(request: Request) -> str:
    """Whose asks a card counts against: "agent:<token name> of <username>" for an agent token, else the username."""
    username = request.user.get_username()
    if is_agent(request):
        return asks.asker_for(username, request.auth.name)
    return username


# --- Views ---------------------------------------------------------------------------------


def _refusal(exc: sw.SettingsRefusal) -> Response:
    body: dict[str, Any] = {"error": exc.code, "detail": exc.detail}
    if exc.widened:
        body["widened"] = exc.widened
    return Response(body, status=HTTP.get(exc.code, http.HTTP_400_BAD_REQUEST))


def _first_error(errors: dict[str, Any]) -> str:
    for name, messages in errors.items():
        message = messages[0] if isinstance(messages, list) and messages else messages
        return f"{camel(name)}: {message}"
    return "the body is not valid"


class _Write(APIView):
    """A loop-settings write: staff only; the body read by ``request_class``; the write made by ``write``."""

    request_class: type[serializers.Serializer] = SetRequestSerializer
    op = ""

    def write(self, request: Request, target: Any, data: dict[str, Any], actor: str) -> sw.Answer:
        raise NotImplementedError

    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            return _refusal(sw.SettingsRefusal(sw.REFUSED, f"{self.op}: only staff change the loop's settings"))
        form = self.request_class(data=request.data if isinstance(request.data, dict) else {})
        if not form.is_valid():
            return _refusal(sw.SettingsRefusal(sw.INVALID, _first_error(form.errors)))
        data = form.validated_data
        actor = request.user.get_username()
        try:
            target = sw.target_named(data.get("target_kind") or None, data.get("target_id") or None)
            answer = self.write(request, target, data, actor)
        except sw.SettingsRefusal as refusal:
            return _refusal(refusal)
        code = http.HTTP_202_ACCEPTED if answer.pending else http.HTTP_200_OK
        return Response(SettingsAnswerSerializer(answer.as_json()).data, status=code)


class LoopJoin(_Write):
    request_class = JoinRequestSerializer
    op = sw.OP_JOIN

    @extend_schema(
        operation_id="loop_join",
        summary="loop_join: turn the loop on for an entity (and resume it when it was paused)",
        description=(
            "Writes evaluation.enabled and loop.enabled true in the entity's frontmatter, and its own top-level "
            "enabled back to true when it was false (resumed). Refused: an entity whose feature is switched off, "
            "a brain whose loop (or grading) switch is off, an entity whose settings do not load, and an "
            "unattended entity with no evaluation.sample.maxPerDay at any tier unless dailyCap is named. An "
            "agent's join whose dailyCap raises the daily grading ceiling opens a person's card (202 pending)."
        ),
        request=JoinRequestSerializer,
        responses={200: SettingsAnswerSerializer, 202: SettingsAnswerSerializer, **REFUSALS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)

    def write(self, request: Request, target: Any, data: dict[str, Any], actor: str) -> sw.Answer:
        return sw.loop_join(
            target,
            actor=actor,
            is_agent=is_agent(request),
            asker=asker_of(request),
            daily_cap=data.get("daily_cap"),
            dry_run=data.get("dry_run", False),
            expect=data.get("expect") or None,
        )


class LoopSet(_Write):
    op = sw.OP_SET

    @extend_schema(
        operation_id="loop_set",
        summary="loop_set: set or remove one loop/evaluation key at a tier (refuses a widening of oversight)",
        description=(
            "Validated against every entity the write reaches before anything is written; the file keeps every "
            "comment. A write that widens oversight (autonomy knobs, editablePaths/protectedPaths/maxChangedLines, "
            "turning the brain-wide loop switch back on) is refused with widened[] — use loop_widen. Pulling "
            "either kill switch (loop.enabled or evaluation.enabled false) asks nobody. An agent's write that "
            "loosens spend (budget, maxAnalysesPerDay, sampling), the pre-merge check or the watch opens a "
            "person's card and answers 202 pending with loosened[] and its cardId."
        ),
        request=SetRequestSerializer,
        responses={200: SettingsAnswerSerializer, 202: SettingsAnswerSerializer, **REFUSALS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)

    def write(self, request: Request, target: Any, data: dict[str, Any], actor: str) -> sw.Answer:
        return sw.loop_set(
            target,
            data["key"],
            data.get("op", sw.SET),
            data.get("value"),
            actor=actor,
            is_agent=is_agent(request),
            asker=asker_of(request),
            dry_run=data.get("dry_run", False),
            expect=data.get("expect") or None,
        )


class LoopWiden(_Write):
    op = sw.OP_WIDEN

    @extend_schema(
        operation_id="loop_widen",
        summary="loop_widen: loop_set's write, widenings included, once a person approves",
        description=(
            "A person's call is the approval: the write is made. An agent's call opens a widen card "
            "(the diff and widened[] on it) and answers 202 pending with its cardId; the write is made when a "
            "person approves the card. That Approve also grants the agent loop:autonomy for 24 hours: its "
            "further widenings (not loosenings of spend or checks) are made unasked (200) until the grant "
            "expires or is revoked; Approve once grants nothing. dryRun answers files and widened[] and "
            "writes nothing."
        ),
        request=SetRequestSerializer,
        responses={200: SettingsAnswerSerializer, 202: SettingsAnswerSerializer, **REFUSALS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)

    def write(self, request: Request, target: Any, data: dict[str, Any], actor: str) -> sw.Answer:
        return sw.loop_widen(
            target,
            data["key"],
            data.get("op", sw.SET),
            data.get("value"),
            actor=actor,
            is_agent=is_agent(request),
            asker=asker_of(request),
            scope=request.auth.pk if is_agent(request) else None,
            dry_run=data.get("dry_run", False),
            expect=data.get("expect") or None,
        )
