"""The write: stage the edits in a throwaway clone, validate them, push with conflict over changed bytes, sync, record."""

from __future__ import annotations

import difflib
import hashlib
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.utils import timezone

from evolution.models import ActionLog
from evolution.steering.settings.base import (
    ATTEMPTS,
    CONFLICT,
    INVALID,
    NOT_FOUND,
    REFUSED,
    Answer,
    Edit,
    Planner,
    SettingsRefusal,
    Tip,
    log,
    subject_of,
)
from evolution.steering.settings.lock import settings_lock
from evolution.steering.settings.loosening import loosenings
from evolution.steering.settings.oversight import _widen_refusal, breakages, held_departures, widenings
from evolution.steering.settings.yaml_edits import edit_file
from grading.models import Entity
from singularity.brain.git import Checkout, GitError, git
from singularity.brain.loader import MANIFEST_PATH, load_brain


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Staged:
    """A write made and validated in the clone: the file's bytes before and after, its diff, the widenings."""

    path: str
    before: bytes
    after: bytes
    edits: list[Edit]
    widened: list[dict[str, Any]]
    tip: Tip
    #: The loosenings of spend, the check or the watch (``loosening.loosenings``).
    loosened: list[dict[str, Any]] = field(default_factory=list)
    #: The target's resolved terms with the write made (None: nothing changed, or the target is the manifest).
    terms_after: dict[str, Any] | None = None

    @property
    def diff(self) -> str:
        old = self.before.decode("utf-8").splitlines(keepends=True)
        new = self.after.decode("utf-8").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, fromfile=f"a/{self.path}", tofile=f"b/{self.path}"))

    def files(self) -> list[dict[str, str]]:
        if self.before == self.after:
            return []
        return [{"path": self.path, "diff": self.diff, "base": digest(self.before)}]


def _tip(clone: Path, branch: str, target: Entity | None) -> Tip:
    """Load the brain at the clone's head and find the target's definition and file there."""
    checkout = Checkout(path=clone, branch=branch)
    snapshot = load_brain(checkout, checkout.head())
    definition = None
    if target is not None:
        definition = snapshot.entity(target.target_kind, target.slug)
        if definition is None:
            raise SettingsRefusal(NOT_FOUND, f"{subject_of(target)} is not in the brain at {snapshot.commit[:12]}")
    path = definition.path if definition is not None else MANIFEST_PATH
    file = clone / path
    try:
        text = file.read_bytes().decode("utf-8") if file.exists() else ""
    except UnicodeDecodeError:
        raise SettingsRefusal(REFUSED, f"{path}: not UTF-8 text, so it cannot be edited") from None
    return Tip(snapshot=snapshot, definition=definition, path=path, text=text)


def _stage(
    clone: Path,
    branch: str,
    target: Entity | None,
    plan: Planner,
    expect: dict[str, str] | None,
    *,
    actor: str,
    op: str,
) -> Staged:
    """Plan the write on the clone's head, make it, commit it there and validate it; nothing leaves the clone."""
    tip = _tip(clone, branch, target)
    before = tip.text.encode("utf-8")
    if expect and tip.path in expect and expect[tip.path] != digest(before):
        raise SettingsRefusal(
            CONFLICT, f"{tip.path} changed since it was read (it is at {tip.snapshot.commit[:12]} now): try again"
        )
    edits = plan(tip)
    after = edit_file(tip.path, tip.text, edits).encode("utf-8") if edits else before
    staged = Staged(path=tip.path, before=before, after=after, edits=edits, widened=[], tip=tip)
    if after == before:
        return staged
    (clone / tip.path).parent.mkdir(parents=True, exist_ok=True)
    (clone / tip.path).write_bytes(after)
    git("add", "--", tip.path, cwd=clone)
    summary = "; ".join(e.words() for e in edits)
    message = f"settings({tip.subject}): {summary}"[:200] + f"\n\n{op} by {actor}.\n"
    git("commit", "--quiet", "--no-verify", f"--author={_author(actor)}", "-m", message, cwd=clone)
    checkout = Checkout(path=clone, branch=branch)
    snapshot = load_brain(checkout, checkout.head())
    broken = breakages(tip.snapshot, snapshot, tip.definition)
    if broken:
        raise SettingsRefusal(
            REFUSED, "the write would break what it reaches, so nothing was written: " + "; ".join(broken)
        )
    departures = held_departures(tip.snapshot, snapshot, tip.definition)
    if departures:
        raise SettingsRefusal(
            REFUSED, "; ".join(departures) + " — the hold would stop applying to it; lifting a hold is loop_release's"
        )
    staged.widened = widenings(tip.snapshot, snapshot, tip.definition)
    staged.loosened = loosenings(tip.snapshot, snapshot, tip.definition)
    if tip.definition is not None:
        after = snapshot.entity(tip.definition.target_kind, tip.definition.slug)
        staged.terms_after = after.terms if after is not None and after.ok else None
    return staged


def _author(actor: str) -> str:
    name = re.sub(r"[<>\n]", "", actor).strip() or "someone"
    return f"{name} <settings@singularity.local>"


def _push(clone: Path, branch: str) -> None:
    """Push the clone's head to the default branch (never forced); GitError when the remote refuses."""
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)


def _moved(clone: Path, branch: str, onto: str) -> str | None:
    """The remote tip when it moved off ``onto`` (the commit the write was made on), else None."""
    git("fetch", "--quiet", "origin", branch, cwd=clone)
    tip = git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip()
    return tip if tip != onto else None


def _bytes_at(clone: Path, commit: str, path: str) -> bytes:
    try:
        return git("show", f"{commit}:{path}", cwd=clone)
    except GitError:
        return b""


def _sync() -> str:
    """Sync the brain so the rows read the write at once; "" or why it failed (the periodic sync catches up)."""
    from grading.sync import sync_brain

    try:
        sync_brain()
    except Exception as exc:  # noqa: BLE001 - the write stands; the periodic sync retries
        log.exception("loop settings: the brain sync after a write failed")
        return f"{type(exc).__name__}: {exc}"
    return ""


def _run(
    target: Entity | None,
    plan: Planner,
    *,
    op: str,
    actor: str,
    dry_run: bool,
    expect: dict[str, str] | None,
    allow_widen: bool,
    hold_loosening: bool = False,
) -> tuple[Answer, Staged | None]:
    """Make (or, dry run, only validate) one write; see the module docstring for the steps.

    ``hold_loosening`` (an agent's call): a write that loosens spend, the check
    or the watch is validated and not written — the answer carries ``loosened``
    and the caller opens a person's card.
    """
    from evolution.forges import get_forge
    from evolution.forges.git import throwaway_clone

    actor = (actor or "").strip()
    if not actor:
        raise SettingsRefusal(INVALID, "a loop-settings write needs the actor who makes it")
    forge = get_forge()
    branch = forge.default_branch()
    answer = Answer(dry_run=dry_run, subject=subject_of(target))
    lock = nullcontext() if dry_run else settings_lock()
    with lock, throwaway_clone(forge.remote_url(), branch, label="settings") as clone:
        staged = None
        for _ in range(ATTEMPTS):
            onto = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            staged = _stage(clone, branch, target, plan, expect, actor=actor, op=op)
            answer.files, answer.widened, answer.loosened = staged.files(), staged.widened, staged.loosened
            answer.summary = "; ".join(e.words() for e in staged.edits)
            answer.terms_after = staged.terms_after
            if staged.widened and not allow_widen:
                raise SettingsRefusal(REFUSED, _widen_refusal(staged.widened), widened=staged.widened)
            if dry_run or not answer.changed or (hold_loosening and staged.loosened):
                return answer, staged
            try:
                _push(clone, branch)
            except GitError:
                tip = _moved(clone, branch, onto)
                if tip is None:
                    raise
                if _bytes_at(clone, tip, staged.path) != staged.before:
                    raise SettingsRefusal(
                        CONFLICT, f"{staged.path} changed while the write was being made: try again"
                    ) from None
                log.info("loop settings: %s moved under the write to %s; making it again", branch, staged.path)
                git("reset", "--quiet", "--hard", tip, cwd=clone)
                expect = {staged.path: digest(staged.before)}
                continue
            answer.commit = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            _record(target, staged, answer, op=op, actor=actor)
            break
        else:
            raise SettingsRefusal(CONFLICT, f"{branch} kept moving ({ATTEMPTS} tries): try again")
    sync_error = _sync()
    if sync_error:
        log.warning("loop settings: commit %s stands; the sync will catch up (%s)", answer.commit, sync_error)
    return answer, staged


def _record(target: Entity | None, staged: Staged, answer: Answer, *, op: str, actor: str) -> ActionLog:
    """The action-log row of a write that changed something."""
    row = ActionLog.objects.create(
        actor=actor[:200],
        op=op,
        subject=answer.subject,
        entity=target,
        summary=f"{op} {answer.subject}: {answer.summary}",
        diff=staged.diff,
        commit=answer.commit or "",
        created_at=timezone.now(),
    )
    log.info("loop settings: %s by %s: %s (%s)", op, actor, answer.summary, (answer.commit or "")[:12])
    return row
