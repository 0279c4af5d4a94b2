"""Git work the loop does outside the brain's checkout: throwaway clones, ancestry, fresh branch names.

Used by the apply, the revert, the local forge's merge and the settings
writes; nothing here knows about cycles.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from singularity.brain.git import GIT_ENV, GitError, git


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


def step_branch(prefix: str, *step: object) -> str:
    """``loop/<prefix>-<8 hex>`` derived from ``step`` (what names one step: a cycle's key, a round, a commit).

    The same step always draws the same branch, so a step retried after its
    worker died finds what the dead worker pushed and the PR it opened.
    """
    digest = hashlib.sha256("\x1f".join(str(part) for part in step).encode()).hexdigest()
    return f"loop/{prefix}-{digest[:8]}"
