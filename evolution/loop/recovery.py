"""The due-step sweeps: every step the loop handed a worker is picked up again when its message was lost.

A producer, like the trigger: it reads what the database says is due
(``evolution.core.due``, the rows a step's own transaction wrote) and asks
the machine to start it. ``tick`` is the loop's clock (``evolution.tasks.tick``,
every 30 s): it runs every sweep of ``SWEEPS`` once, each idempotent (a step
a worker holds is left alone, a step handed over again is taken by one
worker only: a claim or a lease on the row) and each on its own (one that
breaks is logged; the others still run). ``BY_PHASE`` says, for every phase
a live cycle can be in, which sweeps pick up its due step; a test keeps it
whole, so a new phase cannot be left without one.

- **apply** (``sweep``) — a round accepted (the cycle ``applying``) whose
  message never reached a worker, or whose worker died mid-apply (its claim
  older than the lease): handed over again (``machine.enqueue("apply")``),
  the first time two ticks after the Accept, then every five minutes while
  nobody takes it. ``run_apply`` is what the worker runs: the claim, then
  ``machine.apply``, which adopts a PR an earlier attempt opened.
- **analyse** (``machine.sweep_lost``) — re-sent when unclaimed for half an
  hour; failed when its worker died (its heartbeat older than the analysis's
  lease, two ticks: ``due.analysis_heartbeat``) — under decide: auto the
  cycle closes failed at once, under a person's a Retry card.
- **check** (``machine.check_tick``) — replays lost or whose worker died, a
  replay run and never booked, a PR opened whose next step never ran, the
  check's deadline.
- **poll** (``machine.poll_due``) — the PR of a cycle checking, in its merge
  wait or reverting, under a lease (a dead worker's poll is taken again);
  a revert due and never opened is opened.
- **watch** (``machine.watch_tick``) — every watch read; its deadline closes it.
- **decide** — a card past its review deadline is expired by hitl's own
  sweep (beat's ``hitl-expire-cards``), which calls the loop's card handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from evolution.core import due
from evolution.loop import machine
from evolution.models import Cycle, Round

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


#: The loop's sweeps, in the order the tick runs them: name → the sweep (``now`` → what it did).
SWEEPS: dict[str, Callable[[datetime], Any]] = {
    "check": machine.check_tick,
    "poll": machine.poll_due,
    "watch": machine.watch_tick,
    "analyse": lambda now: machine.sweep_lost(now=now),
    "apply": sweep,
    "aa": lambda now: _aa_sweep(now),
}


def _aa_sweep(now: datetime) -> int:
    """A/A reports recorded due that no worker took (their message lost) or whose worker died: sent again."""
    from evolution.loop import aa

    return aa.sweep(now)


#: A sweep outside the loop's tick, by its beat entry (``singularity.schedule.BEAT_SCHEDULE``).
ELSEWHERE = {"decide": "hitl-expire-cards"}

#: Every phase a live cycle can be in → the sweeps that pick up its due step when no worker did.
BY_PHASE: dict[str, tuple[str, ...]] = {
    Cycle.Phase.ANALYSING: ("analyse",),
    Cycle.Phase.DECIDING: ("decide",),
    Cycle.Phase.APPLYING: ("apply", "check"),
    Cycle.Phase.CHECKING: ("check", "poll"),
    Cycle.Phase.MERGE_WAIT: ("poll",),
    Cycle.Phase.WATCHING: ("watch",),
    Cycle.Phase.REVERTING: ("poll",),
}


def tick(now: datetime | None = None) -> dict[str, Any]:
    """Run every sweep once; return what each did (a sweep that broke is logged and answers None)."""
    now = now or timezone.now()
    done: dict[str, Any] = {}
    for name, run in SWEEPS.items():
        try:
            done[name] = run(now)
        except Exception:  # noqa: BLE001 - one broken sweep never stops the others; it runs again next tick
            log.exception("loop: the %s sweep failed; the other sweeps ran, and it runs again on the next tick", name)
            done[name] = None
    return done
