"""The REST API for beings: list, create, read, cycles, journal, start and stop.

Agents (API tokens marked as agents) may read and stop; only a person may
create or start a being, because that spends money.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from singularity.auth import is_agent
from singularity.being.actions import create_being, request_stop, start_on_workers
from singularity.errors import ConfigError, StateError
from singularity.models import ApiToken, Being, Event
from singularity.serializers import (
    BeingCreateSerializer,
    BeingDetailSerializer,
    BeingSummarySerializer,
    CycleSerializer,
    ErrorSerializer,
    EventSerializer,
)

REFUSED = OpenApiResponse(ErrorSerializer, description="An agent token asked for what only a person may do.")
CONFLICT = OpenApiResponse(ErrorSerializer, description="The being's state does not allow it.")
INVALID = OpenApiResponse(ErrorSerializer, description="Bad input; `detail` names the field.")


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents ``ApiTokenAuthentication`` as HTTP bearer auth in the schema."""

    target_class = "singularity.auth.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An API token: `python manage.py api_token`."}


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)


def _refuse_agent(request: Request, what: str) -> Response | None:
    """A 403 response when an agent token asks to ``what``; None for a person."""
    if is_agent(request):
        return _error("refused", f"agents may not {what}; a person must", status.HTTP_403_FORBIDDEN)
    return None


def _actor(request: Request) -> str:
    """Who to name in the journal: the user, and the token when one was used."""
    if isinstance(request.auth, ApiToken):
        kind = "agent token" if request.auth.is_agent else "token"
        return f"{request.user.get_username()} ({kind} {request.auth.name})"
    return request.user.get_username()


def _act(change: Callable[..., Being], being: Being, request: Request) -> Response:
    """Call ``change`` and answer with the being, or with the refusal as 409 (state) or 400 (config)."""
    try:
        change(being, by=_actor(request))
    except StateError as exc:
        return _error("conflict", str(exc), status.HTTP_409_CONFLICT)
    except ConfigError as exc:
        return _error("invalid", str(exc), status.HTTP_400_BAD_REQUEST)
    return Response(BeingDetailSerializer(being, context={"request": request}).data)


class BeingViewSet(viewsets.GenericViewSet):
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}"
    serializer_class = BeingDetailSerializer

    def get_queryset(self) -> QuerySet[Being]:
        beings = Being.objects.select_related("parent").order_by("name")
        if self.action == "retrieve":
            beings = beings.prefetch_related("children")
        return beings

    @extend_schema(summary="List beings", responses=BeingSummarySerializer(many=True))
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(BeingSummarySerializer(page, many=True, context={"request": request}).data)

    @extend_schema(
        summary="Create a being (people only)",
        request=BeingCreateSerializer,
        responses={201: BeingDetailSerializer, 400: INVALID, 403: REFUSED},
    )
    def create(self, request: Request) -> Response:
        if refusal := _refuse_agent(request, "create beings"):
            return refusal
        form = BeingCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            being = create_being(data["name"], starting=data["starting_usd"], stimulus=data["stimulus"])
        except ConfigError as exc:
            return _error("invalid", str(exc), status.HTTP_400_BAD_REQUEST)
        return Response(BeingDetailSerializer(being, context={"request": request}).data, status=201)

    @extend_schema(summary="Read a being: status, cycle, budget, net profit and mind")
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(BeingDetailSerializer(self.get_object(), context={"request": request}).data)

    @extend_schema(summary="A being's cycles, newest first", responses=CycleSerializer(many=True))
    @action(detail=True, methods=["get"])
    def cycles(self, request: Request, name: str) -> Response:
        cycles = self.get_object().cycles.defer("messages").order_by("-number", "-id")
        page = self.paginate_queryset(cycles)
        return self.get_paginated_response(CycleSerializer(page, many=True).data)

    @extend_schema(
        summary="A being's journal, in seq order",
        parameters=[
            OpenApiParameter("kind", OpenApiTypes.STR, enum=Event.Kind.values, description="Only events of this kind."),
            OpenApiParameter("after_seq", OpenApiTypes.INT, description="Only events after this seq (for tailing)."),
        ],
        responses={200: EventSerializer(many=True), 400: INVALID},
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, name: str) -> Response:
        events = self.get_object().events.order_by("seq", "id")
        kind, after = request.query_params.get("kind"), request.query_params.get("after_seq")
        if kind:
            if kind not in Event.Kind.values:
                return _error("invalid", f"kind: {kind!r} is not one of {', '.join(Event.Kind.values)}", 400)
            events = events.filter(kind=kind)
        if after:
            if not after.isdigit():
                return _error("invalid", f"afterSeq: {after!r} is not a non-negative integer", 400)
            events = events.filter(seq__gt=int(after))
        page = self.paginate_queryset(events)
        return self.get_paginated_response(EventSerializer(page, many=True).data)

    @extend_schema(
        summary="Start a being on the workers, or resume it (people only)",
        request=None,
        responses={200: BeingDetailSerializer, 403: REFUSED, 409: CONFLICT},
    )
    @action(detail=True, methods=["post"])
    def start(self, request: Request, name: str) -> Response:
        if refusal := _refuse_agent(request, "start beings"):
            return refusal
        return _act(start_on_workers, self.get_object(), request)

    @extend_schema(
        summary="Stop a being (people and agents)",
        request=None,
        responses={200: BeingDetailSerializer, 409: CONFLICT},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, name: str) -> Response:
        return _act(request_stop, self.get_object(), request)
