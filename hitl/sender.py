"""The sender: pushes due deliveries (and edits of answered cards) to their channels.

A worker claims one delivery at a time with a conditional UPDATE that moves
its ``next_attempt_at`` past a lease, so two workers never send the same
message and a worker that dies leaves it due again after the lease. Calls are
spaced by ``TELEGRAM_SEND_PER_SECOND``. A permanent error fails the delivery
and stops; a temporary one is retried with exponential backoff that honours
the service's own ``retry_after``.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from hitl.channels import ChannelError, Session, open_session
from hitl.models import Card, Delivery

logger = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)
BASE_BACKOFF_SECS = 10.0
MAX_BACKOFF_SECS = 3600.0
#: After this many tries a temporary error is given up on, and the delivery fails.
MAX_ATTEMPTS = 12
CLAIM_CANDIDATES = 20


def backoff(attempts: int, retry_after: float | None = None) -> timedelta:
    """Return the wait before the next try after ``attempts`` tries: doubling from 10 s, at most an hour, never under ``retry_after``."""
    secs = min(BASE_BACKOFF_SECS * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECS)
    return timedelta(seconds=max(secs, retry_after or 0.0))


def _due(now: datetime) -> Q:
    to_send = Q(status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING])
    to_edit = Q(status=Delivery.Status.SENT, needs_edit=True)
    return (to_send | to_edit) & Q(next_attempt_at__lte=now)


def claim_next(now: datetime | None = None) -> Delivery | None:
    """Claim the delivery due soonest and return it (its attempts counted), or None when nothing is due."""
    now = now or timezone.now()
    candidates = Delivery.objects.filter(_due(now)).order_by("next_attempt_at", "pk")
    for pk, due_at, status in candidates.values_list("pk", "next_attempt_at", "status")[:CLAIM_CANDIDATES]:
        claimed = Delivery.objects.filter(pk=pk, next_attempt_at=due_at, status=status).update(
            next_attempt_at=now + LEASE, attempts=F("attempts") + 1
        )
        if claimed:
            return Delivery.objects.select_related("card", "notice").get(pk=pk)
    return None


class _Pacer:
    """Spaces calls at least 1 / ``per_second`` seconds apart."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.last: float | None = None

    def wait(self) -> None:
        if self.last is not None:
            delay = self.last + self.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.last = time.monotonic()


def _record_error(delivery: Delivery, exc: ChannelError, *, editing: bool) -> None:
    """Save a failed send or edit on the delivery: failed for good, or due again after a backoff."""
    now = timezone.now()
    prefix = "edit: " if editing else ""
    message = f"{prefix}{exc}"[:2000]
    rows = Delivery.objects.filter(pk=delivery.pk)
    gave_up = delivery.attempts >= MAX_ATTEMPTS
    if exc.permanent or gave_up:
        if gave_up and not exc.permanent:
            message = f"{prefix}gave up after {delivery.attempts} attempts: {exc}"[:2000]
        if editing:
            rows.update(needs_edit=False, next_attempt_at=None, last_error=message)
        else:
            rows.update(status=Delivery.Status.FAILED, next_attempt_at=None, last_error=message)
        logger.warning("delivery %s failed for good: %s", delivery.pk, message)
        return
    due = now + backoff(delivery.attempts, exc.retry_after)
    if editing:
        rows.update(next_attempt_at=due, last_error=message)
    else:
        rows.update(status=Delivery.Status.RETRYING, next_attempt_at=due, last_error=message)
    logger.info("delivery %s will be retried at %s: %s", delivery.pk, due.isoformat(), message)


def _send(delivery: Delivery, session: Session) -> None:
    """Send a pending delivery's card or notice and record where it landed (or why not)."""
    card = delivery.card
    if card is not None and not card.is_pending:
        Delivery.objects.filter(pk=delivery.pk).update(
            status=Delivery.Status.SKIPPED,
            next_attempt_at=None,
            last_error=f"the card was {card.status} before it could be sent",
        )
        return
    try:
        sent = session.send_card(card) if card is not None else session.send_notice(delivery.notice)
    except ChannelError as exc:
        _record_error(delivery, exc, editing=False)
        return
    Delivery.objects.filter(pk=delivery.pk).update(
        status=Delivery.Status.SENT,
        chat_id=sent.chat_id,
        message_id=sent.message_id,
        sent_at=timezone.now(),
        next_attempt_at=None,
        last_error="",
    )
    if card is not None and not Card.objects.filter(pk=card.pk, status=Card.Status.PENDING).exists():
        # Answered while the message was on its way: the message must say so too.
        Delivery.objects.filter(pk=delivery.pk).update(needs_edit=True, next_attempt_at=timezone.now())


def _edit(delivery: Delivery, session: Session) -> None:
    """Edit a sent card's message to show its answer, and record the outcome."""
    assert delivery.card is not None
    try:
        session.edit_card(delivery, delivery.card)
    except ChannelError as exc:
        _record_error(delivery, exc, editing=True)
        return
    Delivery.objects.filter(pk=delivery.pk).update(
        needs_edit=False, edited_at=timezone.now(), next_attempt_at=None, last_error=""
    )


def edit_now(card_id: object) -> int:
    """Edit the sent messages of a card just closed, here and now; return how many were tried.

    Called after the closing commit and before the card's handler, so the
    message drops its buttons and shows the answer at once, not after
    whatever the handler starts (an apply, a check's replays) has left the
    queue. Each delivery is claimed as the sender claims it, so the two never
    edit one message twice; one that fails is left to the sender's backoff.
    """
    now = timezone.now()
    due = Delivery.objects.filter(card_id=card_id, status=Delivery.Status.SENT, needs_edit=True)
    sessions: dict[str, Session] = {}
    tried = 0
    try:
        for pk, due_at in list(due.values_list("pk", "next_attempt_at")):
            claimed = Delivery.objects.filter(pk=pk, needs_edit=True, next_attempt_at=due_at).update(
                next_attempt_at=now + LEASE, attempts=F("attempts") + 1
            )
            if not claimed:
                continue
            tried += 1
            delivery = Delivery.objects.select_related("card").get(pk=pk)
            session = sessions.get(delivery.channel)
            if session is None:
                try:
                    session = sessions[delivery.channel] = open_session(delivery.channel)
                except ChannelError as exc:
                    _record_error(delivery, exc, editing=True)
                    continue
            _edit(delivery, session)
    finally:
        for session in sessions.values():
            session.close()
    return tried


def send_pending(*, budget_secs: float = 25.0) -> int:
    """Send every due delivery and edit until none is due or ``budget_secs`` have passed; return how many were tried."""
    started = time.monotonic()
    pacer = _Pacer(settings.TELEGRAM_SEND_PER_SECOND)
    sessions: dict[str, Session] = {}
    tried = 0
    try:
        while time.monotonic() - started < budget_secs:
            delivery = claim_next()
            if delivery is None:
                break
            tried += 1
            editing = delivery.status == Delivery.Status.SENT
            session = sessions.get(delivery.channel)
            if session is None:
                try:
                    session = sessions[delivery.channel] = open_session(delivery.channel)
                except ChannelError as exc:
                    _record_error(delivery, exc, editing=editing)
                    break
            pacer.wait()
            (_edit if editing else _send)(delivery, session)
    finally:
        for session in sessions.values():
            session.close()
    return tried
