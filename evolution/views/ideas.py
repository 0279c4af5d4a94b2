"""An entity's Ideas section: post an idea, the queue with its places and Withdraw, taken and withdrawn ideas.

The entity page loads the section as an HTMX fragment; each form also works
without JavaScript (a POST, then a redirect back with a message). Every
answer is the engine's own sentence from ``evolution.ideas``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evolution.loop import intake
from evolution.models import Idea
from evolution.steering import ideas
from grading.models import Entity

FRAGMENT = "evolution/_entity_ideas.html"


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


def ideas_context(entity: Entity, **extra: Any) -> dict[str, Any]:
    """What the Ideas section shows: the bucket, the sentence on what the queue waits on, the post's bound."""
    return {
        "entity": entity,
        **ideas.bucket(entity),
        "waits_on": intake.waits_on(entity),
        "max_chars": ideas.MAX_CHARS,
        "taking": ideas.entity_refusal(entity),
        **extra,
    }


def _answered(request: HttpRequest, entity: Entity, said: str, ok: bool, **extra: Any) -> HttpResponse:
    """The fragment with the answer (HTMX), else a redirect to the entity page with the answer as a message."""
    if request.htmx:
        return render(request, FRAGMENT, ideas_context(entity, said=said, said_ok=ok, **extra))
    (messages.success if ok else messages.error)(request, said)
    return redirect(entity)


@login_required
def entity_ideas(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """The entity's Ideas: the fragment the entity page loads, or a page of its own."""
    entity = _get_entity(target_kind, slug)
    template = FRAGMENT if request.htmx else "evolution/entity_ideas.html"
    return render(request, template, ideas_context(entity))


@login_required
@require_POST
def idea_post(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Post an idea as the signed-in person, through the one entry point."""
    entity = _get_entity(target_kind, slug)
    text = request.POST.get("text", "")
    try:
        posted = intake.post(entity, text, author=request.user.get_username())
    except ideas.IdeaRefused as exc:
        return _answered(request, entity, f"Not posted: {exc.reason}.", False, text=text)
    if posted.opened and posted.cycle is not None:
        said = f"Idea {posted.idea.pk}: cycle {posted.cycle.pk} started on it."
    else:
        said = f"Idea {posted.idea.pk} is queued ({ideas.place(posted.idea)}): {posted.reason}."
    return _answered(request, entity, said, True, cycle=posted.cycle)


@login_required
@require_POST
def idea_withdraw(request: HttpRequest, pk: int) -> HttpResponse:
    """Withdraw a queued idea; the answer is the idea's state after the call."""
    idea = get_object_or_404(Idea.objects.select_related("entity", "card"), pk=pk)
    answer = ideas.withdraw(idea, request.user.get_username(), user=request.user)
    said = answer.reason[0].upper() + answer.reason[1:] + "."
    return _answered(request, idea.entity, said, answer.withdrawn)
