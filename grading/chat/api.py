"""The REST API of chat episodes: list a role's episodes, read one with its turns, close one (a person).

``GET /api/episodes/?role=<slug>`` is eval_list_episodes (newest first,
``cursor`` and ``limit``), ``GET /api/episodes/<run id>/`` is eval_get_episode
(the shape, the grade, the turns). Reads are open to people and agents.
``POST /api/episodes/<run id>/close/`` is a person closing a role's open
episode by its id; an agent token is refused (an agent closes only its own
dialog, with agent_close_episode in its turn).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from grading.chat.episodes import close
from grading.chat.shape import episodes_of, rows
from grading.models import Entity, Episode
from singularity.auth import is_agent
from singularity.serializers import ErrorSerializer


class EpisodeGradeSerializer(serializers.Serializer):
    status = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField(allow_null=True)
    failure_category = serializers.CharField()
    error = serializers.CharField()


class EpisodeSerializer(serializers.Serializer):
    """An episode's shape, grade and numbers — never its words."""

    run_id = serializers.UUIDField()
    role = serializers.CharField()
    status = serializers.ChoiceField(choices=Episode.Status.values)
    surface = serializers.ChoiceField(choices=Episode.Surface.values)
    opened_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    closed_by = serializers.ChoiceField(choices=Episode.ClosedBy.values, allow_null=True)
    ending = serializers.CharField(help_text="went quiet, closed by the role, closed by a person, …, or still open")
    turns = serializers.IntegerField()
    duration_ms = serializers.IntegerField()
    mixed_versions = serializers.BooleanField(help_text="Its turns ran under two role versions: in no window.")
    run_status = serializers.CharField()
    cost_usd = serializers.CharField(help_text="Decimal text, USD.")
    grade = EpisodeGradeSerializer(allow_null=True)
    metrics = serializers.DictField(help_text="Every number on the grade: {metric id: value}.")
    people = serializers.DictField(help_text="People's medians on 0..1: {metric id: value}.")


class TurnSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["person", "role"])
    text = serializers.CharField()
    at = serializers.DateTimeField()
    version_hash = serializers.CharField(allow_null=True)
    tool_calls = serializers.ListField(child=serializers.DictField())
    error = serializers.CharField()


class EpisodeDetailSerializer(EpisodeSerializer):
    dialog = TurnSerializer(many=True)


class CloseAnswerSerializer(serializers.Serializer):
    closed = serializers.BooleanField(help_text="False when the episode had already ended.")
    episode = EpisodeSerializer(allow_null=True)


def _row(episode: Episode) -> dict[str, Any]:
    (row,) = rows([episode])
    return row.as_dict()


def _episode(run_id: uuid.UUID) -> Episode:
    return get_object_or_404(episodes_of_any(), pk=run_id)


def episodes_of_any() -> Any:
    return Episode.objects.select_related("execution", "execution__grade", "role", "counterpart_user")


@extend_schema(
    summary="List a role's episodes, newest first (eval_list_episodes)",
    parameters=[
        OpenApiParameter("role", OpenApiTypes.STR, required=True, description="The role's id (its slug)."),
    ],
    responses={200: EpisodeSerializer(many=True), 400: OpenApiResponse(ErrorSerializer), 404: ErrorSerializer},
)
class EpisodeList(generics.ListAPIView):
    serializer_class = EpisodeSerializer

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        slug = request.query_params.get("role", "")
        if not slug:
            return Response({"error": "invalid", "detail": "role: required (the role's id)"}, status=400)
        role = Entity.objects.filter(target_kind=Entity.TargetKind.ROLE, slug=slug).first()
        if role is None:
            return Response({"error": "not_found", "detail": f"role: {slug!r} names no chat role"}, status=404)
        page = self.paginate_queryset(episodes_of(role))
        assert page is not None
        return self.get_paginated_response([row.as_dict() for row in rows(page)])


class EpisodeDetail(APIView):
    @extend_schema(
        summary="Read one episode: its shape, grade, numbers and dialog (eval_get_episode)",
        responses={200: EpisodeDetailSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        episode = _episode(run_id)
        body = _row(episode)
        body["dialog"] = [
            {
                "seq": turn.seq,
                "role": turn.role,
                "text": turn.text,
                "at": turn.created_at,
                "version_hash": turn.version_hash or None,
                "tool_calls": turn.tool_calls,
                "error": turn.error,
            }
            for turn in episode.turns.order_by("seq")
        ]
        return Response(EpisodeDetailSerializer(body).data)


class EpisodeClose(APIView):
    @extend_schema(
        summary="Close a role's open episode by its id (a person; an agent token is refused)",
        request=None,
        responses={
            200: CloseAnswerSerializer,
            403: OpenApiResponse(ErrorSerializer, description="An agent: it closes only its own dialog."),
            404: ErrorSerializer,
        },
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        if is_agent(request):
            return Response(
                {"error": "refused", "detail": "an agent closes only its own dialog, with agent_close_episode"},
                status=status.HTTP_403_FORBIDDEN,
            )
        episode = _episode(run_id)
        closed = close(episode, Episode.ClosedBy.PERSON)
        return Response({"closed": closed is not None, "episode": _row(_episode(run_id)) if closed else None})
