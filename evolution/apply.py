"""Apply an accepted round: write its files in a throwaway clone, gate them, commit, push a branch, open the PR.

The loop never pushes to the default branch. ``apply_round`` clones the
forge's remote into a fresh directory under ``settings.LOOP_WORK_DIR``
(removed afterwards, on failure too), writes the proposal's files at the
default branch's tip as read now, runs the diff gate (``evolution.diffgate``),
commits exactly the gated files on ``loop/<entity>-<8 hex>`` (each re-checked
against the gate's digest), pushes that branch, sets ``singularity/diff-gate``
to success on the pushed commit and only then opens the pull request.

It records nothing on the round or the cycle: the caller stores what the
returned ``Applied`` carries. A refused change raises ``ApplyFailed`` with the
gate's message and the offending paths; nothing is pushed then.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from evolution import diffgate
from evolution.forges import get_forge
from evolution.forges.base import DIFF_GATE, PullInfo
from evolution.models import Round
from singularity.brain.git import GIT_ENV, GitError, git
from singularity.errors import StateError

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


# --- Throwaway clones -----------------------------------------------------------------------


@contextmanager
def throwaway_clone(url: str, branch: str, *, label: str = "clone") -> Iterator[Path]:
    """Yield a fresh clone of ``url`` at ``branch`` under settings.LOOP_WORK_DIR; it is removed on the way out."""
    work = Path(settings.LOOP_WORK_DIR)
    work.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=work))
    try:
        clone = root / "repo"
        git("clone", "--quiet", "--branch", branch, url, str(clone))
        yield clone
    finally:
        shutil.rmtree(root, ignore_errors=True)


def is_ancestor(ancestor: str, descendant: str, *, cwd: Path | str) -> bool:
    """Whether commit ``ancestor`` is reachable from ``descendant``; GitError when git cannot tell."""
    proc = subprocess.run(
        ["git", "merge-base", "--is-ancestor", ancestor, descendant],
        cwd=cwd,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
        check=False,
    )
    if proc.returncode in (0, 1):
        return proc.returncode == 0
    raise GitError(
        f"git merge-base --is-ancestor {ancestor} {descendant}: {proc.stderr.decode(errors='replace').strip()}"
    )


def branch_name(prefix: str) -> str:
    """``loop/<prefix>-<8 hex>``: a branch name no other apply draws."""
    return f"loop/{prefix}-{secrets.token_hex(4)}"


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
    branch = branch_name(entity.slug)
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
        git("push", "--quiet", "origin", f"refs/heads/{branch}:refs/heads/{branch}", cwd=clone)
    described = f"{len(gate['paths'])} file(s), {gate['lines']} of {gate['bound']} lines"
    forge.set_status(head_sha, DIFF_GATE, "success", f"The diff gate passed: {described}")
    pull = forge.open_pull(head=branch, base=default, title=pull_title(round), body=pull_body(round, gate))
    log.info("apply: cycle %s round %s opened PR #%s on %s", cycle.pk, round.number, pull.number, branch)
    return Applied(branch=branch, base_sha=base_sha, head_sha=head_sha, pull=pull, gate=dict(gate))


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
        (round.summary or "").strip() or "(none given)",
        "",
        "## Hypothesis",
        "",
        (round.hypothesis or "").strip() or "(none given)",
        "",
        "## Files",
        "",
        *files,
        "",
        f"Lessons cited: {cited}",
        f"Author: {round.author or 'unknown'}",
        f"Diff gate: {len(gate.get('paths', []))} file(s), {gate.get('lines')} lines changed "
        f"(loop.maxChangedLines {gate.get('bound')}), base {str(gate.get('base', ''))[:12]}.",
        "",
        f"Cycle {cycle.pk}, round {round.number}: {link}",
    ]
    return "\n".join(parts) + "\n"
