"""An idea's way into the loop: the post that asks for its cycle, the approval card, the hourly delivery (seed 003).

``post`` is the one entry point the dashboard, the API and the ``/idea``
chat command share, so all three accept and refuse the same things: the
queue's row is written by ``evolution.steering.ideas.write`` (a refusal
writes nothing), then a person's post asks for its cycle at once; an agent's
waits on a person's approval card. The queue's head meets the same gates, in
the same order, as any cycle — the live claim, any cycle still unsettled (an
unanswered proposal holds the idea line), a revert, a hold — but steps past
the cooldown and the daily ceiling. ``ask`` checks those gates first and
opens through the machine only when it would open, so an idea waiting its
turn leaves no refusal rows behind. ``deliver_queued`` is the hourly sweep's
ask for every entity with a queued idea; ``waits_on`` says in one sentence
what the head of the queue waits on.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.utils import timezone

from evolution.core import cycles
from evolution.loop import machine, opening
from evolution.models import Cycle, Idea
from evolution.steering.ideas import (
    APPROVE,
    AWAITING_APPROVAL,
    PICKED_UP,
    Posted,
    cycle_words,
    entity_refusal,
    next_idea,
    place,
    unsettled_cycle,
    unsettled_refusal,
    write,
)
from grading.models import Entity

log = logging.getLogger(__name__)


def line_refusal(entity: Entity, *, now: datetime | None = None) -> str | None:
    """Why the head of ``entity``'s queue cannot open its cycle now, else None.

    The gates in the order the next cycle meets them: the entity in the loop,
    the live claim (or a revert followed), any cycle still unsettled (a
    proposal waiting on its card holds the idea line), then ``cycles.refusal``
    for an idea (a hold, a proposer that cannot run; never the cooldown or the
    daily ceiling).
    """
    now = now or timezone.now()
    return (
        entity_refusal(entity)
        or unsettled_refusal(entity)
        or opening.refusal(entity, origin=Cycle.Origin.IDEA, now=now)
    )


def post(
    entity: Entity | None,
    text: str,
    *,
    author: str,
    is_agent: bool = False,
    asker: str = "",
    reply_to: str = "",
    now: datetime | None = None,
) -> Posted:
    """Write an idea for ``entity`` and ask for its cycle (a person's) or for a person's approval (an agent's).

    Raises IdeaRefused — not_found when there is no entity, precondition when
    the entity is not in the loop, switched off or gone, or the text is empty
    or longer than MAX_CHARS — and then nothing is written. A post accepted
    but not started at once answers opened False with the reason.
    """
    now = now or timezone.now()
    idea = write(entity, text, author=author, is_agent=is_agent, asker=asker, reply_to=reply_to, now=now)
    log.info("loop: %s: idea %s posted by %s", entity, idea.pk, author)
    if is_agent:
        return Posted(idea, False, AWAITING_APPROVAL)
    return _answer(idea, ask(entity, now=now))


def ask(entity: Entity, *, now: datetime | None = None) -> cycles.Opened:
    """Ask for the cycle of ``entity``'s oldest queued idea: opened, or why it waits (no refusal row is written).

    ``open_cycle`` is called only when the gates would let it open; a rival
    that took the entity in between is its business (one cycle is made).
    """
    now = now or timezone.now()
    head = next_idea(entity)
    if head is None:
        return cycles.Opened(None, False, "no idea is queued")
    why = line_refusal(entity, now=now)
    if why:
        return cycles.Opened(None, False, why)
    return machine.open_cycle(entity, origin=Cycle.Origin.IDEA, idea=head, now=now)


def _answer(idea: Idea, asked: cycles.Opened) -> Posted:
    """The post's answer for ``idea`` after asking for the head of its queue."""
    idea.refresh_from_db()
    if idea.status == Idea.Status.TAKEN and idea.cycle_id is not None:
        return Posted(idea, True, f"cycle {idea.cycle_id} opened on it", idea.cycle)
    head = asked.cycle.idea if asked.opened and asked.cycle is not None else None
    if head is not None and head.pk != idea.pk:
        return Posted(idea, False, f"idea {head.pk} was ahead of it: cycle {asked.cycle.pk} opened on that one")
    where = place(idea)
    reason = asked.reason if where == "next" else f"{where}, behind an earlier idea; {asked.reason}"
    return Posted(idea, False, reason)


def deliver_queued(now: datetime | None = None) -> int:
    """The hourly sweep: ask for the cycle of every entity with a queued idea; return how many opened.

    Whether or not the entity declares trigger.every, and without moving its
    cadence. One entity's failure is logged and the sweep goes on.
    """
    now = now or timezone.now()
    waiting = (
        Idea.objects.filter(status=Idea.Status.QUEUED, approved=True).values_list("entity_id", flat=True).distinct()
    )
    opened = 0
    for entity in Entity.objects.filter(pk__in=list(waiting)).order_by("pk"):
        try:
            asked = ask(entity, now=now)
        except Exception:  # noqa: BLE001 - one entity's broken ask must not stop the others' ideas
            log.exception("loop: %s: the sweep could not ask for its queued idea", entity)
            continue
        if asked.opened:
            opened += 1
        else:
            log.debug("loop: %s: its queued idea waits: %s", entity, asked.reason)
    return opened


def on_card(card: Any) -> None:
    """The approval card closed: Approve queues the idea and asks for its cycle; anything else withdraws it."""
    from hitl.models import Card

    idea = Idea.objects.select_related("entity").filter(pk=(card.payload or {}).get("idea")).first()
    if idea is None:
        log.warning("loop: approval card %s names no idea (%s)", card.pk, card.payload)
        return
    approved = card.status == Card.Status.ANSWERED and (card.answer or {}).get("choice") == APPROVE
    if approved:
        if Idea.objects.filter(pk=idea.pk, status=Idea.Status.QUEUED, approved=False).update(approved=True):
            asked = ask(idea.entity)
            log.info("loop: %s: idea %s approved: %s", idea.entity, idea.pk, asked.reason)
        return
    who = card.responded_by.get_username() if card.responded_by else "the review deadline"
    Idea.objects.filter(pk=idea.pk, status=Idea.Status.QUEUED).update(
        status=Idea.Status.WITHDRAWN, withdrawn_at=card.responded_at or timezone.now()
    )
    log.info("loop: %s: idea %s not approved (%s, %s)", idea.entity, idea.pk, card.status, who)


def waits_on(entity: Entity, *, now: datetime | None = None) -> str:
    """One sentence: what the head of ``entity``'s idea queue waits on (the same gates its cycle will meet).

    Never "free" while a hold stands and never "resting": a queued idea steps
    past the rest and the daily ceiling.
    """
    now = now or timezone.now()
    head = next_idea(entity)
    if head is None:
        return "No idea is queued."
    why = entity_refusal(entity)
    if why:
        return f"Idea {head.pk} waits: {why}."
    line = unsettled_cycle(entity)
    if line is not None:
        return f"Idea {head.pk} waits on {cycle_words(line)}."
    why = opening.refusal(entity, origin=Cycle.Origin.IDEA, now=now)
    if why:
        return f"Idea {head.pk} waits: {why}."
    return f"Idea {head.pk} is next: {PICKED_UP}."
