"""The supervision tools over REST: loop_hold, loop_release, loop_rearm, loop_ack_failure, and the rows (seed 003).

Each write goes through ``evolution.supervision.move`` — the door the
entity page and the admin use. A hold applies at once for a person and an
agent alike (loop:hold asks nobody). A person's release, re-arm or dismissal
applies at once; an agent's answers 202 with the approval card it waits on,
applied when a person approves (DESIGN decision 9). Writes need a staff user
(an agent token acts for its user). A refusal is ``{error, detail}``:
not_found (404), precondition (409), refused (403), invalid (400, the body).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.core.links import absolute
from evolution.models import Cycle, Supervision
from evolution.reads import status
from evolution.steering import supervision
from singularity.apikit.camel import camel
from singularity.apikit.pagination import NEXT_HELP, PAGING, parse_limit
from singularity.auth import is_agent
from singularity.serializers import ErrorSerializer

HTTP = {"not_found": 404, "precondition": 409, "refused": 403, "invalid": 400, "too_many_pending": 429}


# --- Shapes -------------------------------------------------------------------------------


class TargetRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField(required=False, allow_blank=True, help_text="scenario, heartbeat or role.")
    target_id = serializers.CharField(required=False, allow_blank=True, help_text="The entity's slug.")
    group = serializers.CharField(
        required=False, allow_blank=True, help_text="A lock group declared under loop.groups (instead of an entity)."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class HoldRequestSerializer(TargetRequestSerializer):
    """A hold's body: its target, and why (a hold needs a reason: 409 without one)."""

    reason = serializers.CharField(
        max_length=4000,
        allow_blank=True,
        help_text="Why the loop is held: said wherever the hold shows (409 if blank).",
    )


class RearmRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField()
    target_id = serializers.CharField()
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class DismissRequestSerializer(serializers.Serializer):
    cycle_id = serializers.IntegerField(help_text="The failed cycle to take off the unread failures.")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class SupervisionRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Supervision.Kind.values)
    targetKind = serializers.CharField(allow_null=True)
    targetId = serializers.CharField(allow_null=True)
    group = serializers.CharField(allow_null=True, help_text="The lock group, for a group hold or release.")
    cycleId = serializers.IntegerField(allow_null=True, help_text="The dismissed cycle, for a dismissal.")
    actor = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()


class ApprovalCardSerializer(serializers.Serializer):
    id = serializers.CharField()
    url = serializers.CharField()
    expiresAt = serializers.DateTimeField()


class MoveAnswerSerializer(serializers.Serializer):
    applied = serializers.BooleanField(help_text="False when the move waits on a person's approval card.")
    row = SupervisionRowSerializer(allow_null=True)
    card = ApprovalCardSerializer(allow_null=True)
    detail = serializers.CharField()


class GroupStateSerializer(serializers.Serializer):
    group = serializers.CharField()
    held = serializers.BooleanField()


class FailureSerializer(serializers.Serializer):
    cycleId = serializers.IntegerField()
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField(allow_null=True)


class SupervisionReadSerializer(serializers.Serializer):
    held = serializers.CharField(allow_null=True, help_text='"held by <actor>: <reason>", or null.')
    lastRearm = serializers.DateTimeField(allow_null=True)
    groups = GroupStateSerializer(many=True)
    rows = SupervisionRowSerializer(many=True)
    unreadFailures = FailureSerializer(many=True)
    nextCursor = serializers.CharField(allow_null=True, help_text=NEXT_HELP + " (of rows)")


ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="invalid: the body (`detail` names the field)."),
    403: OpenApiResponse(ErrorSerializer, description="refused: not staff, or a group loop.groups does not declare."),
    404: OpenApiResponse(ErrorSerializer, description="not_found: the entity or cycle names nothing."),
    409: OpenApiResponse(ErrorSerializer, description="precondition: a hold with no reason, nothing to release, …"),
    429: OpenApiResponse(
        ErrorSerializer, description="too_many_pending: the agent's cards waiting on people are at the cap (named)."
    ),
}
APPLIED = OpenApiResponse(MoveAnswerSerializer, description="Applied: the row written.")
WAITING = OpenApiResponse(MoveAnswerSerializer, description="An agent's move: it waits on a person's approval card.")


# --- Helpers --------------------------------------------------------------------------------


def _error(code: str, detail: str) -> Response:
    return Response({"error": code, "detail": detail}, status=HTTP[code])


def actor_of(request: Request) -> str:
    """Who makes the move: the person's username, or "agent:<token name> of <username>" for an agent token."""
    username = request.user.get_username()
    if is_agent(request):
        return f"agent:{request.auth.name} of {username}"[:200]
    return username


def _first_error(errors: dict[str, Any]) -> str:
    for field, problems in errors.items():
        problem = problems[0] if isinstance(problems, list) and problems else problems
        return f"{camel(field)}: {problem}"
    return "the body is not valid"


def _body(request: Request, form_class: type[serializers.Serializer]) -> dict[str, Any]:
    """The validated body; raises Refusal("invalid") naming the first bad field."""
    form = form_class(data=request.data if isinstance(request.data, dict) else {})
    if not form.is_valid():
        raise supervision.Refusal("invalid", _first_error(form.errors))
    return dict(form.validated_data)


def _entity(kind: str | None, slug: str | None) -> Any:
    try:
        entity = status.entity_named(kind or None, slug or None)
    except ValueError as exc:
        raise supervision.Refusal("invalid", str(exc)) from exc
    except status.NotFound as exc:
        raise supervision.Refusal("not_found", str(exc)) from exc
    return entity


def _target(data: dict[str, Any]) -> Any:
    """The entity ``targetKind`` + ``targetId`` name, or {"group": id}; exactly one of them."""
    group = (data.get("group") or "").strip()
    kind, slug = data.get("target_kind") or None, data.get("target_id") or None
    if group and (kind or slug):
        raise supervision.Refusal("invalid", "group: name a lock group or an entity (targetKind + targetId), not both")
    if group:
        return {"group": group}
    entity = _entity(kind, slug)
    if entity is None:
        raise supervision.Refusal("invalid", "targetKind, targetId: name the entity (or a lock group with group)")
    return entity


def _answer(asked: supervision.Asked) -> Response:
    if asked.applied:
        row = supervision.row_record(asked.row)
        body = {"applied": True, "row": row, "card": None, "detail": asked.row.kind}
        return Response(MoveAnswerSerializer(body).data)
    card = asked.card
    body = {
        "applied": False,
        "row": None,
        "card": {"id": str(card.pk), "url": absolute(card.get_absolute_url()), "expiresAt": card.expires_at},
        "detail": f"waits on a person's approval: {card.title}",
    }
    return Response(MoveAnswerSerializer(body).data, status=http.HTTP_202_ACCEPTED)


class _Move(APIView):
    """A supervision write: staff only; the body read by ``request_class``; the move made through ``supervision``."""

    op = ""
    request_class: type[serializers.Serializer] = TargetRequestSerializer

    def target(self, data: dict[str, Any]) -> tuple[Any, Cycle | None]:
        return _target(data), None

    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            return _error("refused", f"loop_{self.op}: only staff supervise the loop ({request.user} is not staff)")
        try:
            data = _body(request, self.request_class)
            target, cycle = self.target(data)
            asked = supervision.move(
                self.op, target, actor=actor_of(request), reason=data["reason"], agent=is_agent(request), cycle=cycle
            )
        except supervision.Refusal as refused:
            return _error(refused.code, refused.detail)
        return _answer(asked)


class LoopHold(_Move):
    op = Supervision.Kind.HOLD
    request_class = HoldRequestSerializer

    @extend_schema(
        operation_id="loop_hold",
        summary="loop_hold: stop new cycles of an entity or a lock group (asks nobody)",
        description=(
            "Name the entity (targetKind + targetId) or a lock group declared under loop.groups (group), and why. "
            "A hold stops new cycles only: a cycle already running, its watch and a revert carry on."
        ),
        request=HoldRequestSerializer,
        responses={200: APPLIED, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


class LoopRelease(_Move):
    op = Supervision.Kind.RELEASE

    @extend_schema(
        operation_id="loop_release",
        summary="loop_release: lift the hold on an entity or a lock group (an agent's waits on approval)",
        request=TargetRequestSerializer,
        responses={200: APPLIED, 202: WAITING, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


class LoopRearm(_Move):
    op = Supervision.Kind.REARM
    request_class = RearmRequestSerializer

    @extend_schema(
        operation_id="loop_rearm",
        summary="loop_rearm: lift the breaker's pause on an entity (an agent's waits on approval)",
        request=RearmRequestSerializer,
        responses={200: APPLIED, 202: WAITING, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


class LoopDismiss(_Move):
    op = Supervision.Kind.DISMISS
    request_class = DismissRequestSerializer

    def target(self, data: dict[str, Any]) -> tuple[Any, Cycle | None]:
        cycle = Cycle.objects.select_related("entity").filter(pk=data["cycle_id"]).first()
        if cycle is None:
            raise supervision.Refusal("not_found", f"cycle {data['cycle_id']} names no cycle")
        return cycle.entity, cycle

    @extend_schema(
        operation_id="loop_ack_failure",
        summary="loop_ack_failure: dismiss a failed cycle from the unread failures (an agent's waits on approval)",
        request=DismissRequestSerializer,
        responses={200: APPLIED, 202: WAITING, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


class LoopSupervision(APIView):
    @extend_schema(
        operation_id="loop_supervision",
        summary="The supervision rows: holds, releases, re-arms and dismissals, with who and why",
        description=(
            "With targetKind + targetId: the entity's own rows and its lock groups', whether a hold stands on it, "
            "its last re-arm and its unread failures. With group: that group's rows. With neither: the fleet's."
        ),
        parameters=[
            OpenApiParameter(
                "targetKind", OpenApiTypes.STR, description="scenario, heartbeat or role (with targetId)."
            ),
            OpenApiParameter("targetId", OpenApiTypes.STR, description="The entity's slug (with targetKind)."),
            OpenApiParameter("group", OpenApiTypes.STR, description="A declared lock group (instead of an entity)."),
            *PAGING,
        ],
        responses={200: SupervisionReadSerializer, 400: ERRORS[400], 403: ERRORS[403], 404: ERRORS[404]},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        try:
            group = (params.get("group") or "").strip()
            entity = _entity(params.get("target_kind"), params.get("target_id"))
            if group and entity is not None:
                raise supervision.Refusal("invalid", "group: name a lock group or an entity, not both")
            if group:
                supervision.target_of({"group": group})
            limit = parse_limit(params.get("limit"))
        except supervision.Refusal as refused:
            return _error(refused.code, refused.detail)
        answer = supervision.overview(entity, group=group, limit=limit, cursor=params.get("cursor"))
        return Response(SupervisionReadSerializer(answer).data)
