"""The merge wait and the revert follow: reading a cycle's pull request until it lands, closes or runs out of time.

Seed 003, "How the engine notices the PR landed": the PR is polled, always —
two minutes at first, the interval doubling up to six hours — and a PR event
(``on_pull_event``) only makes the wait read it at once; the read decides.

- ``merge_wait``: merged → the round records its merge, the cycle its
  ``merged_at``, and the watch opens (``evolution.watch.open_watch``) counted
  from the merge; closed unmerged → the cycle settles unvalidated; still open
  past ``merge_deadline`` (``watch.deadlineHours`` from the moment the wait
  was armed) → the PR is closed and the cycle settles unvalidated, so a
  change nobody watches never ships later.
- ``reverting`` (a regressed settle opened the revert PR): merged, closed or
  still open past ``revert_deadline`` is written on the round as
  ``revert_outcome`` and ends the hold: the cycle settles its phase and gives
  the entity's claim back.

Several workers may poll at once: a cycle is taken by a conditional UPDATE of
its ``next_poll_at`` (a short lease), so one worker acts on it and a worker
that dies mid-poll leaves it to the next poll after the lease.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evolution.models import Cycle, Round

log = logging.getLogger(__name__)

#: The poll's first interval and its ceiling (seed: "starts at two minutes and backs off to six hours").
FIRST_INTERVAL_S = 120
MAX_INTERVAL_S = 6 * 3600
#: How long a worker holds a cycle it is polling before another worker may take it again.
LEASE = timedelta(minutes=10)
#: The engine's default watch.deadlineHours (DESIGN), used when the terms carry none.
DEFAULT_DEADLINE_HOURS = 336
#: How many due cycles one poll reads at most (the rest wait for the next tick).
BATCH = 200

POLLED_PHASES = (Cycle.Phase.MERGE_WAIT, Cycle.Phase.REVERTING)


# --- Terms and arming ----------------------------------------------------------------


def deadline_hours(cycle: Cycle) -> float:
    """Return ``loop.watch.deadlineHours`` as the entity's terms hold it now (read once per phase by the callers)."""
    watch = ((cycle.entity.terms or {}).get("loop") or {}).get("watch") or {}
    hours = watch.get("deadlineHours")
    return float(hours) if hours is not None else float(DEFAULT_DEADLINE_HOURS)


def next_interval(interval_s: int) -> int:
    """Return the interval after ``interval_s``: doubled, never below two minutes nor above six hours."""
    return max(FIRST_INTERVAL_S, min(MAX_INTERVAL_S, max(interval_s, FIRST_INTERVAL_S // 2) * 2))


def arm_wait(cycle: Cycle, round: Round, now: datetime | None = None) -> Cycle:
    """Open the merge wait of ``round``'s pull request; return the cycle in phase ``merge_wait``.

    ``merge_deadline`` is ``now`` plus ``watch.deadlineHours`` (read once,
    here); the first poll is two minutes out.
    """
    from evolution import cycles

    now = now or timezone.now()
    if round.pr_number is None:
        raise ValueError(f"{round}: no pull request to wait on (pr_number is empty)")
    return cycles.advance(
        cycle,
        Cycle.Phase.MERGE_WAIT,
        merge_deadline=now + timedelta(hours=deadline_hours(cycle)),
        next_poll_at=now + timedelta(seconds=FIRST_INTERVAL_S),
        poll_interval_s=FIRST_INTERVAL_S,
        now=now,
    )


# --- Which round, which pull ---------------------------------------------------------


def waiting_round(cycle: Cycle) -> Round | None:
    """Return the round whose apply PR the merge wait follows: the newest round with an open PR."""
    return (
        cycle.rounds.exclude(pr_number=None)
        .exclude(status__in=[Round.Status.CLOSED, Round.Status.REFINED, Round.Status.SKIPPED, Round.Status.FAILED])
        .order_by("-number")
        .first()
    )


def reverted_round(cycle: Cycle) -> Round | None:
    """Return the merged round whose revert PR is followed."""
    return cycle.rounds.exclude(revert_pr_number=None).order_by("-number").first()


def _forge() -> Any:
    from evolution.forges import get_forge

    return get_forge()


# --- Backoff ----------------------------------------------------------------------------


def _back_off(cycle: Cycle, now: datetime, *, deadline: datetime | None) -> str:
    """Schedule the next poll: the interval doubled (six hours at most), never past the deadline still ahead."""
    interval = next_interval(cycle.poll_interval_s or FIRST_INTERVAL_S // 2)
    due = now + timedelta(seconds=interval)
    if deadline is not None and now < deadline < due:
        due = deadline
    Cycle.objects.filter(pk=cycle.pk).update(next_poll_at=due, poll_interval_s=interval)
    cycle.next_poll_at, cycle.poll_interval_s = due, interval
    return "open"


# --- The merge wait ---------------------------------------------------------------------


def _poll_merge(cycle: Cycle, now: datetime) -> str:
    """Read the apply PR once and act on it; return what it was: merged, closed, expired or open."""
    from evolution import cycles, watch

    round = waiting_round(cycle)
    if round is None:
        cycles.settle(cycle, Cycle.Status.FAILED, reason="the merge wait found no round with an open PR", now=now)
        return "lost"
    forge = _forge()
    pull = forge.get_pull(round.pr_number)
    if pull.state == "merged":
        merged_at = pull.merged_at or now
        Round.objects.filter(pk=round.pk).update(merge_sha=pull.merge_sha, status=Round.Status.MERGED)
        Cycle.objects.filter(pk=cycle.pk).update(merged_at=merged_at, next_poll_at=None)
        cycle.merged_at, cycle.next_poll_at = merged_at, None
        log.info("loop: cycle %s: PR #%s merged as %s", cycle.pk, pull.number, pull.merge_sha[:12])
        watch.open_watch(cycle, merged_at, evaluated_at=now)
        return "merged"
    if pull.state == "closed":
        Round.objects.filter(pk=round.pk).update(status=Round.Status.CLOSED)
        cycles.settle(cycle, Cycle.Status.UNVALIDATED, reason=f"PR #{pull.number} was closed unmerged", now=now)
        return "closed"
    if cycle.merge_deadline is not None and now >= cycle.merge_deadline:
        reason = f"PR #{pull.number} was not merged by {cycles.when(cycle.merge_deadline)}"
        reason += _close_unmerged(forge, pull.number, cycle)
        Round.objects.filter(pk=round.pk).update(status=Round.Status.CLOSED)
        cycles.settle(cycle, Cycle.Status.UNVALIDATED, reason=reason, now=now)
        return "expired"
    if round.merge_gate == "auto" and not pull.auto_merge:
        # The arm was taken out (a person disabled it, or the head moved past the commit the loop vouched for).
        from evolution.rounds import _demote

        _demote(round, f"the auto-merge of PR #{pull.number} no longer stands (disarmed, or its head moved)")
    return _back_off(cycle, now, deadline=cycle.merge_deadline)


def _close_unmerged(forge: Any, number: int, cycle: Cycle) -> str:
    """Close a PR left past its deadline (nothing unwatched ships later); return what to add to the reason."""
    from evolution.forges import ForgeError

    try:
        if hasattr(forge, "disarm_auto_merge"):
            forge.disarm_auto_merge(number)  # an abandoned change can never land unmeasured later
        forge.close_pull(number, by=cycle.actor)
    except ForgeError as exc:
        log.warning("loop: cycle %s: PR #%s past its deadline could not be closed: %s", cycle.pk, number, exc)
        return f" (closing it failed: {exc})"
    return "; the loop closed it"


# --- The revert follow ------------------------------------------------------------------


def _revert_deadline(cycle: Cycle, round: Round, now: datetime) -> datetime:
    """Return (and store, when the settle did not) the revert's deadline: watch.deadlineHours from its opening."""
    if round.revert_deadline is not None:
        return round.revert_deadline
    opened = round.revert_opened_at or cycle.completed_at or now
    deadline = opened + timedelta(hours=deadline_hours(cycle))
    Round.objects.filter(pk=round.pk).update(revert_deadline=deadline)
    round.revert_deadline = deadline
    return deadline


def _end_hold(cycle: Cycle, round: Round, outcome: str, now: datetime, **fields: Any) -> str:
    """Record the revert's outcome on the round and end the hold: the cycle settles its phase, the claim is free."""
    from evolution import cycles

    Round.objects.filter(pk=round.pk).update(revert_outcome=outcome, **fields)
    cycles.advance(cycle, Cycle.Phase.SETTLED, claim=None, next_poll_at=None, now=now)
    log.info(
        "loop: cycle %s: revert PR #%s %s; the hold on %s ends", cycle.pk, round.revert_pr_number, outcome, cycle.entity
    )
    return outcome


def _poll_revert(cycle: Cycle, now: datetime) -> str:
    """Read the revert PR once and act on it; return merged, closed, expired or open."""
    round = reverted_round(cycle)
    if round is None:
        log.warning("loop: cycle %s is reverting with no revert PR on any round; polled again later", cycle.pk)
        return _back_off(cycle, now, deadline=None)
    deadline = _revert_deadline(cycle, round, now)
    pull = _forge().get_pull(round.revert_pr_number)
    if pull.state == "merged":
        return _end_hold(cycle, round, "merged", now, revert_merged_at=pull.merged_at or now)
    if pull.state == "closed":
        return _end_hold(cycle, round, "closed", now)
    if now >= deadline:
        return _end_hold(cycle, round, "expired", now)
    return _back_off(cycle, now, deadline=deadline)


# --- Polling ----------------------------------------------------------------------------


def _take(cycle: Cycle, now: datetime) -> bool:
    """Take ``cycle`` for this worker: push its next poll out by the lease if nobody moved it since it was read."""
    taken = Cycle.objects.filter(pk=cycle.pk, phase=cycle.phase, next_poll_at=cycle.next_poll_at).update(
        next_poll_at=now + LEASE
    )
    return taken == 1


def poll(cycle: Cycle, now: datetime | None = None) -> str:
    """Read ``cycle``'s pull request (apply PR in merge_wait, revert PR in reverting) and act; return the outcome.

    The caller has taken the cycle. Returns "merged", "closed", "expired",
    "open" or "lost"; "" when the cycle is in neither phase.
    """
    now = now or timezone.now()
    with transaction.atomic():
        if cycle.phase == Cycle.Phase.MERGE_WAIT:
            return _poll_merge(cycle, now)
        if cycle.phase == Cycle.Phase.REVERTING:
            return _poll_revert(cycle, now)
    return ""


def _poll_taken(cycle: Cycle, now: datetime) -> bool:
    """Poll a cycle this worker took; a failure is logged with the cycle and retried after the lease."""
    try:
        poll(cycle, now)
    except Exception:
        log.exception("loop: cycle %s: polling its pull request failed; retried after %s", cycle.pk, LEASE)
        return False
    return True


def poll_due(now: datetime | None = None) -> int:
    """Poll every cycle in merge_wait or reverting whose next poll is due; return how many were polled.

    A reverting cycle with no poll scheduled yet is due at once.
    """
    now = now or timezone.now()
    due = list(
        Cycle.objects.filter(phase__in=POLLED_PHASES)
        .filter(Q(next_poll_at__lte=now) | Q(phase=Cycle.Phase.REVERTING, next_poll_at=None))
        .select_related("entity")
        .order_by("next_poll_at", "pk")[:BATCH]
    )
    polled = 0
    for cycle in due:
        if _take(cycle, now):
            polled += int(_poll_taken(cycle, now))
    return polled


def cycle_of_pull(number: int) -> Cycle | None:
    """Return the live cycle following PR ``number``: as its apply PR in merge_wait, or as its revert PR."""
    return (
        Cycle.objects.filter(
            Q(phase=Cycle.Phase.MERGE_WAIT, rounds__pr_number=number)
            | Q(phase=Cycle.Phase.REVERTING, rounds__revert_pr_number=number)
        )
        .select_related("entity")
        .distinct()
        .first()
    )


def on_pull_event(number: int, *, now: datetime | None = None) -> Cycle | None:
    """A PR event (merge, close, a disarm): read the PR now; return the cycle that follows it, or None.

    An event only wakes the wait — the read decides.
    """
    now = now or timezone.now()
    cycle = cycle_of_pull(number)
    if cycle is None:
        return None
    if _take(cycle, now):
        _poll_taken(cycle, now)
    cycle.refresh_from_db()
    return cycle
