"""An agent relaying a person's rating waits on a person's approval card (seed 003 "Ratings from people", R4.8).

eval_rate's capability waits on a person's approval by default: a rating
stands for a person's judgement and feeds the judge's calibration, so an agent
only relays a person's words and a person confirms them. An agent token's
rating opens a card (producer ``grading-rate``, kind grant) that shows the
ratings relayed; the person's Approve records them as that person's rating
through the one door (``grading.ratings.rate``), a Decline, an expiry or a
cancel records nothing. The door's checks run before the card opens (a rating
the door would refuse is refused at once, with no card), the same
``idempotency_key`` finds the same card, and the agent's waiting asks are
capped with its other asks (``hitl.asks``).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.utils import timezone

from grading.ratings import RateAnswer, check_relayed, rate
from hitl import asks
from hitl.actions import open_card, post_notice
from hitl.models import Card

log = logging.getLogger(__name__)

PRODUCER = "grading-rate"
KIND = "grant"  # Card.Kind.GRANT, as the registry keys it (a plain str)
APPROVE, DECLINE = "approve", "decline"
#: How long the card waits when the entity writes no ``loop.reviewDeadlineHours``.
APPROVAL_HOURS = 72
#: The answer's code while the card waits (the API answers it 202).
PENDING = "pending"


def _key(asker: str, idempotency_key: str) -> str:
    digest = hashlib.sha256(f"{asker}\n{idempotency_key}".encode()).hexdigest()[:40]
    return f"{PRODUCER}:{digest}"


def _lines(ratings: list[dict[str, Any]]) -> list[str]:
    lines = []
    for item in ratings:
        line = f"- {item['metric_id']}: {item['value']}"
        if item.get("note"):
            line += f" — “{item['note']}”"
        lines.append(line)
    return lines


def ask(
    *, user: Any, asker: str, run_kind: str, run_id: str, idempotency_key: str, ratings: list[dict]
) -> tuple[RateAnswer, Card | None]:
    """Open (or find, for the same ``idempotency_key``) the card an agent's relayed rating waits on.

    Returns the answer (``pending`` with the card, or the door's refusal, or ``too_many_pending``) and the card.
    ``user`` is the person the agent's token acts for: the door's checks are a person's rating's.
    """
    if isinstance(idempotency_key, str) and idempotency_key.strip():
        found = Card.objects.filter(key=_key(asker, idempotency_key)).first()
        if found is not None:
            return _pending(found), found
    checked = check_relayed(
        actor_user=user, run_kind=run_kind, run_id=run_id, idempotency_key=idempotency_key, ratings=ratings
    )
    if isinstance(checked, RateAnswer):
        return checked, None
    execution, rows = checked
    too_many = asks.over_cap(asker)
    if too_many:
        return RateAnswer(ok=False, code=asks.TOO_MANY, detail=too_many), None
    relayed = [{"metric_id": metric_id, "value": str(value), "note": note} for metric_id, value, _n, note in rows]
    loop = (execution.entity.terms or {}).get("loop") or {}
    hours = float(loop.get("reviewDeadlineHours") or APPROVAL_HOURS)
    card = open_card(
        producer=PRODUCER,
        kind=KIND,
        key=_key(asker, idempotency_key),
        title=f"Approve: {asker}'s rating of a {execution.entity} run"[:200],
        subject=f"{execution.run_kind} run of {execution.entity}"[:200],
        subject_url=execution.get_absolute_url(),
        text="\n".join(
            [
                f"{asker} relays a rating of this run of {execution.entity}:",
                *_lines(relayed),
                "",
                "A rating stands for a person's judgement and feeds the judge's calibration. Approve records it "
                "as your rating; Decline records nothing.",
            ]
        ),
        expires_at=timezone.now() + timedelta(hours=hours),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={
            "op": "rate",
            "run_kind": execution.run_kind,
            "run_id": str(execution.pk),
            "ratings": relayed,
            asks.ASKER: asker,
        },
    )
    return _pending(card), card


def _pending(card: Card) -> RateAnswer:
    if card.is_pending:
        detail = f"waiting on a person's approval (card {card.pk}, until {card.expires_at.isoformat()})"
    else:
        detail = f"asked before: card {card.pk} is {card.status}"
    return RateAnswer(ok=False, code=PENDING, detail=detail)


def on_card(card: Card) -> None:
    """Hear a closed approval card: on Approve, rate through the door as the person who approved; say what came."""
    choice = (card.answer or {}).get("choice") if isinstance(card.answer, dict) else None
    if card.status != Card.Status.ANSWERED or choice != APPROVE:
        log.info("grading: %s (%s) not approved: %s", card.title, card.pk, card.status)
        return
    payload = card.payload or {}
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    asker = payload.get(asks.ASKER, "an agent")
    answer = rate(
        actor_user=card.responded_by,
        is_agent=False,
        run_kind=str(payload.get("run_kind") or ""),
        run_id=str(payload.get("run_id") or ""),
        idempotency_key=f"card:{card.pk}",
        ratings=list(payload.get("ratings") or []),
    )
    if answer.ok:
        post_notice(
            producer=PRODUCER,
            kind="rated",
            title=f"Rated: {card.subject}"[:200],
            text=f"{person} approved {asker}'s rating: {answer.detail}, as {person}'s.",
            url=card.subject_url,
            subject=card.subject,
        )
        return
    log.warning("grading: approved %s not recorded: %s", card.title, answer.detail)
    post_notice(
        producer=PRODUCER,
        kind="not_applied",
        title=f"Not recorded: {card.title}"[:200],
        text=f"{person} approved {asker}'s rating, but the door refused it ({answer.code}): {answer.detail}",
        url=card.subject_url,
        subject=card.subject,
    )
