"""The ideas API: loop_create_idea, loop_list_ideas, loop_cancel_idea (seed 003 "Ideas").

Every call goes through ``evolution.ideas`` — the same functions the Ideas
panel and ``/idea`` in Telegram use. A person's post asks for its cycle at
once; an agent token's post is accepted and waits on a person's approval card
(opened False, reason "waiting on a person's approval"). A refused post
writes nothing: 409 ``precondition`` with the reason (as the other loop
writes answer a failed precondition), 404 ``not_found`` for an entity that
does not exist.
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

from evolution.loop import intake
from evolution.models import Idea
from evolution.reads import status
from evolution.steering import asks, ideas
from singularity.auth import is_agent
from singularity.models import ApiToken
from singularity.serializers import ErrorSerializer

#: The most ideas one list answers (oldest first).
LIST_LIMIT = 500
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="not_found: the entity or the idea names nothing.")


class IdeaRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField(help_text="scenario, heartbeat or role")
    target_id = serializers.CharField(help_text="The entity's slug.")
    text = serializers.CharField(
        allow_blank=True, trim_whitespace=False, help_text=f"The hypothesis, at most {ideas.MAX_CHARS} characters."
    )


class IdeaAnswerSerializer(serializers.Serializer):
    ideaId = serializers.IntegerField()
    opened = serializers.BooleanField(help_text="Whether the idea's cycle started now.")
    reason = serializers.CharField(help_text="The cycle opened, or why the idea waits (it stays queued).")
    cycleId = serializers.IntegerField(allow_null=True, help_text="The cycle opened on it, when one did.")


class IdeaSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    text = serializers.CharField()
    author = serializers.CharField()
    status = serializers.CharField(
        help_text="queued, awaiting approval, withdrawn, live, or the terminal its cycle settled at"
    )
    place = serializers.CharField(help_text='"next", "#2 in queue", … while queued; "" once it left the queue.')
    cycleId = serializers.IntegerField(allow_null=True)
    createdAt = serializers.DateTimeField()
    withdrawnAt = serializers.DateTimeField(allow_null=True)


class IdeaListSerializer(serializers.Serializer):
    ideas = IdeaSerializer(many=True)
    waitsOn = serializers.CharField(help_text='What the head of the queue waits on (one entity named), else "".')


class WithdrawAnswerSerializer(serializers.Serializer):
    withdrawn = serializers.BooleanField(help_text="The idea's state after the call (a second withdraw: true again).")
    reason = serializers.CharField()
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    cardId = serializers.CharField(
        allow_null=True, help_text="An agent's withdraw of someone else's idea: the approval card it waits on."
    )


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)


def actor(request: Request) -> str:
    """Who posted: the user's name, and the token when one was used."""
    if isinstance(request.auth, ApiToken):
        kind = "agent token" if request.auth.is_agent else "token"
        return f"{request.user.get_username()} ({kind} {request.auth.name})"
    return request.user.get_username()


#: An IdeaRefused's code → its status (anything else is 400); a failed precondition is 409, as in the other writes.
REFUSED_HTTP = {
    "not_found": http.HTTP_404_NOT_FOUND,
    "precondition": http.HTTP_409_CONFLICT,
    asks.TOO_MANY: http.HTTP_429_TOO_MANY_REQUESTS,
}


def asker_of(request: Request) -> str:
    """Whose asks an agent's idea card counts against ("agent:<token name> of <username>"); "" for a person."""
    if is_agent(request):
        return asks.asker_for(request.user.get_username(), request.auth.name)
    return ""


def idea_dict(idea: Idea, place: str | None = None) -> dict[str, Any]:
    """One idea as the API answers it."""
    return {
        "id": idea.pk,
        "targetKind": idea.entity.target_kind,
        "targetId": idea.entity.slug,
        "text": idea.text,
        "author": idea.author,
        "status": ideas.state_of(idea),
        "place": ideas.place(idea) if place is None else place,
        "cycleId": idea.cycle_id,
        "createdAt": idea.created_at,
        "withdrawnAt": idea.withdrawn_at,
    }


class LoopIdeas(APIView):
    @extend_schema(
        operation_id="loop_list_ideas",
        summary="loop_list_ideas: an entity's ideas (or every entity's), oldest first, and what the queue waits on",
        parameters=[
            OpenApiParameter(
                "targetKind", OpenApiTypes.STR, description="scenario, heartbeat or role (with targetId)."
            ),
            OpenApiParameter("targetId", OpenApiTypes.STR, description="The entity's slug (with targetKind)."),
        ],
        responses={200: IdeaListSerializer, 400: OpenApiResponse(ErrorSerializer), 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        try:
            entity = status.entity_named(params.get("target_kind") or None, params.get("target_id") or None)
        except status.NotFound as exc:
            return _error("not_found", str(exc), http.HTTP_404_NOT_FOUND)
        except ValueError as exc:
            return _error("invalid", str(exc), http.HTTP_400_BAD_REQUEST)
        listed = Idea.objects.select_related("entity", "cycle").order_by("created_at", "id")
        if entity is not None:
            listed = listed.filter(entity=entity)
        shown = list(listed[:LIST_LIMIT])
        where = ideas.places(shown)
        body = {
            "ideas": [idea_dict(i, where[i.pk]) for i in shown],
            "waitsOn": intake.waits_on(entity) if entity is not None else "",
        }
        return Response(IdeaListSerializer(body).data)

    @extend_schema(
        operation_id="loop_create_idea",
        summary="loop_create_idea: post a hypothesis for one entity; its next cycle works it",
        description=(
            "Writes the idea and asks for its cycle at once: opened true when the cycle started, else opened "
            "false with the reason (an unsettled cycle, an earlier idea ahead) — the idea is queued, do not post "
            "it again. An agent token's idea waits on a person's approval card (opened false, reason "
            '"waiting on a person\'s approval"). Refused with nothing written (409 precondition) when the entity '
            f"is not in the loop or switched off, or the text is empty or longer than {ideas.MAX_CHARS} characters."
        ),
        request=IdeaRequestSerializer,
        responses={
            201: IdeaAnswerSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid (the body)."),
            409: OpenApiResponse(ErrorSerializer, description="precondition: the reason, nothing written."),
            429: OpenApiResponse(
                ErrorSerializer,
                description="too_many_pending: the agent's cards waiting on people are at the cap (named).",
            ),
            404: NOT_FOUND,
        },
    )
    def post(self, request: Request) -> Response:
        form = IdeaRequestSerializer(data=request.data if isinstance(request.data, dict) else {})
        if not form.is_valid():
            field, messages = next(iter(form.errors.items()))
            return _error("invalid", f"{field}: {messages[0]}", http.HTTP_400_BAD_REQUEST)
        data = form.validated_data
        try:
            entity = status.entity_named(data["target_kind"], data["target_id"])
        except status.NotFound as exc:
            return _error("not_found", str(exc), http.HTTP_404_NOT_FOUND)
        except ValueError as exc:  # a kind that is no kind (an old name reads as its kind)
            return _error("invalid", str(exc), http.HTTP_400_BAD_REQUEST)
        try:
            posted = intake.post(
                entity, data["text"], author=actor(request), is_agent=is_agent(request), asker=asker_of(request)
            )
        except status.NotFound as exc:
            return _error("not_found", str(exc), http.HTTP_404_NOT_FOUND)
        except ideas.IdeaRefused as exc:
            return _error(exc.code, exc.reason, REFUSED_HTTP.get(exc.code, http.HTTP_400_BAD_REQUEST))
        body = {
            "ideaId": posted.idea.pk,
            "opened": posted.opened,
            "reason": posted.reason,
            "cycleId": posted.cycle.pk if posted.cycle is not None else None,
        }
        return Response(IdeaAnswerSerializer(body).data, status=http.HTTP_201_CREATED)


class LoopIdeaWithdraw(APIView):
    @extend_schema(
        operation_id="loop_cancel_idea",
        summary="loop_cancel_idea: withdraw a queued idea (answers its state after the call)",
        description=(
            "withdrawn true once the idea is withdrawn — again on a second call. An idea a cycle already took "
            "stays that cycle's hypothesis: withdrawn false with the reason (stop it at the decide gate). An agent "
            "withdrawing an idea it did not post opens a person's approval card (202, cardId; asking again finds it)."
        ),
        request=None,
        responses={
            200: WithdrawAnswerSerializer,
            202: OpenApiResponse(WithdrawAnswerSerializer, description="An agent's ask waits on a person's card."),
            404: NOT_FOUND,
            429: OpenApiResponse(ErrorSerializer, description="too_many_pending: the agent's asks are at the cap."),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        idea = Idea.objects.select_related("entity", "card").filter(pk=pk).first()
        if idea is None:
            return _error("not_found", f"idea {pk} names no idea", http.HTTP_404_NOT_FOUND)
        person = None if is_agent(request) else request.user
        try:
            if person is None and idea.author != actor(request):  # someone else's idea: a person approves (R18.13)
                answer = ideas.ask_withdraw(idea, asker=asker_of(request))
            else:
                answer = ideas.withdraw(idea, actor(request), user=person)
        except ideas.IdeaRefused as exc:
            return _error(exc.code, exc.reason, REFUSED_HTTP.get(exc.code, http.HTTP_400_BAD_REQUEST))
        body = {
            "withdrawn": answer.withdrawn,
            "reason": answer.reason,
            "targetKind": idea.entity.target_kind,
            "targetId": idea.entity.slug,
            "cardId": str(answer.card.pk) if answer.card is not None else None,
        }
        code = http.HTTP_202_ACCEPTED if answer.card is not None else http.HTTP_200_OK
        return Response(WithdrawAnswerSerializer(body).data, status=code)
