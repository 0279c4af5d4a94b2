"""What is sent: an event becomes one due delivery per destination that wants it, sent after commit.

Only what a person would read on the dashboard leaves: a title, the engine's own sentence, a link and named facts
(entity, cycle, PR, verdict). Never a secret, never a note or an idea a person wrote.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from singularity.notify.models import Delivery, Destination

log = logging.getLogger(__name__)

#: Every event, with what it means (docs/notifications.md lists them).
EVENTS = {
    "card.waiting": "a card waits on a person",
    "pr.opened": "the loop opened a pull request",
    "check.answered": "the pre-merge check answered",
    "pr.merged": "a loop pull request merged",
    "watch.settled": "a cycle settled (its watch's verdict, or its end before a merge)",
    "reverted": "a regressed change's revert merged",
    "breaker.paused": "the breaker paused an entity's loop",
    "judge.unhealthy": "the judge was found unhealthy",
    "budget.ceiling": "an entity reached its monthly spend ceiling",
    "alert.warning": "an alert rule crossed its warning level",
    "alert.alert": "an alert rule crossed its alert level",
    "alert.resolved": "an alert rule is back under its levels",
}

#: The hitl notice kinds that are events here; the rest (digests, asks, refusals) stay on the dashboard.
NOTICE_EVENTS = {
    "pr-opened": "pr.opened",
    "pr-merged": "pr.merged",
    "settled": "watch.settled",
    "paused": "breaker.paused",
    "judge-unresolved": "judge.unhealthy",
}

TASK = "singularity.notify.tasks.send"

#: How long a process trusts the destinations it read: an event costs no statement while none changed here, and a
#: destination added or switched off in another process is seen within this many seconds.
CACHE_SECS = 30.0
_cached: tuple[float, list[Destination]] | None = None


def forget(**_: Any) -> None:
    """Drop the destinations read (a destination saved in this process; ``post_save`` calls it)."""
    global _cached
    _cached = None


def prime(destinations: list[Destination]) -> None:
    """Set the destinations read, as a process that knows them (a test starting on an empty database)."""
    global _cached
    _cached = (time.monotonic(), destinations)


def _destinations() -> list[Destination]:
    global _cached
    now = time.monotonic()
    if _cached is None or now - _cached[0] > CACHE_SECS:
        _cached = (now, list(Destination.objects.filter(active=True)))
    return _cached[1]


def absolute(path: str) -> str:
    """A dashboard path as an address people can open (the public URL before it when one is set)."""
    if not path or path.startswith(("http://", "https://")):
        return path
    return f"{settings.SINGULARITY_PUBLIC_URL}{path}" if settings.SINGULARITY_PUBLIC_URL else path


def emit(event: str, *, key: str, title: str, text: str = "", url: str = "", **facts: Any) -> list[Delivery]:
    """Write one due delivery of ``event`` per destination that wants it; each is sent after the caller commits.

    ``key`` makes it idempotent: emitting the same event twice writes nothing more. Returns the deliveries made now.
    """
    if event not in EVENTS:
        raise ValueError(f"event: {event!r} is not one of {', '.join(EVENTS)}")
    made: list[Delivery] = []
    payload = {"text": text, "url": absolute(url), **{k: v for k, v in facts.items() if v not in (None, "")}}
    for destination in _destinations():
        if not destination.wants(event):
            continue
        try:
            with transaction.atomic():
                delivery, created = Delivery.objects.get_or_create(
                    destination=destination,
                    key=f"{event}:{key}",
                    defaults={"event": event, "title": title[:300], "payload": payload},
                )
        except IntegrityError:
            continue  # another process wrote it a moment ago
        if created:
            made.append(delivery)
    for delivery in made:
        transaction.on_commit(lambda pk=delivery.pk: _wake(pk))
    return made


def _wake(delivery_id: Any) -> None:
    from kombu.exceptions import OperationalError as BrokerError

    from singularity.queue import enqueue

    try:
        enqueue(TASK, str(delivery_id))
    except BrokerError as exc:
        log.warning("notify: delivery %s not enqueued (%s); the sweep sends it", delivery_id, exc)


def from_card(card: Any) -> None:
    """A card opened for a person (a ``hitl.models.Card``, which this layer does not import): its title, what it
    shows and its link."""
    emit(
        "card.waiting",
        key=str(card.pk),
        title=card.title,
        text=card.text,
        url=absolute(card.get_absolute_url()),
        link_text="Answer it",
        card_kind=card.kind,
        subject=card.subject,
        expires_at=card.expires_at.isoformat(),
    )


def from_notice(notice: Any) -> None:
    """A notice of one of ``NOTICE_EVENTS``' kinds, as its event (other kinds are not sent)."""
    event = NOTICE_EVENTS.get(notice.kind)
    if event is None:
        return
    emit(event, key=f"notice:{notice.pk}", title=notice.title, text=notice.text, url=notice.url, subject=notice.subject)
