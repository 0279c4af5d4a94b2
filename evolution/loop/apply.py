"""Apply an accepted round: write its files in a throwaway clone, gate them, commit, push a branch, open the PR.

The loop never pushes to the default branch. ``apply_round`` clones the
forge's remote into a fresh directory under ``settings.LOOP_WORK_DIR``
(removed afterwards, on failure too), writes the proposal's files at the
default branch's tip as read now, runs the diff gate (``evolution.diffgate``),
commits exactly the gated files on ``loop/<entity>-<8 hex>`` (each re-checked
against the gate's digest), pushes that branch, sets ``singularity/diff-gate``
to success on the pushed commit and only then opens the pull request.

The branch is derived from the round (``step_branch``: the cycle's key and
the round's number), so an apply retried after its worker died between the
forge's open and the record asks the forge for the open PR of that branch
first and adopts it (the gate read again on what it carries) instead of
opening a second; a branch pushed with no PR is pushed again.

It records nothing on the round or the cycle: the caller stores what the
returned ``Applied`` carries. A refused change raises ``ApplyFailed`` with the
gate's message and the offending paths; nothing is pushed then.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from evolution.forges import get_forge
from evolution.forges.base import DIFF_GATE, STATUS_FIX, PullInfo, fit
from evolution.forges.git import is_ancestor, step_branch, throwaway_clone
from evolution.loop import diffgate
from evolution.loop.steps import Fail
from evolution.models import Cycle, Round
from evolution.presets import power
from evolution.steering import autonomy
from singularity.brain.git import git
from singularity.errors import SingularityError, StateError

log = logging.getLogger(__name__)


class ApplyFailed(StateError):
    """The change cannot land: ``message`` says why and where, ``paths`` names the offending paths."""

    def __init__(self, message: str, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.paths = list(paths or [])


@dataclass(frozen=True)
class Applied:
    """A landed apply: the pushed branch, the commit it was cut from, its head, the open PR and the gate's record."""

    branch: str
    base_sha: str
    head_sha: str
    pull: PullInfo
    gate: dict[str, Any]


# --- The apply ------------------------------------------------------------------------------


def apply_round(round: Round) -> Applied:
    """Land ``round``'s files as a pull request on the forge; ApplyFailed when the gate (or the base) refuses.

    Git or forge failures that are not the change's fault propagate as
    GitError / ForgeError (both UpstreamError).
    """
    cycle = round.cycle
    entity = cycle.entity
    files = list(round.files or [])
    if not files:
        raise ApplyFailed(f"round {round.number} of cycle {cycle.pk} names no files to change")
    try:
        paths = diffgate.validate_paths(f.get("path") if isinstance(f, dict) else None for f in files)
    except diffgate.GateRefused as refusal:
        raise ApplyFailed(refusal.message, refusal.paths) from None
    forge = get_forge()
    default = forge.default_branch()
    branch = round_branch(round)
    standing = forge.open_pull_of(branch, default)
    if standing is not None:
        return _adopt(round, standing, paths)
    _require_status_permission(forge)
    with throwaway_clone(forge.remote_url(), default, label=f"apply-{cycle.pk}-{round.number}") as clone:
        base_sha = git("rev-parse", "HEAD", cwd=clone).decode().strip()
        git("checkout", "--quiet", "-b", branch, cwd=clone)
        try:
            diffgate.write_proposal(clone, files)
            gate = diffgate.check(clone, base_sha, entity, paths)
            diffgate.verify_digests(clone, gate)
        except diffgate.GateRefused as refusal:
            log.info("apply: cycle %s round %s refused by the gate: %s", cycle.pk, round.number, refusal.paths)
            raise ApplyFailed(refusal.message, refusal.paths) from None
        git("commit", "--quiet", "--no-verify", "-m", commit_message(round), cwd=clone)
        head_sha = git("rev-parse", "HEAD", cwd=clone).decode().strip()
        _require_base_still_on(clone, default, base_sha)
        # Forced: the branch is this round's alone, and one there already is a dead worker's push with no PR.
        git("push", "--quiet", "origin", f"+refs/heads/{branch}:refs/heads/{branch}", cwd=clone)
    described = f"{len(gate['paths'])} file(s), {gate['lines']} of {gate['bound']} lines"
    _gate_status(forge, round, head_sha, f"The diff gate passed: {described}")
    pull = forge.open_pull(head=branch, base=default, title=pull_title(round), body=pull_body(round, gate))
    log.info("apply: cycle %s round %s opened PR #%s on %s", cycle.pk, round.number, pull.number, branch)
    return Applied(branch=branch, base_sha=base_sha, head_sha=head_sha, pull=pull, gate=dict(gate))


def round_branch(round: Round) -> str:
    """The branch ``round``'s change is pushed on: the same for every attempt at this round's apply."""
    return step_branch(round.cycle.entity.slug, round.cycle.key, round.cycle_id, round.number)


def _adopt(round: Round, pull: PullInfo, paths: list[str]) -> Applied:
    """Take the PR an earlier attempt at this apply opened: its head gated again, the gate's status set again."""
    cycle = round.cycle
    forge = get_forge()
    default = forge.default_branch()
    with throwaway_clone(forge.remote_url(), default, label=f"adopt-{cycle.pk}-{round.number}") as clone:
        git("fetch", "--quiet", "origin", f"refs/heads/{pull.head}", cwd=clone)
        head_sha = git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip()
        base_sha = git("merge-base", "HEAD", head_sha, cwd=clone).decode().strip()
        git("checkout", "--quiet", "--detach", head_sha, cwd=clone)
        try:
            diffgate.write_proposal(clone, list(round.files or []))
            gate = diffgate.check(clone, base_sha, cycle.entity, paths)
            diffgate.verify_digests(clone, gate)
        except diffgate.GateRefused as refusal:
            raise ApplyFailed(
                f"PR #{pull.number}, opened by an earlier attempt: {refusal.message}", refusal.paths
            ) from None
        if git("diff", "--cached", "--name-only", head_sha, cwd=clone).decode().strip():
            raise ApplyFailed(
                f"PR #{pull.number} of {pull.head}, opened by an earlier attempt at this round, carries something "
                "other than the proposal: it is left for a person, none is opened beside it",
                paths,
            )
    described = f"{len(gate['paths'])} file(s), {gate['lines']} of {gate['bound']} lines"
    forge.set_status(head_sha, DIFF_GATE, "success", f"The diff gate passed: {described}")
    log.warning(
        "apply: cycle %s round %s: PR #%s of %s was open already (an earlier attempt died before recording it); "
        "adopted, none opened",
        cycle.pk,
        round.number,
        pull.number,
        pull.head,
    )
    return Applied(branch=pull.head, base_sha=base_sha, head_sha=head_sha, pull=pull, gate=dict(gate))


def _gate_status(forge: Any, round: Round, sha: str, text: str) -> None:
    """Post ``singularity/diff-gate: success`` on ``sha``; a refusal (the permission revoked since the probe) is
    a notice now and ApplyFailed with the fix (the round's Retry card), never a silent pending status.
    """
    from evolution.forges import ForgeError

    try:
        forge.set_status(sha, DIFF_GATE, "success", text)
    except ForgeError as exc:
        if not exc.permanent:
            raise
        from hitl.actions import post_notice

        cycle = round.cycle
        said = f"{DIFF_GATE} could not be set on {sha[:12]}: {exc}"
        post_notice(
            producer="loop",
            kind="status-refused",
            title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk}: a commit status could not be posted",
            text=f"{said}. To fix: {STATUS_FIX}.",
            subject=f"cycle {cycle.pk}",
        )
        raise ApplyFailed(f"{said}. To fix: {STATUS_FIX}") from None


def _require_status_permission(forge: Any) -> None:
    """ApplyFailed before anything is pushed when the forge says the credential may not post a commit status.

    The diff gate's status is posted right after the push: without the
    permission every attempt would push a branch and fail there, leaving an
    orphan branch per Retry (R10.24, R12.15). GitHub is asked as the doctor
    asks it (a status on a commit that cannot exist: 422 may, 403 may not); a
    forge with nothing to ask (the local one) or an answer GitHub could not
    give lets the apply go on.
    """
    probe = getattr(forge, "may_post_statuses", None)
    if probe is None:
        return
    may, why = probe()
    if may is False:
        credential = getattr(getattr(forge, "credential", None), "label", "the loop's credential")
        repository = getattr(forge, "repository", "the repository")
        raise ApplyFailed(
            f"{credential} may not post commit statuses on {repository} (GitHub: {why}); nothing was pushed. "
            f"To fix: {STATUS_FIX}"
        )


def _require_base_still_on(clone: Path, default: str, base_sha: str) -> None:
    """ApplyFailed when the default branch no longer contains the commit the gate read (a history rewrite)."""
    git("fetch", "--quiet", "origin", default, cwd=clone)
    tip = git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip()
    if not is_ancestor(base_sha, tip, cwd=clone):
        raise ApplyFailed(
            f"{default} no longer contains {base_sha[:12]}, the commit the diff gate read (its history was "
            f"rewritten; it is at {tip[:12]} now): nothing was pushed"
        )


def _first_line(text: str, limit: int) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def pull_title(round: Round) -> str:
    """The pull request's title: the entity and the summary's first line."""
    summary = _first_line(round.summary, 200) or f"cycle {round.cycle_id}, round {round.number}"
    return f"loop({round.cycle.entity.slug}): {summary}"


def commit_message(round: Round) -> str:
    """The commit's message: a subject carrying the summary, then the summary whole and where it came from."""
    cycle = round.cycle
    subject = f"loop({cycle.entity.slug}): {_first_line(round.summary, 60) or 'the accepted proposal'}"
    lines = [subject, "", (round.summary or "").strip()]
    if round.hypothesis:
        lines += ["", f"Hypothesis: {round.hypothesis.strip()}"]
    lines += ["", f"Cycle {cycle.pk}, round {round.number}; author {round.author or 'unknown'}."]
    return "\n".join(lines).strip() + "\n"


def markdown_lines(text: str | None) -> str:
    """``text`` for a Markdown body with its line breaks kept: a single newline would join two lines into one.

    Each line that the next one follows inside a paragraph ends with a backslash (CommonMark's hard line
    break); blank lines, list items and fenced code are left as they are.
    """
    lines = (text or "").strip().splitlines()
    kept: list[str] = []
    fenced = False
    for n, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            kept.append(line)
            continue
        following = lines[n + 1] if n + 1 < len(lines) else ""
        joins = bool(line.strip() and following.strip()) and not fenced and not line.rstrip().endswith("\\")
        breaks = not following.lstrip().startswith(("- ", "* ", "+ ", "#", "```", "|", ">"))
        kept.append(f"{line.rstrip()}\\" if joins and breaks and not line.lstrip().startswith("|") else line)
    return "\n".join(kept)


def pull_body(round: Round, gate: dict[str, Any]) -> str:
    """The pull request's body: the proposal (summary, hypothesis, files, cited lessons) and a link to the cycle."""
    cycle = round.cycle
    entity = cycle.entity
    link = settings.SINGULARITY_PUBLIC_URL.rstrip("/") + round.get_absolute_url()
    files = []
    for entry in round.files or []:
        path = entry.get("path")
        lines = gate.get("files", {}).get(path)
        what = "deleted" if entry.get("content") is None else "written"
        files.append(f"- `{path}` ({what}{f', {lines} lines changed' if lines is not None else ''})")
    cited = ", ".join(f"#{n}" for n in round.cited_lessons or []) or "none"
    parts = [
        f"The loop proposes a change to {entity.name or entity.slug} ({entity.target_kind}:{entity.slug}).",
        "",
        "## Summary",
        "",
        markdown_lines(round.summary) or "(none given)",
        "",
        "## Hypothesis",
        "",
        markdown_lines(round.hypothesis) or "(none given)",
        "",
        "## Files",
        "",
        *files,
        "",
        # One list item a line: Markdown runs consecutive plain lines into one paragraph.
        f"- Lessons cited: {cited}",
        f"- Author: {round.author or 'unknown'}",
        f"- Diff gate: {len(gate.get('paths', []))} file(s), {gate.get('lines')} lines changed "
        f"(loop.maxChangedLines {gate.get('bound')}), base {str(gate.get('base', ''))[:12]}.",
        "",
        f"Cycle {cycle.pk}, round {round.number}: {link}",
    ]
    frozen = cycle.frozen or {}
    if frozen.get("mode") == "replay" and frozen.get("slots"):
        held = frozen.get("heldOut") or {}
        trials = int((frozen.get("terms") or {}).get("trials") or 1)
        parts[-1:-1] = [
            f"Pre-merge check: the candidate (this head) and the incumbent (base {str(frozen.get('baseSha', ''))[:12]}) "
            f"are replayed on {len(frozen['slots'])} frozen input(s) × {trials} (held-out {held.get('k', 0)} of "
            f"{held.get('n', 0)}); `singularity/validation` answers on this head before any merge.",
            "",
        ]
        planned = power.planned_power(cycle.entity.terms or {}, frozen)
        if planned:
            parts[-1:-1] = [f"What the check can see: {planned['words']}.", ""]
    story = settings.SINGULARITY_PUBLIC_URL.rstrip("/") + cycle.get_absolute_url()
    return fit("\n".join(parts) + "\n", rest=story)


# --- The round ------------------------------------------------------------------------------


def accepted(round_id: int) -> Round | None:
    """The accepted round ``round_id`` waiting for its apply, or None (applied already, or its cycle ended)."""
    rnd = Round.objects.select_related("cycle", "cycle__entity").filter(pk=round_id).first()
    if rnd is None or rnd.status != Round.Status.ACCEPTED or rnd.cycle.status:
        return None
    return rnd


def apply(rnd: Round, *, now: datetime | None = None) -> Fail | None:
    """Apply an accepted round and record the open PR on it; Fail (for a Retry card) when the change cannot land."""
    from evolution.forges import ForgeError

    try:
        applied = apply_round(rnd)
    except ApplyFailed as exc:
        paths = list(getattr(exc, "paths", []) or [])
        return Fail(f"the apply failed: {exc}", paths=paths, unattended=autonomy.unattended(rnd))
    except (ForgeError, SingularityError) as exc:
        if isinstance(exc, ForgeError) and exc.until is not None:
            raise  # a rate limit: the apply waits for its reset (``machine.apply``), nothing is failed
        return Fail(f"the apply failed: {exc}{withdraw(rnd)}", paths=[], unattended=autonomy.unattended(rnd))
    now = now or timezone.now()
    rnd.status = Round.Status.APPLIED
    rnd.base_sha = applied.base_sha
    rnd.branch = applied.branch
    rnd.head_sha = applied.head_sha
    rnd.pr_number = applied.pull.number
    rnd.pr_url = applied.pull.url
    rnd.gate = applied.gate
    rnd.merge_gate = autonomy.HUMAN
    rnd.save()
    Cycle.objects.filter(pk=rnd.cycle_id).update(applied_at=now)
    rnd.cycle.applied_at = now
    return None


def withdraw(rnd: Round) -> str:
    """Close the PR this round's broken apply opened, if it opened one; the words the failure adds ("" if none).

    An apply that broke after the forge's open (its record refused, a lost
    answer) fails onto a Retry card, and a retry is a new round on a new
    branch: the PR left open would stand beside it for nobody. A forge that
    cannot be asked is logged and named; the failure stands either way.
    """
    from evolution.forges import ForgeError, rate_limit, rate_limit_words

    limit = rate_limit()
    if limit is not None:  # no call GitHub would refuse: the next attempt at this round adopts or closes it
        return f"; {rate_limit_words(limit[0])}: a PR it may have opened on {round_branch(rnd)} is not closed yet"
    try:
        forge = get_forge()
        pull = forge.open_pull_of(round_branch(rnd), forge.default_branch())
        if pull is None:
            return ""
        forge.close_pull(pull.number, by=rnd.cycle.actor)
    except (ForgeError, SingularityError) as exc:
        log.warning(
            "apply: cycle %s round %s: its PR could not be looked up or closed: %s", rnd.cycle_id, rnd.number, exc
        )
        return f"; a PR it may have opened on {round_branch(rnd)} could not be closed ({exc})"
    log.info(
        "apply: cycle %s round %s: PR #%s, opened by the broken apply, closed", rnd.cycle_id, rnd.number, pull.number
    )
    return f"; PR #{pull.number}, which it had opened, was closed"
