"""The loop's own undo: a mechanical revert of a merged round, opened as a pull request (seed 003 "Revert").

``open_revert`` reverts the round's merge commit (``git revert -m 1``) on a
new branch ``loop/revert-<entity>-<8 hex>`` cut from the default branch's tip
as it is now, pushes it, sets both ``singularity/diff-gate`` and
``singularity/validation`` to success on its head (a base that requires them
must be able to take the undo) and opens the pull request. It records nothing
on the round: the caller stores the returned ``PullInfo``.
"""

from __future__ import annotations

import logging

from django.conf import settings

from evolution.apply import branch_name, throwaway_clone
from evolution.forges import get_forge
from evolution.forges.base import DIFF_GATE, VALIDATION, ForgeError, PullInfo
from evolution.models import Round
from singularity.brain.git import GitError, git

log = logging.getLogger(__name__)


def open_revert(round: Round) -> PullInfo:
    """Open the revert PR of ``round``'s merge; ForgeError with git's words when the revert cannot be made."""
    if not round.merge_sha:
        raise ForgeError(
            f"round {round.number} of cycle {round.cycle_id} has no merge commit to revert", permanent=True
        )
    cycle = round.cycle
    entity = cycle.entity
    forge = get_forge()
    default = forge.default_branch()
    branch = branch_name(f"revert-{entity.slug}")
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
        git("push", "--quiet", "origin", f"refs/heads/{branch}:refs/heads/{branch}", cwd=clone)
    return head_sha


def revert_title(round: Round) -> str:
    """The revert PR's title: what it undoes."""
    return f"Revert loop({round.cycle.entity.slug}): cycle {round.cycle_id} (PR #{round.pr_number or '?'})"


def revert_body(round: Round) -> str:
    """The revert PR's body: the cycle it undoes, the merge it reverts and why."""
    cycle = round.cycle
    link = settings.SINGULARITY_PUBLIC_URL.rstrip("/") + cycle.get_absolute_url()
    if cycle.reverted_by_policy:
        why = "its watch was inconclusive and the entity's watch.onInconclusive says revert"
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
    return "\n".join(lines) + "\n"
