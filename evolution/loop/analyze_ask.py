"""An agent's loop_analyze waits on a person's approval card (seed 003, R20.25; issue 29).

A person's "Analyze now" opens the cycle at once (``trigger.analyze_now``). An
agent's ask opens an approval card instead (producer ``loop-analyze``, kind
grant), counted against the agent's cap of waiting asks (``steering.asks``);
asking again while one waits finds that card. The gates are read before any
card is opened — a hold, a live cycle, a lock group, the loop switched off —
so a card never asks for what could not be done now (``AnalyzeRefused``,
``precondition``). The person's Approve runs ``analyze_now`` on their behalf
(exempt from the cooldown and the daily cap, never from a hold) and says in a
notice what it came to; a Decline, an expiry or a cancel opens nothing.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from evolution.loop import opening
from evolution.models import Cycle
from evolution.steering import asks
from grading.models import Entity

log = logging.getLogger(__name__)

PRODUCER = "loop-analyze"
APPROVE, DECLINE = "approve", "decline"
#: How long an approval card waits when the entity writes no ``loop.reviewDeadlineHours``.
APPROVAL_HOURS = 72
#: The refusal codes and their HTTP statuses.
PRECONDITION = "precondition"


class AnalyzeRefused(Exception):
    """An agent's ask refused with nothing written: ``code`` (precondition, too_many_pending) and the sentence."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def _waiting_card(entity: Entity, asker: str) -> Any:
    from hitl.models import Card

    return (
        Card.objects.filter(
            producer=PRODUCER, status=Card.Status.PENDING, expires_at__gt=timezone.now(), payload__entity=entity.pk
        )
        .filter(payload__asker=asker)
        .order_by("created_at")
        .first()
    )


def ask(entity: Entity, *, asker: str) -> Any:
    """Open (or find) the approval card an agent's analyze of ``entity`` waits on; AnalyzeRefused otherwise."""
    from evolution.core import links
    from hitl.actions import open_card
    from hitl.models import Card

    waiting = _waiting_card(entity, asker)
    if waiting is not None:
        return waiting
    now = timezone.now()
    refused = opening.refusal(entity, origin=Cycle.Origin.REQUEST, now=now)
    if refused:
        raise AnalyzeRefused(PRECONDITION, f"{entity}: no cycle can open now: {refused}")
    too_many = asks.over_cap(asker)
    if too_many:
        raise AnalyzeRefused(asks.TOO_MANY, too_many)
    loop = (entity.terms or {}).get("loop") or {}
    hours = float(loop.get("reviewDeadlineHours") or APPROVAL_HOURS)
    return open_card(
        producer=PRODUCER,
        kind=Card.Kind.GRANT,
        key=f"{PRODUCER}:{entity.pk}:{uuid.uuid4().hex}",
        title=f"Approve: analyze {entity} now"[:200],
        subject=str(entity)[:200],
        subject_url=links.absolute(entity.get_absolute_url()),
        text=(
            f"{asker} asks to analyze {entity} now: a cycle opens on request (exempt from the cooldown and the "
            "daily cap of analyses, not from a hold, a live cycle or a lock group) and its proposer is asked.\n\n"
            "Approve opens it on your behalf; Decline opens nothing."
        ),
        expires_at=now + timedelta(hours=hours),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={"op": "analyze", "entity": entity.pk, asks.ASKER: asker},
    )


def on_card(card: Any) -> None:
    """Hear a closed approval card: on Approve, analyze now for the person who approved; say what it came to."""
    from evolution.loop.trigger import analyze_now
    from hitl.actions import post_notice
    from hitl.models import Card

    choice = (card.answer or {}).get("choice") if isinstance(card.answer, dict) else None
    if card.status != Card.Status.ANSWERED or choice != APPROVE:
        log.info("loop: %s (%s) not approved: %s", card.title, card.pk, card.status)
        return
    payload = card.payload or {}
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    entity = Entity.objects.filter(pk=payload.get("entity")).first()
    asker = payload.get(asks.ASKER, "an agent")
    if entity is None:
        answered = f"entity {payload.get('entity')} is gone"
        opened = None
    else:
        result = analyze_now(entity, user=card.responded_by)
        opened = result.cycle if result.opened else None
        answered = result.reason
    if opened is not None:
        post_notice(
            producer=PRODUCER,
            kind="analyzed",
            title=f"Analyzing {entity} now"[:200],
            text=f"{person} approved {asker}'s ask: cycle {opened.pk} opened on request.",
            url=opened.get_absolute_url(),
            subject=str(entity),
        )
        return
    log.warning("loop: approved %s not applied: %s", card.title, answered)
    post_notice(
        producer=PRODUCER,
        kind="not_applied",
        title=f"Not applied: {card.title}"[:200],
        text=f"{person} approved {asker}'s ask, but no cycle opened: {answered}",
        url=card.subject_url,
        subject=card.subject,
    )
