"""Steps the loop handed to a worker that are due in the database and that no worker has (still) got.

The transactional outbox, read off the rows the step's own transaction
wrote: an accepted round of a live cycle ``applying`` is an apply that is
due. A worker takes it by a conditional UPDATE of ``Round.apply_claimed_at``
(``claim_apply``), so one worker applies a round however often its message
is delivered; a claim older than the apply's lease (``LOOP_APPLY_LEASE_SECS``)
is a worker that died, and the round is due again. ``evolution.loop.recovery``
hands what is due to a worker again; the needs-you list shows what has been
due for longer than ``STUCK_AFTER``.

An analysis works the same way with a heartbeat in place of a fixed lease
(an analysis may take many minutes): the worker's claim stamps
``Round.analysis_beat_at`` and ``analysis_heartbeat`` renews it while the
worker works; a beat older than ``analysis_lease`` (two ticks) is a worker
that died, and ``analyses_lost`` finds it for the machine's sweep.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from evolution.models import Cycle, Round

log = logging.getLogger(__name__)

#: How often the sweep hands the same due apply over again while no worker takes it.
RESEND_EVERY = timedelta(minutes=5)
#: A step due for longer than this (ten ticks) is listed for a person: the workers are not taking it.
STUCK_AFTER = timedelta(minutes=5)


def apply_lease() -> timedelta:
    """How long a worker holds a round's apply before another may take it (``LOOP_APPLY_LEASE_SECS``, 15 min)."""
    return timedelta(seconds=float(getattr(settings, "LOOP_APPLY_LEASE_SECS", 900)))


def resend_after() -> timedelta:
    """How long a step may wait for its first worker before the sweep hands it over again (two ticks: 60 s)."""
    return timedelta(seconds=float(getattr(settings, "LOOP_STEP_RESEND_AFTER_SECS", 60)))


def analysis_lease() -> timedelta:
    """How long an analysing worker's heartbeat stays good (``LOOP_ANALYSIS_LEASE_SECS``, 60 s: two loop ticks)."""
    return timedelta(seconds=float(getattr(settings, "LOOP_ANALYSIS_LEASE_SECS", 60)))


def beat_analysis(round_id: int, now: datetime) -> bool:
    """Renew the heartbeat of round ``round_id``'s analysis; False when it is no longer analysing (failed meanwhile)."""
    return bool(Round.objects.filter(pk=round_id, status=Round.Status.ANALYSING).update(analysis_beat_at=now))


@contextmanager
def analysis_heartbeat(round_id: int) -> Iterator[None]:
    """Keep round ``round_id``'s analysis alive while the block runs: a thread renews its beat every third of
    the lease, on its own database connection (closed when the block ends)."""
    every = analysis_lease().total_seconds() / 3
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(every):
                try:
                    if not beat_analysis(round_id, timezone.now()):
                        return  # no longer analysing: nothing to keep alive
                except DatabaseError as exc:
                    log.warning("loop: round %s: the analysis's heartbeat failed (%s); trying again", round_id, exc)
        finally:
            connections.close_all()  # this thread's own connections

    thread = threading.Thread(target=run, name=f"analysis-beat-{round_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=max(every, 1.0))


def analyses_lost(now: datetime) -> QuerySet[Round]:
    """Rounds of live cycles a worker claimed for analysis whose heartbeat is older than the lease (it died)."""
    return Round.objects.filter(
        status=Round.Status.ANALYSING, cycle__status="", analysis_beat_at__lt=now - analysis_lease()
    )


def take_lost_analysis(round_id: int, now: datetime) -> bool:
    """Take a lost analysis for the sweep to fail (one sweep does, and only while its beat is still stale)."""
    return bool(analyses_lost(now).filter(pk=round_id).update(status=Round.Status.FAILED))


def _unclaimed(now: datetime) -> Q:
    return Q(apply_claimed_at__isnull=True) | Q(apply_claimed_at__lt=now - apply_lease())


def applies_due(now: datetime) -> QuerySet[Round]:
    """Accepted rounds of live cycles ``applying`` that no worker holds (never taken, or its lease ran out)."""
    return Round.objects.filter(
        _unclaimed(now), status=Round.Status.ACCEPTED, cycle__status="", cycle__phase=Cycle.Phase.APPLYING
    )


def due_since(rnd: Round, cycle: Cycle | None = None) -> datetime:
    """When ``rnd``'s apply became due: the cycle's move to ``applying``, or the end of a dead worker's lease."""
    moved = (cycle or rnd.cycle).moved_at
    if rnd.apply_claimed_at is not None:
        return max(moved, rnd.apply_claimed_at + apply_lease())
    return moved


def stuck_since(cycle: Cycle, rnd: Round, now: datetime) -> datetime | None:
    """Since when ``rnd``'s step has been due with no worker on it, when that is longer than STUCK_AFTER; else None."""
    found = stuck_step(cycle, rnd, now)
    return found[1] if found is not None else None


def stuck_step(cycle: Cycle, rnd: Round, now: datetime) -> tuple[str, datetime] | None:
    """(the step in words, since when it has been due) when ``rnd``'s step has waited longer than STUCK_AFTER.

    Read from rows already loaded (no query), for every phase with a step a
    sweep picks up (``evolution.loop.recovery.BY_PHASE``): an apply nobody
    holds, an analysis no worker has claimed or whose worker's heartbeat stopped, a poll of the PR (checking,
    merge wait, reverting: a taken poll pushes ``next_poll_at`` out by its
    lease, so one left in the past is a poll nobody ran), a check or a watch
    past its deadline and still open, a revert due and never opened.
    """
    found = _due_step(cycle, rnd, now)
    if found is None or found[1] >= now - STUCK_AFTER:
        return None
    return found


def _due_step(cycle: Cycle, rnd: Round, now: datetime) -> tuple[str, datetime] | None:
    phase = cycle.phase
    if phase == Cycle.Phase.REVERTING:  # settled already; the revert is its step
        if not rnd.merge_sha or rnd.revert_outcome:
            return None
        if rnd.revert_pr_number is None:  # due at the settle and never opened
            return "the revert", cycle.next_poll_at or cycle.moved_at
        return (f"the follow of revert PR #{rnd.revert_pr_number}", cycle.next_poll_at) if cycle.next_poll_at else None
    if cycle.status:
        return None
    if phase == Cycle.Phase.APPLYING and rnd.status == Round.Status.ACCEPTED:
        if rnd.apply_claimed_at is not None and rnd.apply_claimed_at >= now - apply_lease():
            return None
        return "the accepted change", due_since(rnd, cycle)
    if phase == Cycle.Phase.ANALYSING and rnd.status == Round.Status.ANALYSING:
        if not rnd.brief:
            return "the analysis", cycle.moved_at
        beat = rnd.analysis_beat_at
        if beat is not None and beat < now - analysis_lease():  # its worker stopped answering
            return "the analysis (its worker stopped answering)", beat + analysis_lease()
    if phase in (Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT) and rnd.status == Round.Status.APPLIED and rnd.pr_number:
        times = [cycle.next_poll_at, cycle.check_deadline if phase == Cycle.Phase.CHECKING else None]
        due = [t for t in times if t is not None]
        what = "the pre-merge check" if phase == Cycle.Phase.CHECKING else "the merge wait"
        return (f"{what} of PR #{rnd.pr_number}", min(due)) if due else None
    if phase == Cycle.Phase.WATCHING and rnd.merge_sha and cycle.watch_deadline is not None:
        return "the watch's closing read", cycle.watch_deadline
    return None


def take_resend(round_id: int, now: datetime) -> bool:
    """Take the right to hand ``round_id``'s apply over again now (one sweep at a time; at most every RESEND_EVERY)."""
    return bool(
        applies_due(now)
        .filter(pk=round_id, cycle__moved_at__lt=now - resend_after())
        .filter(Q(apply_sent_at__isnull=True) | Q(apply_sent_at__lt=now - RESEND_EVERY))
        .update(apply_sent_at=now)
    )


def claim_apply(round_id: int, now: datetime) -> bool:
    """Take round ``round_id``'s apply for this worker: False when another holds it, or it is not due at all."""
    return bool(applies_due(now).filter(pk=round_id).update(apply_claimed_at=now))
