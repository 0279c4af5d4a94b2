"""The loop's REST API: loop_status, loop_history, loop_get, loop_get_cycle and loop_analyze (seed 003).

Reads are open to people and agents (token or session). ``targetKind`` +
``targetId`` name one entity; both absent mean the whole fleet; naming only
one half is refused. ``POST /api/loop/analyze/`` is "Analyze now": a person's
ask opens the cycle; an agent token's opens a person's approval card
(``evolution.loop.analyze_ask``, R20.25), whose Approve opens it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.api.serializers import (
    AnalyzeAnswerSerializer,
    AnalyzeRequestSerializer,
    CycleDetailSerializer,
    EntityStatusSerializer,
    HistorySerializer,
    LoopGetSerializer,
    LoopStatusSerializer,
    represent,
    shape,
)
from evolution.reads import fleet, history, status, story
from singularity.apikit.camel import camel
from singularity.apikit.pagination import PAGING
from singularity.auth import is_agent
from singularity.serializers import ErrorSerializer

INVALID = OpenApiResponse(ErrorSerializer, description="invalid: `detail` names the parameter.")
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="not_found: the entity or cycle names nothing.")
TARGET = [
    OpenApiParameter("targetKind", OpenApiTypes.STR, description="scenario, heartbeat or role (with targetId)."),
    OpenApiParameter("targetId", OpenApiTypes.STR, description="The entity's slug (with targetKind)."),
]


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)


def _refusal(exc: Exception) -> Response:
    """A status refusal as HTTP: NotFound → 404 not_found, ValueError → 400 invalid."""
    if isinstance(exc, status.NotFound):
        return _error("not_found", str(exc), http.HTTP_404_NOT_FOUND)
    return _error("invalid", str(exc), http.HTTP_400_BAD_REQUEST)


def _target(request: Request) -> tuple[str | None, str | None]:
    return request.query_params.get("target_kind") or None, request.query_params.get("target_id") or None


class LoopStatus(APIView):
    @extend_schema(
        operation_id="loop_status",
        summary="loop_status: the fleet, or one entity — state, live cycle, what comes next, what needs a person",
        parameters=[
            *TARGET,
            *PAGING,
        ],
        responses={200: LoopStatusSerializer, 400: INVALID, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        try:
            answer = fleet.status_for(
                *_target(request),
                limit=request.query_params.get("limit"),
                cursor=request.query_params.get("cursor"),
            )
        except (ValueError, status.NotFound) as exc:
            return _refusal(exc)
        return Response(represent(shape(LoopStatusSerializer), answer))  # DRF's shape, read without its field walk


class LoopHistory(APIView):
    @extend_schema(
        operation_id="loop_history",
        summary="loop_history: one row per cycle, newest opening first, with cursor paging",
        parameters=[
            *TARGET,
            OpenApiParameter(
                "since", OpenApiTypes.DATETIME, description="Cycles that moved (opened, advanced, settled) at or after."
            ),
            OpenApiParameter(
                "feature",
                OpenApiTypes.STR,
                description="The entities the feature ships now (the folder under features/ their file is in).",
            ),
            *PAGING,
        ],
        description="targetKind alone narrows to that kind; a parameter that is no filter is refused (400), "
        "never ignored.",
        responses={200: HistorySerializer, 400: INVALID, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        unknown = history.unknown_filter(camel(name) for name in params)
        if unknown:
            return _error("invalid", unknown, http.HTTP_400_BAD_REQUEST)
        try:
            answer = history.history(
                *_target(request),
                since=params.get("since") or None,
                limit=params.get("limit"),
                cursor=params.get("cursor") or None,
                feature=params.get("feature") or None,
            )
        except (ValueError, status.NotFound) as exc:
            return _refusal(exc)
        return Response(HistorySerializer(answer).data)


#: loop_get's parameters; anything else is refused naming it.
GET_PARAMETERS = ("targetKind", "targetId", "limit", "cursor")


class LoopGet(APIView):
    @extend_schema(
        operation_id="loop_get",
        summary="loop_get: one entity whole — its loop_status entry and its cycles, newest opening first, with grades",
        parameters=[
            *TARGET,
            *PAGING,
        ],
        responses={200: LoopGetSerializer, 400: INVALID, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        odd = next((camel(name) for name in params if camel(name) not in GET_PARAMETERS and name != "format"), None)
        if odd is not None:
            detail = f"{odd}: not a loop_get parameter (the parameters are {', '.join(GET_PARAMETERS)})"
            return _error("invalid", detail, http.HTTP_400_BAD_REQUEST)
        kind, slug = _target(request)
        try:
            if not kind or not slug:
                missing = "targetKind" if not kind else "targetId"
                raise ValueError(f"{missing}: loop_get reads one entity: name both targetKind and targetId")
            entity = status.entity_named(kind, slug)
            (row,) = fleet.loop_status(entity)["entities"]
            cycles = history.history(
                entity.target_kind, entity.slug, limit=params.get("limit"), cursor=params.get("cursor") or None
            )
        except (ValueError, status.NotFound) as exc:
            return _refusal(exc)
        body = {"entity": represent(shape(EntityStatusSerializer), row), **HistorySerializer(cycles).data}
        return Response(body)


class LoopCycle(APIView):
    @extend_schema(
        operation_id="loop_get_cycle",
        summary="loop_get_cycle: a cycle with its rounds, check pairs, window, watch, lessons and grade",
        responses={200: CycleDetailSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, pk: int) -> Response:
        try:
            cycle = story.get_cycle(pk)
        except status.NotFound as exc:
            return _refusal(exc)
        return Response(CycleDetailSerializer(story.cycle_detail(cycle)).data)


class LoopAnalyze(APIView):
    @extend_schema(
        operation_id="loop_analyze",
        summary="loop_analyze: Analyze now — open a cycle on request (an agent's ask waits on a person's card)",
        description=(
            "Opens a cycle for the entity on request (exempt from cooldownHours and maxAnalysesPerDay), or "
            "answers why not (another cycle holds the entity, the loop is off, …) with the row recording it. "
            "An agent token's ask opens a person's approval card instead (202, cardId; asking again finds it): "
            "the person's Approve opens the cycle. An ask the gates refuse now is 409 precondition, no card."
        ),
        request=AnalyzeRequestSerializer,
        responses={
            200: AnalyzeAnswerSerializer,
            202: OpenApiResponse(AnalyzeAnswerSerializer, description="An agent's ask waits on a person's card."),
            400: INVALID,
            404: NOT_FOUND,
            409: OpenApiResponse(ErrorSerializer, description="precondition: no cycle can open now (the reason)."),
            429: OpenApiResponse(ErrorSerializer, description="too_many_pending: the agent's asks are at the cap."),
        },
    )
    def post(self, request: Request) -> Response:
        from evolution.loop.trigger import analyze_now

        data = request.data if isinstance(request.data, dict) else {}
        form = AnalyzeRequestSerializer(data=data)
        if not form.is_valid():
            return _error("invalid", _first_error(form.errors), http.HTTP_400_BAD_REQUEST)
        try:
            entity = status.entity_named(form.validated_data["target_kind"], form.validated_data["target_id"])
        except (ValueError, status.NotFound) as exc:
            return _refusal(exc)
        if is_agent(request):
            return _agent_asks(request, entity)
        answer = analyze_now(entity, user=request.user)
        body = {
            "cycleId": answer.cycle.pk if answer.cycle else None,
            "opened": answer.opened,
            "reason": answer.reason,
            "cardId": None,
        }
        return Response(AnalyzeAnswerSerializer(body).data)


def _agent_asks(request: Request, entity: Any) -> Response:
    """An agent's loop_analyze: a person's approval card (202), or 409/429 with the reason and nothing written."""
    from evolution.loop import analyze_ask
    from evolution.steering import asks

    asker = asks.asker_for(request.user.get_username(), request.auth.name)
    try:
        card = analyze_ask.ask(entity, asker=asker)
    except analyze_ask.AnalyzeRefused as refused:
        code = http.HTTP_429_TOO_MANY_REQUESTS if refused.code == asks.TOO_MANY else http.HTTP_409_CONFLICT
        return _error(refused.code, refused.detail, code)
    body = {
        "cycleId": None,
        "opened": False,
        "reason": f"waiting on a person's approval (card {card.pk}, until {card.expires_at.isoformat()})",
        "cardId": str(card.pk),
    }
    return Response(AnalyzeAnswerSerializer(body).data, status=http.HTTP_202_ACCEPTED)


def _first_error(errors: dict[str, Any]) -> str:
    """The first field error as "field: message"."""
    for field, messages in errors.items():
        message = messages[0] if isinstance(messages, list) and messages else messages
        return f"{camel(field)}: {message}"
    return "the body is not valid"
