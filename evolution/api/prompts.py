"""What the loop and the judge read, as tools over REST (seed 003, "Overriding the prompts"; issue 29):

- the judge's method files: eval_list_methods, eval_get_method, eval_write_method (R2.28, R2.29);
- the loop's prompts as instruction modules: instruction_list, instruction_get, instruction_write_file,
  instruction_reset (R8.32, R8.33).

Reads are open to people and agents. A write is a commit on the brain's default branch (then a sync), made by a
staff person; an agent may dry-run one (validated, nothing written) and is refused the write itself. Send the
``sha`` a read answered to have the write refused ``conflict`` (409, naming the current sha) when the file moved
since. Refusals are ``{error, detail}``: invalid (400: the detail names what is wrong and where), refused (403),
not_found (404), conflict (409), unavailable (503: the brain cannot be read).
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

from evolution.api.settings import HTTP
from evolution.steering import instructions
from evolution.steering.methods import name_refusal, write_method
from evolution.steering.settings.base import INVALID, NOT_FOUND, REFUSED, SettingsRefusal
from grading.methods import get_method, list_methods
from singularity.apikit.errors import first_error
from singularity.auth import is_agent
from singularity.errors import SingularityError
from singularity.serializers import ErrorSerializer

UNAVAILABLE = "unavailable"

# --- Shapes -------------------------------------------------------------------------------------------------------


class MethodSerializer(serializers.Serializer):
    name = serializers.CharField()
    source = serializers.ChoiceField(
        choices=["engine", "engine-customised", "brain"],
        help_text="engine: the engine's text; engine-customised: the brain's copy of it; brain: the brain's own.",
    )
    path = serializers.CharField(help_text='The brain path, or "engine:<file>" for the engine\'s text.')
    sha = serializers.CharField(allow_null=True, help_text="SHA-256 of the file's bytes: what a write swaps against.")
    usedBy = serializers.ListField(child=serializers.CharField(), help_text='Graded entities using it now, "kind:id".')
    error = serializers.CharField(allow_null=True, help_text="Why the file does not load (null when it does).")


class MethodListSerializer(serializers.Serializer):
    methods = MethodSerializer(many=True)


class MethodDetailSerializer(MethodSerializer):
    content = serializers.CharField(allow_blank=True, help_text="The whole file.")


class WriteRequestSerializer(serializers.Serializer):
    content = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="The whole new file.")
    sha = serializers.CharField(
        required=False, allow_null=True, help_text="The sha a read answered: refused with conflict if it moved."
    )
    dry_run = serializers.BooleanField(required=False, default=False, help_text="Validate only; write nothing.")


class InstructionWriteRequestSerializer(WriteRequestSerializer):
    path = serializers.CharField(help_text='The module, e.g. "loop/proposer/workflow".')


class InstructionResetRequestSerializer(serializers.Serializer):
    path = serializers.CharField(help_text='The module, e.g. "loop/proposer/workflow".')
    sha = serializers.CharField(required=False, allow_null=True, help_text="The sha a read answered.")
    dry_run = serializers.BooleanField(required=False, default=False)


class FileWriteSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    path = serializers.CharField(help_text="The brain file written (or, reset, removed).")
    dryRun = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="Whether the write changes (or, dry run, would change) the file.")
    previousSha = serializers.CharField(allow_null=True, help_text="The sha of what was read before the write.")
    sha = serializers.CharField(allow_null=True, help_text="The sha of what is read after it.")
    diff = serializers.CharField(allow_blank=True, help_text="A unified diff of the brain's file.")
    commit = serializers.CharField(allow_null=True, help_text="The brain commit the write made (null: dry run).")


class InstructionLoopSerializer(serializers.Serializer):
    agents = serializers.ListField(child=serializers.CharField(), help_text="The loop's agents that read it.")
    when = serializers.CharField(help_text="When they read it.")


class InstructionSerializer(serializers.Serializer):
    path = serializers.CharField(help_text='"loop/<path>".')
    file = serializers.CharField(help_text="Where the brain's copy lives (constitution/Loop/<path>.md).")
    source = serializers.ChoiceField(choices=["engine", "brain"], help_text="Whose text the loop reads now.")
    sha = serializers.CharField(help_text="SHA-256 of the text read now: what a write swaps against.")
    loop = InstructionLoopSerializer()
    placeholders = serializers.ListField(child=serializers.CharField(), help_text="What the loop fills in it.")


class InstructionRowSerializer(InstructionSerializer):
    usedBy = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="Entities whose analysis reads it now (null: unknown).",
    )
    unread = serializers.CharField(allow_null=True, help_text="Why usedBy is null (the brain does not load).")


class InstructionListSerializer(serializers.Serializer):
    instructions = InstructionRowSerializer(many=True)


class InstructionDetailSerializer(InstructionSerializer):
    content = serializers.CharField(allow_blank=True)


def _refused(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


READ_REFUSALS = {503: _refused("unavailable: the brain cannot be read (the detail says why).")}
WRITE_REFUSALS = {
    400: _refused("invalid: the body, or the file (the detail names what is wrong and where)."),
    403: _refused("refused: not staff, or an agent's write (an agent may dry-run)."),
    404: _refused("not_found: no such module."),
    409: _refused("conflict: the file moved since the sha was read (the detail names the current sha)."),
    503: READ_REFUSALS[503],
}


# --- Helpers ------------------------------------------------------------------------------------------------------


def _error(code: str, detail: str, status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=status)


def _refusal(exc: SettingsRefusal) -> Response:
    return _error(exc.code, exc.detail, HTTP.get(exc.code, http.HTTP_400_BAD_REQUEST))


def _unavailable(exc: Exception) -> Response:
    return _error(UNAVAILABLE, f"the brain cannot be read: {exc}", http.HTTP_503_SERVICE_UNAVAILABLE)


def _body(request: Request, shape: type[serializers.Serializer]) -> dict[str, Any]:
    form = shape(data=request.data if isinstance(request.data, dict) else {})
    if not form.is_valid():
        raise SettingsRefusal(INVALID, first_error(form.errors))
    return dict(form.validated_data)


def _may_write(request: Request, op: str, data: dict[str, Any]) -> None:
    """SettingsRefusal(refused) unless a staff person writes, or anyone staff dry-runs (an agent included)."""
    if not request.user.is_staff:
        raise SettingsRefusal(REFUSED, f"{op}: only staff change what the loop and the judge read")
    if is_agent(request) and not data.get("dry_run"):
        raise SettingsRefusal(
            REFUSED, f"{op}: an agent may dry-run this write, not make it: it changes what every cycle reads"
        )


def _written(answer: Any) -> Response:
    return Response(FileWriteSerializer(answer.as_json()).data)


# --- The judge's methods ------------------------------------------------------------------------------------------


class EvalMethods(APIView):
    @extend_schema(
        operation_id="eval_list_methods",
        summary="eval_list_methods: every judge method (engine, engine-customised, brain) with the entities using it",
        responses={200: MethodListSerializer, **READ_REFUSALS},
    )
    def get(self, request: Request) -> Response:
        try:
            return Response(MethodListSerializer({"methods": list_methods()}).data)
        except SingularityError as exc:
            return _unavailable(exc)


class EvalMethod(APIView):
    @extend_schema(
        operation_id="eval_get_method",
        summary="eval_get_method: one judge method's file with the sha a write swaps against",
        responses={200: MethodDetailSerializer, 404: _refused("not_found: no such method."), **READ_REFUSALS},
    )
    def get(self, request: Request, name: str) -> Response:
        try:
            method = get_method(name)
        except SingularityError as exc:
            return _unavailable(exc)
        if method is None:
            return _error(NOT_FOUND, f"no judge method {name!r} at the brain's head", http.HTTP_404_NOT_FOUND)
        return Response(MethodDetailSerializer(method).data)

    @extend_schema(
        operation_id="eval_write_method",
        summary="eval_write_method: write constitution/Evaluation/Methods/<name>.md (dry run first)",
        description=(
            "The whole file, validated as the brain's load reads it: UTF-8, a frontmatter that parses, and the "
            "heading '# Run Evaluation'. The name none is reserved. Committed on the brain's default branch, then "
            "synced; name it in evaluation.method to use it."
        ),
        request=WriteRequestSerializer,
        responses={200: FileWriteSerializer, **WRITE_REFUSALS},
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            data = _body(request, WriteRequestSerializer)
            _may_write(request, "eval_write_method", data)
            if why := name_refusal(name):
                raise SettingsRefusal(INVALID, why)
            answer = write_method(
                name, data["content"], sha=data.get("sha"), actor=request.user.get_username(), dry_run=data["dry_run"]
            )
        except SettingsRefusal as exc:
            return _refusal(exc)
        except SingularityError as exc:
            return _unavailable(exc)
        return _written(answer)


# --- The loop's instruction modules -------------------------------------------------------------------------------


class Instructions(APIView):
    @extend_schema(
        operation_id="instruction_list",
        summary="instruction_list: every loop prompt, who reads it and when, and the entities whose analysis reads it",
        responses={200: InstructionListSerializer, **READ_REFUSALS},
    )
    def get(self, request: Request) -> Response:
        try:
            rows = instructions.instruction_list()
        except SingularityError as exc:
            return _unavailable(exc)
        return Response(InstructionListSerializer({"instructions": rows}).data)


class InstructionGet(APIView):
    @extend_schema(
        operation_id="instruction_get",
        summary="instruction_get: one loop prompt's text (the brain's copy, else the engine's) with its sha",
        parameters=[
            OpenApiParameter(
                "path", OpenApiTypes.STR, required=True, description='The module, e.g. "loop/proposer/workflow".'
            )
        ],
        responses={
            200: InstructionDetailSerializer,
            400: _refused("invalid: no path."),
            404: _refused("not_found: no such module (the detail lists them)."),
            **READ_REFUSALS,
        },
    )
    def get(self, request: Request) -> Response:
        path = request.query_params.get("path")
        if not path:
            return _error(INVALID, "path: name the module, e.g. loop/proposer/workflow", http.HTTP_400_BAD_REQUEST)
        try:
            row = instructions.instruction_get(path)
        except SettingsRefusal as exc:
            return _refusal(exc)
        except SingularityError as exc:
            return _unavailable(exc)
        return Response(InstructionDetailSerializer(row).data)


class InstructionWrite(APIView):
    @extend_schema(
        operation_id="instruction_write_file",
        summary="instruction_write_file: write the brain's copy of a loop prompt (the first write forks the template)",
        description=(
            "A placeholder the loop does not fill in that brief (a stale {{plan}}, or {{idea}} outside "
            "loop/proposer/idea) is refused invalid, naming it and its line. Committed on the brain's default "
            "branch, then synced."
        ),
        request=InstructionWriteRequestSerializer,
        responses={200: FileWriteSerializer, **WRITE_REFUSALS},
    )
    def post(self, request: Request) -> Response:
        try:
            data = _body(request, InstructionWriteRequestSerializer)
            _may_write(request, "instruction_write_file", data)
            answer = instructions.instruction_write_file(
                data["path"],
                data["content"],
                sha=data.get("sha"),
                actor=request.user.get_username(),
                dry_run=data["dry_run"],
            )
        except SettingsRefusal as exc:
            return _refusal(exc)
        except SingularityError as exc:
            return _unavailable(exc)
        return _written(answer)


class InstructionReset(APIView):
    @extend_schema(
        operation_id="instruction_reset",
        summary="instruction_reset: remove the brain's copy of a loop prompt, back to the engine's template",
        request=InstructionResetRequestSerializer,
        responses={200: FileWriteSerializer, **WRITE_REFUSALS},
    )
    def post(self, request: Request) -> Response:
        try:
            data = _body(request, InstructionResetRequestSerializer)
            _may_write(request, "instruction_reset", data)
            answer = instructions.instruction_reset(
                data["path"], sha=data.get("sha"), actor=request.user.get_username(), dry_run=data["dry_run"]
            )
        except SettingsRefusal as exc:
            return _refusal(exc)
        except SingularityError as exc:
            return _unavailable(exc)
        return _written(answer)
