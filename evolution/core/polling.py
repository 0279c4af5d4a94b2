"""Polling a cycle's pull request: the interval, its backoff, the deadline, and the lease that makes one poller.

Seed 003, "How the engine notices the PR landed": two minutes at first, the
interval doubling up to six hours, never past a deadline still ahead.
Several workers may poll at once: a cycle is taken by a conditional UPDATE of
its ``next_poll_at`` (a short lease), so one worker acts on it and a worker
that dies mid-poll leaves it to the next poll after the lease.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from evolution.models import Cycle

log = logging.getLogger(__name__)

#: The poll's first interval and its ceiling (seed: "starts at two minutes and backs off to six hours").
FIRST_INTERVAL_S = 120
MAX_INTERVAL_S = 6 * 3600
#: How long a worker holds a cycle it is polling before another worker may take it again.
LEASE = timedelta(minutes=10)
#: The engine's default watch.deadlineHours (DESIGN), used when the terms carry none.
DEFAULT_DEADLINE_HOURS = 336


def deadline_hours(cycle: Cycle) -> float:
    """Return ``loop.watch.deadlineHours`` as the entity's terms hold it now (read once per phase by the callers)."""
    watch = ((cycle.entity.terms or {}).get("loop") or {}).get("watch") or {}
    hours = watch.get("deadlineHours")
    return float(hours) if hours is not None else float(DEFAULT_DEADLINE_HOURS)


def next_interval(interval_s: int) -> int:
    """Return the interval after ``interval_s``: doubled, never below two minutes nor above six hours."""
    return max(FIRST_INTERVAL_S, min(MAX_INTERVAL_S, max(interval_s, FIRST_INTERVAL_S // 2) * 2))


def back_off(cycle: Cycle, now: datetime, *, deadline: datetime | None) -> str:
    """Schedule the next poll: the interval doubled (six hours at most), never past the deadline still ahead."""
    interval = next_interval(cycle.poll_interval_s or FIRST_INTERVAL_S // 2)
    due = now + timedelta(seconds=interval)
    if deadline is not None and now < deadline < due:
        due = deadline
    Cycle.objects.filter(pk=cycle.pk).update(next_poll_at=due, poll_interval_s=interval)
    cycle.next_poll_at, cycle.poll_interval_s = due, interval
    return "open"


def take(cycle: Cycle, now: datetime) -> bool:
    """Take ``cycle`` for this worker: push its next poll out by the lease if nobody moved it since it was read."""
    taken = Cycle.objects.filter(pk=cycle.pk, phase=cycle.phase, next_poll_at=cycle.next_poll_at).update(
        next_poll_at=now + LEASE
    )
    return taken == 1


def read_or_wait(forge: Any, cycle: Cycle, number: int) -> Any:
    """Read PR ``number``; under a forge rate limit, put the cycle's next poll at its reset and return None."""
    from evolution.forges import ForgeError

    try:
        return forge.get_pull(number)
    except ForgeError as exc:
        if exc.until is None:
            raise
        wait_out(cycle, exc.until)
        return None


def wait_out(cycle: Cycle, until: datetime) -> None:
    """The cycle's next poll is the rate limit's reset (not two minutes later: that poll would be refused too)."""
    from evolution.forges import rate_limit_words

    Cycle.objects.filter(pk=cycle.pk).update(next_poll_at=until)
    cycle.next_poll_at = until
    log.info("loop: cycle %s: %s; its next poll waits until then", cycle.pk, rate_limit_words(until))
