"""One whole brain file written (or removed) the way every brain write is: in a throwaway clone, swapped against the
sha its writer read, validated, committed and pushed to the default branch, then the brain synced and the write
logged. What eval_write_method and the instruction tools call (``steering.methods``, ``steering.instructions``).

The sha is the SHA-256 of the file's bytes as the tools read them: the brain's copy, else (``fallback``) the engine's
text the tools answer in its place. A write naming another sha is refused ``conflict`` naming the current one; a
dry run validates and answers what the write would do, changing nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from evolution.models import ActionLog
from evolution.steering.settings.base import ATTEMPTS, CONFLICT, INVALID, SettingsRefusal, log
from evolution.steering.settings.lock import settings_lock
from evolution.steering.settings.write import _author, _moved, _push, _sync, digest
from singularity.brain.git import GitError, git

#: Validates the bytes a write would leave at the path (None: removed); raises SettingsRefusal naming what and where.
Check = Callable[[bytes | None], None]


@dataclass
class FileAnswer:
    """What a file write answers: the file, its sha before and after, the diff, the commit (None on a dry run)."""

    path: str
    dry_run: bool
    changed: bool
    previous_sha: str | None
    sha: str | None
    diff: str
    commit: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "path": self.path,
            "dryRun": self.dry_run,
            "changed": self.changed,
            "previousSha": self.previous_sha,
            "sha": self.sha,
            "diff": self.diff,
            "commit": self.commit,
        }


def _diff(path: str, before: bytes | None, after: bytes | None) -> str:
    old = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    new = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{path}", tofile=f"b/{path}"))


def _current(clone: Any, path: str) -> bytes | None:
    target = clone / path
    return target.read_bytes() if target.is_file() else None


def _swap_refusal(path: str, expect: str | None, current: str | None) -> SettingsRefusal | None:
    if expect is None or expect == current:
        return None
    now = f"its sha is {current} now" if current else "it does not exist now"
    return SettingsRefusal(CONFLICT, f"{path} changed since it was read ({now}, not {expect}): read it again")


def write_file(
    path: str,
    content: bytes | None,
    *,
    expect: str | None,
    fallback: bytes | None,
    check: Check,
    actor: str,
    op: str,
    subject: str,
    dry_run: bool,
) -> FileAnswer:
    """Write ``content`` at ``path`` in the brain (None removes the file), or, dry run, only validate it.

    ``expect`` is the sha the writer read (None: no swap asked); ``fallback`` the engine's bytes read in place of
    an absent file. SettingsRefusal: invalid (``check`` said why), conflict (a stale sha, or the branch kept moving).
    """
    from evolution.forges import get_forge
    from evolution.forges.git import throwaway_clone

    actor = (actor or "").strip()
    if not actor:
        raise SettingsRefusal(INVALID, f"{op}: a brain write needs the actor who makes it")
    forge = get_forge()
    branch = forge.default_branch()
    lock = nullcontext() if dry_run else settings_lock()
    with lock, throwaway_clone(forge.remote_url(), branch, label="brain-file") as clone:
        for _ in range(ATTEMPTS):
            onto = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            before = _current(clone, path)
            read = before if before is not None else fallback
            previous = digest(read) if read is not None else None
            refused = _swap_refusal(path, expect, previous)
            if refused is not None:
                raise refused
            check(content)
            after = content if content is not None else fallback
            answer = FileAnswer(
                path=path,
                dry_run=dry_run,
                changed=before != content,
                previous_sha=previous,
                sha=digest(after) if after is not None else None,
                diff=_diff(path, before, content),
            )
            if dry_run or not answer.changed:
                return answer
            _commit(clone, path, content, actor=actor, op=op, subject=subject)
            try:
                _push(clone, branch)
            except GitError:
                tip = _moved(clone, branch, onto)
                if tip is None:
                    raise
                log.info("brain write: %s moved under the write to %s; making it again", branch, path)
                git("reset", "--quiet", "--hard", tip, cwd=clone)
                expect = previous  # the write stands only over the bytes it was validated on
                continue
            answer.commit = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            _record(answer, removed=content is None, actor=actor, op=op, subject=subject)
            break
        else:
            raise SettingsRefusal(CONFLICT, f"{branch} kept moving ({ATTEMPTS} tries): try again")
    sync_error = _sync()
    if sync_error:
        log.warning("brain write: commit %s stands; the sync will catch up (%s)", answer.commit, sync_error)
    return answer


def _commit(clone: Any, path: str, content: bytes | None, *, actor: str, op: str, subject: str) -> None:
    target = clone / path
    if content is None:
        git("rm", "--quiet", "--", path, cwd=clone)
        words = f"{op}({subject}): {path} removed"
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        git("add", "--", path, cwd=clone)
        words = f"{op}({subject}): {path} written"
    message = words[:200] + f"\n\n{op} by {actor}.\n"
    git("commit", "--quiet", "--no-verify", f"--author={_author(actor)}", "-m", message, cwd=clone)


def _record(answer: FileAnswer, *, removed: bool, actor: str, op: str, subject: str) -> ActionLog:
    words = "removed" if removed else "written"
    row = ActionLog.objects.create(
        actor=actor[:200],
        op=op,
        subject=subject,
        entity=None,
        summary=f"{op} {subject}: {answer.path} {words}",
        diff=answer.diff,
        commit=answer.commit or "",
        created_at=timezone.now(),
    )
    log.info("brain write: %s by %s: %s (%s)", op, actor, answer.path, (answer.commit or "")[:12])
    return row
