"""The loop's own undo: a mechanical revert of a merged round, opened as a pull request (seed 003 "Revert").

``open_revert`` reverts the round's merge commit (``git revert -m 1``) on a
new branch ``loop/revert-<entity>-<8 hex>`` cut from the default branch's tip
as it is now, pushes it, sets both ``singularity/diff-gate`` and
``singularity/validation`` to success on its head (a base that requires them
must be able to take the undo) and opens the pull request. It records nothing
on the round: the caller stores the returned ``PullInfo``.

At a settle the machine asks ``due`` whether a revert follows (a regressed
change, or an unproven one under ``watch.onInconclusive: revert``) and
``open_for`` opens it; a revert inherits the merge gate (``arm``). While the
cycle is ``reverting`` the revert PR is followed (``poll``): merged, closed or
still open past ``revert_deadline`` is written on the round as
``revert_outcome`` and ends the hold.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from evolution.core import cycles
from evolution.core import notify as outbound
from evolution.core.polling import FIRST_INTERVAL_S, back_off, deadline_hours, read_or_wait
from evolution.forges import get_forge
from evolution.forges.base import DIFF_GATE, VALIDATION, ForgeError, PullInfo, fit
from evolution.forges.git import step_branch, throwaway_clone
from evolution.models import Cycle, Round
from evolution.steering import autonomy
from singularity.brain.git import GitError, git

log = logging.getLogger(__name__)


def open_revert(round: Round) -> PullInfo:
    """Open the revert PR of ``round``'s merge; ForgeError with git's words when the revert cannot be made."""
    if not round.merge_sha:
        raise ForgeError(
            f"round {round.number} of cycle {round.cycle_id} has no merge commit to revert", permanent=True
        )
    cycle = round.cycle
    forge = get_forge()
    default = forge.default_branch()
    branch = revert_branch(round)
    standing = forge.open_pull_of(branch, default)
    if standing is not None:
        log.warning(
            "revert: cycle %s: revert PR #%s of %s was open already (an earlier attempt died before recording it); "
            "adopted, none opened",
            cycle.pk,
            standing.number,
            branch,
        )
        return standing
    try:
        head_sha = _revert_on_branch(forge.remote_url(), default, branch, round)
    except GitError as exc:
        raise ForgeError(f"the revert of cycle {cycle.pk} could not be made: {exc}", permanent=True) from None
    why = "The loop's own undo of a change it merged"
    forge.set_status(head_sha, DIFF_GATE, "success", why)
    forge.set_status(head_sha, VALIDATION, "success", why)
    pull = forge.open_pull(head=branch, base=default, title=revert_title(round), body=revert_body(round))
    log.info("revert: cycle %s round %s opened revert PR #%s on %s", cycle.pk, round.number, pull.number, branch)
    return pull


def revert_branch(round: Round) -> str:
    """The branch ``round``'s revert is pushed on: the same for every attempt (a retry finds the PR it opened)."""
    return step_branch(f"revert-{round.cycle.entity.slug}", round.cycle.key, round.cycle_id, round.merge_sha)


def _revert_on_branch(url: str, default: str, branch: str, round: Round) -> str:
    """Make the revert commit on ``branch`` cut from ``default``'s tip and push it; return its sha.

    ForgeError (with git's words and the conflicting paths) when the revert
    cannot be made; GitError when git fails otherwise.
    """
    cycle = round.cycle
    with throwaway_clone(url, default, label=f"revert-{cycle.pk}-{round.number}") as clone:
        git("checkout", "--quiet", "-b", branch, cwd=clone)
        parents = git("rev-list", "--parents", "-n", "1", round.merge_sha, cwd=clone).decode().split()[1:]
        mainline = ["-m", "1"] if len(parents) > 1 else []
        try:
            git("revert", "--no-edit", *mainline, round.merge_sha, cwd=clone)
        except GitError as exc:
            conflicted = git("diff", "--name-only", "--diff-filter=U", cwd=clone).decode().split()
            where = f" (conflicts in {', '.join(conflicted)})" if conflicted else ""
            raise ForgeError(
                f"the revert of {round.merge_sha[:12]} (cycle {cycle.pk}) cannot be made on {default}{where}: {exc}",
                permanent=True,
            ) from None
        head_sha = git("rev-parse", "HEAD", cwd=clone).decode().strip()
        # Forced: the branch is this revert's alone, and one there already is a dead worker's push with no PR.
        git("push", "--quiet", "origin", f"+refs/heads/{branch}:refs/heads/{branch}", cwd=clone)
    return head_sha


def revert_title(round: Round) -> str:
    """The revert PR's title: what it undoes ("unproven" for a policy revert, R13.19)."""
    unproven = "unproven " if round.cycle.reverted_by_policy else ""
    return f"Revert {unproven}loop({round.cycle.entity.slug}): cycle {round.cycle_id} (PR #{round.pr_number or '?'})"


def revert_body(round: Round) -> str:
    """The revert PR's body: the cycle it undoes, the merge it reverts and why."""
    cycle = round.cycle
    link = settings.SINGULARITY_PUBLIC_URL.rstrip("/") + cycle.get_absolute_url()
    if cycle.reverted_by_policy:
        why = (
            "it is unproven — its watch was inconclusive — and the entity's watch.onInconclusive says revert "
            "(reverted by policy; nothing showed it regressed)"
        )
    else:
        why = "its watch settled regressed"
    reason = (cycle.reason or "").strip()
    verdict = (cycle.watch_verdict or {}).get("reason") if isinstance(cycle.watch_verdict, dict) else None
    lines = [
        f"This reverts merge {round.merge_sha} of PR #{round.pr_number or '?'} — cycle {cycle.pk}, round "
        f"{round.number} of {cycle.entity.target_kind}:{cycle.entity.slug} — because {why}.",
        "",
    ]
    if reason:
        lines += [f"Settled: {reason}", ""]
    if verdict and verdict != reason:
        lines += [f"The watch: {verdict}", ""]
    lines += [
        f"The change it undoes: {(round.summary or '').strip() or '(no summary)'}",
        "",
        f"Cycle: {link}",
    ]
    return fit("\n".join(lines) + "\n", rest=link)


# --- At a settle ----------------------------------------------------------------------------

REGRESSED, BY_POLICY = "regressed", "policy"


def due(cycle: Cycle) -> str | None:
    """Whether a settle opens a revert: "regressed", "policy" (watch.onInconclusive: revert on an unproven
    shipped change; not read under watch.mode: none) or None.
    """
    if cycle.confounded_by or cycle.confounded_by_edit:
        return None  # a confounded watch is never undone on a guess
    if cycle.status == Cycle.Status.REGRESSED:
        # A change the pre-merge check regressed never shipped: its PR was closed, there is nothing to undo.
        return REGRESSED if cycles.merged_round(cycle) else None
    if cycle.status != Cycle.Status.UNVALIDATED:
        return None
    watch = cycles.loop_terms(cycle.entity).get("watch") or {}
    if watch.get("onInconclusive") == "revert" and watch.get("mode") != "none" and cycles.merged_round(cycle):
        return BY_POLICY
    return None


def open_for(cycle: Cycle, now: datetime) -> bool:
    """Open the mechanical revert of the cycle's shipped change; return whether the cycle now follows one.

    A revert that cannot be opened is written on the round and the cycle's reason (the settle goes on without it).
    """
    from evolution.forges import ForgeError

    shipped = cycles.merged_round(cycle)
    if shipped is None:
        return False
    try:
        pull = open_revert(shipped)
    except ForgeError as exc:
        log.error("loop: %s: the revert of cycle %s could not be opened: %s", cycle.entity, cycle.pk, exc)
        Round.objects.filter(pk=shipped.pk).update(revert_outcome="failed")
        Cycle.objects.filter(pk=cycle.pk).update(reason=f"{cycle.reason}; the revert PR could not be opened: {exc}")
        return False
    Round.objects.filter(pk=shipped.pk).update(
        revert_pr_number=pull.number,
        revert_pr_url=pull.url,
        revert_opened_at=now,
        revert_deadline=now + timedelta(hours=deadline_hours(cycle)),
        revert_merge_gate="human",
    )
    transaction.on_commit(lambda: arm(cycle.pk, shipped.pk, pull))
    return True


def first_poll(now: datetime) -> dict[str, Any]:
    """The fields that schedule a revert's first poll."""
    return {"next_poll_at": now + timedelta(seconds=FIRST_INTERVAL_S), "poll_interval_s": FIRST_INTERVAL_S}


def arm(cycle_id: int, round_id: int, pull: Any) -> None:
    """A revert inherits the merge gate: under merge: auto its auto-merge is armed (the breaker never vetoes an undo);
    a revert PR already clean (both statuses success from the start) is merged at its head instead.
    """
    from evolution.forges import get_forge
    from evolution.forges.base import arm_or_merge

    cycle = Cycle.objects.select_related("entity").get(pk=cycle_id)
    if autonomy.revert_gate(cycle.entity) != autonomy.AUTO:
        return
    method = autonomy.policy(cycle.entity).get("mergeMethod") or "merge"
    Round.objects.filter(pk=round_id).update(revert_merge_gate=autonomy.AUTO)
    try:
        arm_or_merge(get_forge(), pull.number, method=method, sha=pull.head_sha, by=cycle.actor)
    except ForgeError as exc:
        Round.objects.filter(pk=round_id).update(revert_merge_gate=autonomy.HUMAN)
        from hitl.actions import post_notice

        post_notice(
            producer=cycles.NOTICE_PRODUCER,
            kind="merge-demoted",
            title=f"{cycle.entity.name or cycle.entity.slug}: the revert PR #{pull.number} waits on a person",
            text=str(exc),
            subject=f"cycle {cycle.pk}",
        )


# --- The revert follow ----------------------------------------------------------------------

#: What a followed revert PR came to that ends the hold on the entity.
ENDED = ("merged", "closed", "expired")


def reverted_round(cycle: Cycle) -> Round | None:
    """Return the merged round whose revert PR is followed."""
    return cycle.rounds.exclude(revert_pr_number=None).order_by("-number").first()


def _revert_deadline(cycle: Cycle, round: Round, now: datetime) -> datetime:
    """Return (and store, when the settle did not) the revert's deadline: watch.deadlineHours from its opening."""
    if round.revert_deadline is not None:
        return round.revert_deadline
    opened = round.revert_opened_at or cycle.completed_at or now
    deadline = opened + timedelta(hours=deadline_hours(cycle))
    Round.objects.filter(pk=round.pk).update(revert_deadline=deadline)
    round.revert_deadline = deadline
    return deadline


def _ended(cycle: Cycle, round: Round, outcome: str, **fields: Any) -> str:
    """Record the revert's outcome on the round: the hold ends (the machine settles the phase, frees the claim)."""
    Round.objects.filter(pk=round.pk).update(revert_outcome=outcome, **fields)
    log.info(
        "loop: cycle %s: revert PR #%s %s; the hold on %s ends", cycle.pk, round.revert_pr_number, outcome, cycle.entity
    )
    return outcome


def poll(cycle: Cycle, now: datetime) -> str:
    """Read the revert PR once and act on it; return merged, closed, expired (the hold ends) or open."""
    round = reverted_round(cycle)
    if round is None:
        log.warning("loop: cycle %s is reverting with no revert PR on any round; polled again later", cycle.pk)
        return back_off(cycle, now, deadline=None)
    deadline = _revert_deadline(cycle, round, now)
    pull = read_or_wait(get_forge(), cycle, round.revert_pr_number)
    if pull is None:
        return "open"
    if pull.state == "merged":
        outbound.reverted(cycle, round)
        return _ended(cycle, round, "merged", revert_merged_at=pull.merged_at or now)
    if pull.state == "closed":
        return _ended(cycle, round, "closed")
    if now >= deadline:
        return _ended(cycle, round, "expired")
    return back_off(cycle, now, deadline=deadline)
