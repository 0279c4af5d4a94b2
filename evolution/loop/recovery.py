"""The due-step sweep: every step the loop handed a worker is picked up again when its message was lost.

A producer, like the trigger: it reads what the database says is due
(``evolution.core.due``) and asks the machine to start it. Run by the loop's
periodic tick (``evolution.tasks.tick``), and idempotent: a step a worker
holds is left alone, a step handed over again is taken by one worker only
(the claim), and a sweep that cannot reach the broker leaves the step due
for the next tick.

- **apply** — a round accepted (the cycle ``applying``) whose message never
  reached a worker, or whose worker died mid-apply (its claim older than
  the lease): handed over again (``machine.enqueue("apply")``), the first
  time two ticks after the Accept, then every five minutes while nobody
  takes it. ``run_apply`` is what the worker runs: the claim, then
  ``machine.apply``.
- **analyse** — kept by ``machine.sweep_lost`` (re-sent when unclaimed,
  failed onto a Retry card when its worker died).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from evolution.core import due
from evolution.loop import machine
from evolution.models import Round

log = logging.getLogger(__name__)

#: How many due applies one sweep hands over at most (the rest wait for the next tick).
BATCH = 100


def run_apply(round_id: int, *, now: datetime | None = None) -> Round | None:
    """Apply round ``round_id`` on this worker once it holds the claim; None when another worker holds it or it is done."""
    now = now or timezone.now()
    if not due.claim_apply(round_id, now):
        log.info("loop: round %s: its apply is not due or another worker holds it; nothing to do", round_id)
        return None
    return machine.apply(round_id)


def sweep(now: datetime | None = None) -> int:
    """Hand every due apply nobody holds to a worker again; return how many were handed over."""
    now = now or timezone.now()
    ids = list(
        due.applies_due(now)
        .filter(cycle__moved_at__lt=now - due.resend_after())
        .order_by("cycle__moved_at", "pk")
        .values_list("pk", flat=True)[:BATCH]
    )
    sent = 0
    for round_id in ids:
        if not due.take_resend(round_id, now):
            continue
        try:
            machine.enqueue("apply", round_id)
        except (BrokerError, OSError) as exc:
            Round.objects.filter(pk=round_id).update(apply_sent_at=None)
            log.warning(
                "loop: round %s: its apply is due and the broker is unreachable (%s); the next tick tries",
                round_id,
                exc,
            )
            break
        log.info("loop: round %s: its apply was due with no worker on it; handed to a worker again", round_id)
        sent += 1
    return sent
