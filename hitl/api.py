"""The cards API: list and read cards, answer or cancel one (a person only), list notices.

An agent token may read everything but never answers or cancels a card: it is
refused with 403 ``{"code": "unauthorized_responder"}`` and the card stays pending.
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from hitl.actions import AnswerResult, answer_card, cancel_card
from hitl.models import Card, Notice
from hitl.serializers import AnswerSerializer, CancelSerializer, CardSerializer, NoticeSerializer, RefusalSerializer
from singularity.auth import is_agent

HTTP_STATUS = {
    "unauthorized_responder": status.HTTP_403_FORBIDDEN,
    "already_closed": status.HTTP_409_CONFLICT,
    "invalid": status.HTTP_400_BAD_REQUEST,
    "not_found": status.HTTP_404_NOT_FOUND,
}
REFUSALS = {
    400: OpenApiResponse(RefusalSerializer, description="`invalid`: not one of the card's options."),
    403: OpenApiResponse(
        RefusalSerializer, description="`unauthorized_responder`: an agent token; a person must answer."
    ),
    409: OpenApiResponse(
        RefusalSerializer, description="`already_closed`: answered, expired or cancelled before; says who and when."
    ),
}


def _respond(result: AnswerResult, request: Request) -> Response:
    """Return the card when ``result`` is ok, else the refusal with its status."""
    if not result.ok:
        body = {"error": result.code, "code": result.code, "detail": result.detail}
        return Response(body, status=HTTP_STATUS[result.code])
    card = Card.objects.prefetch_related("deliveries").get(pk=result.card.pk)  # type: ignore[union-attr]
    return Response(CardSerializer(card, context={"request": request}).data)


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter(
                "status", OpenApiTypes.STR, enum=Card.Status.values, description="Only cards in this status."
            ),
            OpenApiParameter("kind", OpenApiTypes.STR, enum=Card.Kind.values, description="Only cards of this kind."),
        ]
    )
)
class CardViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Cards, newest first."""

    serializer_class = CardSerializer

    def get_queryset(self) -> QuerySet[Card]:
        cards = (
            Card.objects.select_related("responded_by").prefetch_related("deliveries").order_by("-created_at", "-id")
        )
        for field in ("status", "kind"):
            value = self.request.query_params.get(field)
            if value:
                cards = cards.filter(**{field: value})
        return cards

    @extend_schema(request=AnswerSerializer, responses={200: CardSerializer, **REFUSALS})
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        """Answer the card as the signed-in person; the producer's handler hears it once."""
        card = self.get_object()
        serializer = AnswerSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = answer_card(
            card.pk, user=request.user, is_agent=is_agent(request), via=Card.Via.API, **serializer.validated_data
        )
        return _respond(result, request)

    @extend_schema(request=CancelSerializer, responses={200: CardSerializer, 403: REFUSALS[403], 409: REFUSALS[409]})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the card as the signed-in person; the producer's handler hears it once."""
        card = self.get_object()
        serializer = CancelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = cancel_card(
            card.pk, user=request.user, is_agent=is_agent(request), via=Card.Via.API, **serializer.validated_data
        )
        return _respond(result, request)


class NoticeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Notices, newest first."""

    serializer_class = NoticeSerializer
    queryset = Notice.objects.order_by("-created_at", "-id")
