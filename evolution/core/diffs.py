"""A proposal's change as a person reads it: each file's unified diff against the base, with its real line counts.

The base is the commit the round was applied on (``Round.base_sha``) or,
before the apply, the commit the entity runs at now. A file the base lacks is
a new file; a proposal without content deletes its file.
"""

from __future__ import annotations

import difflib
from typing import Any

from singularity.brain.git import GitError

#: How many diff lines a card shows before it points at the Full proposal.
CARD_LINES = 40


def _base_text(path: str, base: str) -> str | None:
    from grading.sync import current_checkout

    if not base:
        return None
    try:
        return current_checkout().read_at(base, path).decode("utf-8", errors="replace")
    except GitError:
        return None


def file_diffs(rnd: Any) -> list[dict[str, Any]]:
    """Each proposed file: {path, added, removed, new, deleted, lines (the unified diff, a list of strings)}."""
    base = rnd.base_sha or getattr(rnd.cycle.entity, "commit", "") or ""
    shown = []
    for file in rnd.files or []:
        if not isinstance(file, dict) or not file.get("path"):
            continue
        path = str(file["path"])
        before = _base_text(path, base)
        content = file.get("content")
        after = None if content is None else str(content)
        old = (before or "").splitlines(keepends=True)
        new = (after or "").splitlines(keepends=True)
        lines = [
            line.rstrip("\n") for line in difflib.unified_diff(old, new, fromfile=f"a/{path}", tofile=f"b/{path}", n=2)
        ]
        body = lines[2:]
        shown.append(
            {
                "path": path,
                "added": sum(1 for line in body if line.startswith("+")),
                "removed": sum(1 for line in body if line.startswith("-")),
                "new": before is None and after is not None,
                "deleted": after is None,
                "lines": lines,
            }
        )
    return shown


def excerpt(diffs: list[dict[str, Any]], limit: int = CARD_LINES) -> tuple[list[str], int]:
    """The first ``limit`` diff lines of all files (headers included), and how many lines were left out."""
    every = [line for diff in diffs for line in diff["lines"]]
    return every[:limit], max(0, len(every) - limit)
