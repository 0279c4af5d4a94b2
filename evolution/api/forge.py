"""The pull-request API for scripts: list, read (with its commit statuses), merge and close (``/api/forge/pulls/``).

The same functions the PR pages call (``evolution.pulls``): a merge goes
through the local forge's one door, with branch protection, then syncs the
brain and rings the cycle that waits on the request. Reading is for anyone
signed in; merging and closing are a person's (staff) — an agent's token is
refused, as the PR page's buttons refuse it (DESIGN decision 9). On GitHub
the list and a read answer what the repository holds; merging and closing
happen there (409 naming where). Fields are snake_case. A refusal is
``{error, detail}``: invalid (400), refused (403), not_found (404),
precondition (409: the forge refused, in its own words).
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

from evolution import pulls
from evolution.forges import get_forge
from evolution.forges.base import PullInfo
from evolution.forges.local import LocalForge
from evolution.models import PullRequest
from singularity.auth import is_agent
from singularity.errors import SingularityError
from singularity.serializers import ErrorSerializer

STATES = PullRequest.State.values
#: How many requests one list answers (a remote forge: its newest).
LIST_LIMIT = 100
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="not_found: the number names no pull request.")
REFUSED = OpenApiResponse(ErrorSerializer, description="refused: an agent's token, or a person who is not staff.")
PRECONDITION = OpenApiResponse(
    ErrorSerializer, description="precondition: the forge refused (not open, a required status, a conflict)."
)


# --- Shapes -------------------------------------------------------------------------------


class ForgePullSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    title = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=STATES)
    head = serializers.CharField(help_text="The branch proposed for merging.")
    base = serializers.CharField()
    head_sha = serializers.CharField(allow_blank=True)
    base_sha = serializers.CharField(allow_blank=True, help_text='The commit the branch was cut from ("" on GitHub).')
    merge_sha = serializers.CharField(allow_blank=True)
    merged_by = serializers.CharField(allow_blank=True)
    closed_by = serializers.CharField(allow_blank=True)
    auto_merge_armed = serializers.BooleanField()
    created_at = serializers.DateTimeField(allow_null=True)
    merged_at = serializers.DateTimeField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    url = serializers.CharField(help_text="Where a person reads it: the dashboard's page, or GitHub's.")


class PullListSerializer(serializers.Serializer):
    pulls = ForgePullSerializer(many=True)


class StatusSerializer(serializers.Serializer):
    context = serializers.CharField()
    state = serializers.ChoiceField(choices=["pending", "success", "failure", "error"])
    description = serializers.CharField(allow_blank=True)
    required = serializers.BooleanField(help_text="Whether branch protection requires it to be success.")
    updated_at = serializers.DateTimeField()


class PullDetailSerializer(ForgePullSerializer):
    body = serializers.CharField(allow_blank=True, help_text="The description, Markdown.")
    statuses = StatusSerializer(many=True, help_text="The head commit's statuses (the latest per context).")
    merge_blockers = serializers.ListField(
        child=serializers.CharField(), help_text="Why a merge would be refused now, one sentence each ([] when none)."
    )


class MovedSerializer(PullDetailSerializer):
    problems = serializers.ListField(
        child=serializers.CharField(),
        help_text="What did not follow the merge or close at once (the brain's sync, the cycle told); [] when all did.",
    )


# --- Reading ------------------------------------------------------------------------------


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)


def row_dict(row: PullRequest) -> dict[str, Any]:
    """One local request as the list answers it."""
    return {
        "number": row.number,
        "title": row.title,
        "state": row.state,
        "head": row.head,
        "base": row.base,
        "head_sha": row.head_sha,
        "base_sha": row.base_sha,
        "merge_sha": row.merge_sha,
        "merged_by": row.merged_by,
        "closed_by": row.closed_by,
        "auto_merge_armed": bool(row.auto_merge),
        "created_at": row.created_at,
        "merged_at": row.merged_at,
        "closed_at": row.closed_at,
        "url": row.get_absolute_url(),
    }


def info_dict(info: PullInfo) -> dict[str, Any]:
    """One remote request (GitHub) as the list answers it."""
    return {
        "number": info.number,
        "title": info.title,
        "state": info.state,
        "head": info.head,
        "base": info.base,
        "head_sha": info.head_sha,
        "base_sha": "",
        "merge_sha": info.merge_sha,
        "merged_by": info.merged_by,
        "closed_by": "",
        "auto_merge_armed": bool(info.auto_merge),
        "created_at": info.opened_at,
        "merged_at": info.merged_at,
        "closed_at": info.closed_at,
        "url": info.url,
    }


def detail_dict(number: int) -> dict[str, Any] | None:
    """The local request with its body, statuses and blockers; None when the number names none."""
    row = PullRequest.objects.filter(number=number).first()
    if row is None:
        return None
    forge = LocalForge()
    try:
        forge.get_pull(number)  # follows a head branch that moved
        row.refresh_from_db()
    except SingularityError:
        pass  # the row as stored is still the answer; the page shows the same
    required = forge.required_statuses()
    statuses = [
        {
            "context": shown["status"].context,
            "state": shown["status"].state,
            "description": shown["status"].description,
            "required": shown["required"],
            "updated_at": shown["status"].updated_at,
        }
        for shown in pulls.marked(forge.statuses(row.head_sha), required)
    ]
    blockers = forge.merge_blockers(row) if row.state == PullRequest.State.OPEN else []
    return {**row_dict(row), "body": row.body, "statuses": statuses, "merge_blockers": blockers}


def _remote_refusal(number: int) -> Response | None:
    """409 naming where the request lives when the forge is not the local one; None on the local forge."""
    forge = get_forge()
    if forge.name == "local":
        return None
    return _error(
        "precondition",
        f"pull requests live on {forge.name}: merge or close PR #{number} there ({forge.pull_url(number)})",
        http.HTTP_409_CONFLICT,
    )


class MergeRequestSerializer(serializers.Serializer):
    anyway = serializers.BooleanField(
        required=False,
        default=False,
        help_text=(
            "Merge though the pre-merge check could not show the change works (autonomy.onInconclusive: human): "
            "singularity/validation turns success on your word first."
        ),
    )


# --- Endpoints ----------------------------------------------------------------------------


class ForgePulls(APIView):
    @extend_schema(
        operation_id="forge_list_pulls",
        summary="The forge's pull requests, open first then newest (at most 100); filter by state",
        parameters=[OpenApiParameter("state", OpenApiTypes.STR, enum=STATES, description="open, merged or closed.")],
        responses={200: PullListSerializer, 400: OpenApiResponse(ErrorSerializer, description="invalid: the state.")},
    )
    def get(self, request: Request) -> Response:
        state = request.query_params.get("state") or ""
        if state and state not in STATES:
            return _error("invalid", f"state: {state!r} is not open, merged or closed", http.HTTP_400_BAD_REQUEST)
        forge = get_forge()
        if forge.name != "local":
            try:
                listed = [info_dict(i) for i in forge.list_pulls(limit=LIST_LIMIT)]
            except SingularityError as exc:
                return _error("precondition", f"{forge.name} did not answer: {exc}", http.HTTP_409_CONFLICT)
            shown = [p for p in listed if not state or p["state"] == state]
        else:
            shown = [row_dict(row) for row in pulls.open_first(state or None)[:LIST_LIMIT]]
        return Response(PullListSerializer({"pulls": shown}).data)


class ForgePull(APIView):
    @extend_schema(
        operation_id="forge_get_pull",
        summary="One pull request: its description, its head commit's statuses (required ones marked), what blocks a merge",
        responses={200: PullDetailSerializer, 404: NOT_FOUND, 409: PRECONDITION},
    )
    def get(self, request: Request, number: int) -> Response:
        remote = _remote_refusal(number)
        if remote is not None:
            return remote
        detail = detail_dict(number)
        if detail is None:
            return _error("not_found", f"there is no pull request #{number}", http.HTTP_404_NOT_FOUND)
        return Response(PullDetailSerializer(detail).data)


class _Move(APIView):
    """A person's merge or close: staff only, never an agent; the forge's refusal is 409 in its own words."""

    verb = ""

    def post(self, request: Request, number: int) -> Response:
        if is_agent(request):
            return _error(
                "refused", f"an agent may not {self.verb} a pull request: a person does", http.HTTP_403_FORBIDDEN
            )
        if not request.user.is_staff:
            return _error(
                "refused",
                f"only staff {self.verb} a pull request ({request.user} is not staff)",
                http.HTTP_403_FORBIDDEN,
            )
        if not PullRequest.objects.filter(number=number).exists():
            remote = _remote_refusal(number)
            if remote is not None:
                return remote
            return _error("not_found", f"there is no pull request #{number}", http.HTTP_404_NOT_FOUND)
        remote = _remote_refusal(number)
        if remote is not None:
            return remote
        options: dict[str, Any] = {}
        if self.verb == "merge":
            body = request.data if isinstance(request.data, dict) else {}
            anyway = body.get("anyway", False)
            if not isinstance(anyway, bool):
                return _error(
                    "invalid", f"anyway: must be true or false, not {anyway!r}"[:200], http.HTTP_400_BAD_REQUEST
                )
            options["anyway"] = anyway
        act = pulls.merge if self.verb == "merge" else pulls.close
        try:
            moved = act(number, by=request.user.get_username(), **options)
        except SingularityError as exc:  # ForgeError, or a forge that cannot be reached (its repository, git)
            return _error("precondition", f"not {self.verb}d: {exc}", http.HTTP_409_CONFLICT)
        detail = detail_dict(number) or {}
        return Response(MovedSerializer({**detail, "problems": moved.problems}).data)


class ForgeMerge(_Move):
    verb = "merge"

    @extend_schema(
        operation_id="forge_merge_pull",
        summary="Merge an open pull request as a person (branch protection holds); the brain syncs, its cycle moves",
        request=MergeRequestSerializer,
        responses={
            200: MovedSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: anyway is not a boolean."),
            403: REFUSED,
            404: NOT_FOUND,
            409: PRECONDITION,
        },
    )
    def post(self, request: Request, number: int) -> Response:
        return super().post(request, number)


class ForgeClose(_Move):
    verb = "close"

    @extend_schema(
        operation_id="forge_close_pull",
        summary="Close an open pull request unmerged as a person; its cycle moves",
        request=None,
        responses={200: MovedSerializer, 403: REFUSED, 404: NOT_FOUND, 409: PRECONDITION},
    )
    def post(self, request: Request, number: int) -> Response:
        return super().post(request, number)
