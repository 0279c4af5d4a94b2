"""The merge gate and the merge wait: who merges the PR, and reading it until it lands, closes or runs out of time.

Seed 003, "How the engine notices the PR landed": the PR is polled, always —
two minutes at first, the interval doubling up to six hours
(``evolution.core.polling``) — and a PR event only makes the wait read it at
once; the read decides.

- The gate (``gate``): under ``merge: auto`` the forge's auto-merge is armed
  bound to the checked head; a forge that refuses the arm because the PR is
  already clean ("Pull request is in clean status") has it merged through its
  merge endpoint at that head with the configured method (issue 32); any other
  refusal, the breaker or the calibration hold demote the round to a person.
- The wait (``poll``): merged → the round records its merge and the cycle
  its ``merged_at`` (the machine then opens the watch, counted from the
  merge); closed unmerged → settle unvalidated; still open past
  ``merge_deadline`` (``watch.deadlineHours`` from the moment the wait was
  armed) → the PR is closed and the cycle settles unvalidated, so a change
  nobody watches never ships later.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from evolution.core import cycles
from evolution.core.polling import FIRST_INTERVAL_S, back_off, deadline_hours, read_or_wait, wait_out
from evolution.loop.steps import Move, Settle
from evolution.models import Cycle, Round
from evolution.steering import autonomy

log = logging.getLogger(__name__)

PRODUCER = "loop"
#: How a round's note starts while its merge: auto arm waits out a forge rate limit (the poll arms it after).
ARM_WAITS = "the arm waits:"


# --- Arming the wait -----------------------------------------------------------------


def arm_wait(cycle: Cycle, round: Round, now: datetime) -> Move:
    """The merge wait of ``round``'s pull request: ``merge_deadline`` is ``now`` plus ``watch.deadlineHours``
    (read once, here); the first poll is two minutes out.
    """
    if round.pr_number is None:
        raise ValueError(f"{round}: no pull request to wait on (pr_number is empty)")
    return Move(
        Cycle.Phase.MERGE_WAIT,
        {
            "merge_deadline": now + timedelta(hours=deadline_hours(cycle)),
            "next_poll_at": now + timedelta(seconds=FIRST_INTERVAL_S),
            "poll_interval_s": FIRST_INTERVAL_S,
        },
        at=now,
    )


def notice_pr(cycle: Cycle, rnd: Round, *, checking: bool = False) -> None:
    """Announce ``rnd``'s PR: what comes before its merge (the check, or the gate already staffed) and who merges."""
    from hitl.actions import post_notice

    if checking:
        after = "The pre-merge check replays it on the frozen inputs first; then the merge gate decides"
    elif rnd.merge_gate == autonomy.AUTO:
        after = "Auto-merge is armed: the forge merges it once its required checks pass"
    else:
        after = "A person merges it"
    post_notice(
        producer=PRODUCER,
        kind="pr-opened",
        title=f"{cycle.entity.name or cycle.entity.slug}: PR #{rnd.pr_number} opened (cycle {cycle.pk})",
        text=f"{rnd.summary}\n\n{after}: {rnd.pr_url}",
        url=rnd.pr_url,
        subject=f"cycle {cycle.pk}",
    )


def merged_by_words(rnd: Round, merged_by: str) -> str:
    """Who merged ``rnd``'s PR, in words: the forge's auto-merge the loop armed, or the person the forge names."""
    if rnd.merge_gate == autonomy.AUTO or merged_by.startswith("auto-merge"):
        words = f"auto-merge, armed by the loop (cycle {rnd.cycle_id})"
        if merged_by and not merged_by.startswith("auto-merge"):
            words += f"; the forge names {merged_by}"  # GitHub names the account that armed it
        return words
    return merged_by or "someone the forge does not name"


def notice_merged(cycle: Cycle, rnd: Round, merged_by: str) -> None:
    """Announce that ``rnd``'s PR merged, and by whom (``merged_by_words``); the watch starts counting from here."""
    from hitl.actions import post_notice

    post_notice(
        producer=PRODUCER,
        kind="pr-merged",
        title=f"{cycle.entity.name or cycle.entity.slug}: PR #{rnd.pr_number} merged (cycle {cycle.pk})",
        text=f"PR #{rnd.pr_number} was merged by {merged_by_words(rnd, merged_by)}. "
        f"The watch now reads the entity's next graded runs: {rnd.pr_url}",
        url=rnd.pr_url,
        subject=f"cycle {cycle.pk}",
    )


# --- The gate --------------------------------------------------------------------------


def gate(rnd: Round, *, now: datetime, sha: str = "") -> None:
    """Staff the merge gate: under merge: auto arm the forge's auto-merge, or merge a PR that is already clean.

    The arm is bound to ``sha`` (the commit the pre-merge check checked; the
    PR's head where there is no check), so a head pushed since is refused.
    A PR GitHub finds clean (every required check passed on ``sha``) cannot be
    armed; it is merged through the forge at ``sha`` with the configured
    method instead. Any other refusal, the breaker or the calibration hold
    demote the round to a person's merge.
    """
    from evolution.forges import ForgeError, get_forge, rate_limit_words
    from evolution.forges.base import arm_or_merge

    cycle = rnd.cycle
    policy = autonomy.policy(cycle.entity)
    if policy.get("merge", autonomy.HUMAN) != autonomy.AUTO:
        return
    gates = autonomy.gates(cycle.entity, now=now)
    if gates.merge != autonomy.AUTO:
        demote(rnd, gates.note)
        return
    method = policy.get("mergeMethod") or "merge"
    sha = sha or rnd.head_sha
    # Recorded before the arm: an arm on a green head merges at once, and the merge wait reads the gate.
    Round.objects.filter(pk=rnd.pk).update(merge_gate=autonomy.AUTO)
    rnd.merge_gate = autonomy.AUTO
    try:
        _pull, how = arm_or_merge(get_forge(), rnd.pr_number, method=method, sha=sha, by=cycle.actor)
    except ForgeError as exc:
        if exc.until is not None:  # GitHub's rate limit: the arm waits for its reset (the poll arms it then)
            note = f"{ARM_WAITS} {rate_limit_words(exc.until)}"
            Round.objects.filter(pk=rnd.pk).update(gate_note=note)
            rnd.gate_note = note
            wait_out(cycle, exc.until)
            return
        demote(rnd, str(exc) if str(exc).startswith("auto-merge unavailable") else f"auto-merge unavailable: {exc}")
        return
    if rnd.gate_note.startswith(ARM_WAITS):
        Round.objects.filter(pk=rnd.pk).update(gate_note="")
        rnd.gate_note = ""
    if how == "merged":
        log.info("loop: cycle %s: PR #%s was clean at %s: merged by the loop", cycle.pk, rnd.pr_number, sha[:12])


def _after_arm(forge: Any, cycle: Cycle, round: Round, now: datetime) -> Settle | Move | None:
    """The poll after a late arm: a PR the gate merged (it was clean) moves on now; an armed one waits."""
    pull = read_or_wait(forge, cycle, round.pr_number)
    if pull is not None and pull.state == "merged":
        return poll(cycle, now)
    back_off(cycle, now, deadline=cycle.merge_deadline)
    return None


def demote(rnd: Round, why: str) -> None:
    """The round's merge is a person's after all; say so on the round and in a notice."""
    from hitl.actions import post_notice

    Round.objects.filter(pk=rnd.pk).update(merge_gate=autonomy.HUMAN, gate_note=why)
    rnd.merge_gate, rnd.gate_note = autonomy.HUMAN, why
    cycle = rnd.cycle
    post_notice(
        producer=PRODUCER,
        kind="merge-demoted",
        title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk}",
        text=f"PR #{rnd.pr_number} waits on a person's merge: {why}",
        subject=f"cycle {cycle.pk}",
    )


# --- The wait ---------------------------------------------------------------------------


def waiting_round(cycle: Cycle) -> Round | None:
    """Return the round whose apply PR the merge wait follows: the newest round with an open PR."""
    return (
        cycle.rounds.exclude(pr_number=None)
        .exclude(status__in=[Round.Status.CLOSED, Round.Status.REFINED, Round.Status.SKIPPED, Round.Status.FAILED])
        .order_by("-number")
        .first()
    )


def _forge() -> Any:
    from evolution.forges import get_forge

    return get_forge()


def poll(cycle: Cycle, now: datetime) -> Settle | Move | None:
    """Read the apply PR once and act on it: Move to the watch (merged), Settle (closed, expired, lost) or None (open)."""
    round = waiting_round(cycle)
    if round is None:
        return Settle(Cycle.Status.FAILED, "the merge wait found no round with an open PR")
    forge = _forge()
    pull = read_or_wait(forge, cycle, round.pr_number)
    if pull is None:
        return None
    if pull.state == "merged":
        merged_at = pull.merged_at or now
        Round.objects.filter(pk=round.pk).update(merge_sha=pull.merge_sha, status=Round.Status.MERGED)
        Cycle.objects.filter(pk=cycle.pk).update(merged_at=merged_at, next_poll_at=None)
        cycle.merged_at, cycle.next_poll_at = merged_at, None
        log.info("loop: cycle %s: PR #%s merged as %s", cycle.pk, pull.number, pull.merge_sha[:12])
        notice_merged(cycle, round, pull.merged_by)
        return Move(Cycle.Phase.WATCHING, at=merged_at)
    if pull.state == "closed":
        Round.objects.filter(pk=round.pk).update(status=Round.Status.CLOSED)
        return Settle(Cycle.Status.UNVALIDATED, f"PR #{pull.number} was closed unmerged")
    if cycle.merge_deadline is not None and now >= cycle.merge_deadline:
        reason = f"PR #{pull.number} was not merged by {cycles.when(cycle.merge_deadline)}"
        reason += _close_unmerged(forge, pull.number, cycle)
        Round.objects.filter(pk=round.pk).update(status=Round.Status.CLOSED)
        return Settle(Cycle.Status.UNVALIDATED, reason)
    if round.merge_gate == "auto" and not pull.auto_merge and round.gate_note.startswith(ARM_WAITS):
        gate(round, now=now, sha=round.checked_sha or round.head_sha)  # the rate limit passed: arm it now
        return None if round.gate_note.startswith(ARM_WAITS) else _after_arm(forge, cycle, round, now)
    if round.merge_gate == "auto" and not pull.auto_merge:
        # The arm was taken out (a person disabled it, or the head moved past the commit the loop vouched for).
        demote(round, f"the auto-merge of PR #{pull.number} no longer stands (disarmed, or its head moved)")
    back_off(cycle, now, deadline=cycle.merge_deadline)
    return None


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
