"""Sending a due delivery: claimed by one worker in a short UPDATE, sent outside any transaction, its outcome kept.

A temporary failure (no answer, 429, 5xx) is tried again after 1, 2, 4 … minutes (at most ``MAX_DELAY``, or when a
429's ``Retry-After`` says) for ``GIVE_UP_AFTER`` from the delivery's creation; a permanent one (another 4xx, a
missing address) stops at once. ``sweep`` sends whatever is due: a lost message, a retry, a worker that died.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from singularity.notify import slack, transport, webhook
from singularity.notify.models import Delivery, Destination

log = logging.getLogger(__name__)

FIRST_DELAY = timedelta(minutes=1)
MAX_DELAY = timedelta(hours=2)
GIVE_UP_AFTER = timedelta(days=1)
#: How long a claim keeps other workers off a delivery (a worker that dies holding it lets go after this).
LEASE = timedelta(minutes=2)
SWEEP_BATCH = 100

DUE = (Delivery.Status.PENDING, Delivery.Status.RETRYING)


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed try: 1 minute doubling, at most ``MAX_DELAY``."""
    return min(FIRST_DELAY * (2 ** max(0, attempts - 1)), MAX_DELAY)


def _claim(delivery_id: Any, now: datetime) -> bool:
    return bool(
        Delivery.objects.filter(pk=delivery_id, status__in=DUE, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + LEASE)
    )


def _address(destination: Destination) -> tuple[str, str]:
    """(url, secret) of the destination, read from the environment when it names a variable."""
    url = destination.url or (os.environ.get(destination.url_env, "") if destination.url_env else "")
    if not url:
        named = f"the environment variable {destination.url_env} is not set" if destination.url_env else "no url"
        raise transport.SendError(f"{destination.name}: {named}", permanent=True)
    secret = destination.secret or (os.environ.get(destination.secret_env, "") if destination.secret_env else "")
    if destination.kind == Destination.Kind.WEBHOOK and destination.secret_env and not secret:
        raise transport.SendError(
            f"{destination.name}: the environment variable {destination.secret_env} is not set", permanent=True
        )
    return url, secret


def _send(delivery: Delivery) -> transport.Answer:
    destination = delivery.destination
    url, secret = _address(destination)
    if destination.kind == Destination.Kind.SLACK:
        return slack.send(delivery, url)
    return webhook.send(delivery, url, secret)


def send_one(delivery_id: Any, *, now: datetime | None = None) -> bool:
    """Try the delivery once if it is due and unclaimed; return whether a try was made."""
    now = now or timezone.now()
    if not _claim(delivery_id, now):
        return False
    delivery = Delivery.objects.select_related("destination").get(pk=delivery_id)
    attempts = delivery.attempts + 1
    try:
        if not delivery.destination.active:
            raise transport.SendError(f"{delivery.destination.name} is switched off", permanent=True)
        answer = _send(delivery)
    except transport.SendError as exc:
        _failed(delivery, attempts, exc, timezone.now())
        return True
    Delivery.objects.filter(pk=delivery.pk).update(
        status=Delivery.Status.SENT,
        attempts=attempts,
        answer_status=answer.status,
        answer=answer.text,
        delivered_at=timezone.now(),
        next_attempt_at=None,
        claimed_until=None,
    )
    return True


def _failed(delivery: Delivery, attempts: int, exc: transport.SendError, now: datetime) -> None:
    retry_at = exc.retry_at or now + backoff(attempts)
    gave_up = exc.permanent or retry_at > delivery.created_at + GIVE_UP_AFTER
    said = str(exc)[: transport.ANSWER_CHARS]
    if gave_up:
        why = "permanent error" if exc.permanent else f"still failing a day after it was made ({attempts} attempts)"
        said = f"gave up: {why}: {said}"
    Delivery.objects.filter(pk=delivery.pk).update(
        status=Delivery.Status.FAILED if gave_up else Delivery.Status.RETRYING,
        attempts=attempts,
        answer_status=exc.status,
        answer=said,
        next_attempt_at=None if gave_up else retry_at,
        claimed_until=None,
    )
    log.warning("notify: delivery %s to %s: attempt %s: %s", delivery.pk, delivery.destination_id, attempts, said)


def sweep(*, now: datetime | None = None) -> int:
    """Send every delivery due now (oldest first, a batch at a time); return how many were tried."""
    now = now or timezone.now()
    due = list(
        Delivery.objects.filter(status__in=DUE, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    return sum(send_one(pk, now=now) for pk in due)


def redeliver(delivery_id: Any) -> Delivery:
    """Send a delivery again as a new one (a new delivery id, the same body), due now; return it."""
    old = Delivery.objects.get(pk=delivery_id)
    from django.db import transaction

    from singularity.notify.events import _wake

    again = Delivery.objects.create(
        destination_id=old.destination_id,
        key=f"{old.key}:again:{timezone.now().isoformat()}",
        event=old.event,
        title=old.title,
        payload=old.payload,
    )
    transaction.on_commit(lambda: _wake(again.pk))
    return again
