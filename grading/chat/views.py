"""The dashboard's chat pages: talk to a role as yourself, close the dialog, read an episode's transcript.

``/evolution/chat/<slug>/`` shows the viewer's open episode with the role and
a send box (HTMX swaps the turns in place; without JavaScript the form posts
and redirects back). The person is the logged-in user. Every message goes
through ``grading.chat.episodes.say`` and every close through ``close``.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from grading.chat.episodes import Counterpart, close, open_episode, say
from grading.chat.shape import ending, rows
from grading.models import Entity, Episode
from singularity.errors import ConfigError, StateError

#: The chat page lists the viewer's last few ended dialogs with the role.
RECENT = 5


def _get_role(slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=Entity.TargetKind.ROLE, slug=slug)


def _chat_context(role: Entity, user: object, error: str = "") -> dict[str, object]:
    counterpart = Counterpart(user=user)
    episode = open_episode(role, counterpart)
    recent = Episode.objects.filter(role=role, counterpart_user=user, status=Episode.Status.CLOSED)
    return {
        "role": role,
        "episode": episode,
        "turns": list(episode.turns.order_by("seq")) if episode else [],
        "error": error,
        "recent": list(recent.order_by("-opened_at")[:RECENT]),
    }


def _answer(request: HttpRequest, role: Entity, error: str = "") -> HttpResponse:
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("grading:chat", slug=role.slug)
    return render(request, "grading/partials/chat_turns.html", _chat_context(role, request.user, error))


@login_required
@require_http_methods(["GET", "POST"])
def chat(request: HttpRequest, slug: str) -> HttpResponse:
    """The chat with a role: GET shows the open dialog, POST says the message and shows the reply."""
    role = _get_role(slug)
    if request.method == "GET":
        return render(request, "grading/chat.html", _chat_context(role, request.user))
    error = ""
    try:
        say(role, Counterpart(user=request.user), request.POST.get("text", ""), Episode.Surface.DASHBOARD)
    except (ConfigError, StateError) as exc:
        error = str(exc)
    return _answer(request, role, error)


@login_required
@require_POST
def chat_close(request: HttpRequest, slug: str) -> HttpResponse:
    """Close the viewer's open dialog with the role (a person's close)."""
    role = _get_role(slug)
    episode = open_episode(role, Counterpart(user=request.user))
    closed = close(episode, Episode.ClosedBy.PERSON) if episode is not None else None
    if closed is None:
        return _answer(request, role, "There is no open dialog to close.")
    if not request.htmx:
        messages.success(request, "The dialog is closed; your next message starts a new one.")
    return _answer(request, role)


@login_required
def episode_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Read the dialog: one episode's transcript with its shape, grade and numbers."""
    episode = get_object_or_404(Episode.objects.select_related("role", "execution", "counterpart_user"), pk=run_id)
    (row,) = rows([episode])
    context = {
        "episode": episode,
        "role": episode.role,
        "row": row,
        "ending": ending(episode),
        "turns": list(episode.turns.order_by("seq")),
    }
    return render(request, "grading/episode.html", context)
