"""A real git brain for the loader, sync and doctor tests: a bare origin, a person's clone, the engine's checkout."""

from __future__ import annotations

from pathlib import Path

from singularity.brain.git import Checkout, clone, git, init_bare_from


def md(frontmatter: str, body: str = "Do the work.\n") -> str:
    """A markdown entity file: ``frontmatter`` (YAML text) between --- lines, then the body."""
    return f"---\n{frontmatter.strip()}\n---\n{body}"


def write_files(root: Path, files: dict[str, str | bytes | None]) -> None:
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


class Brain:
    """``origin`` (bare), ``work`` (where a person commits and pushes) and ``checkout`` (the engine's clone)."""

    def __init__(self, root: Path, files: dict[str, str | bytes | None]) -> None:
        source = root / "source"
        write_files(source, {"README.md": "A test brain.\n", **files})
        self.origin = root / "origin.git"
        init_bare_from(source, self.origin)
        self.work = clone(str(self.origin), root / "work")
        self.checkout: Checkout = clone(str(self.origin), root / "engine")

    def commit(self, files: dict[str, str | bytes | None], message: str = "Edit the brain") -> str:
        """Write (or, with None, delete) files in the person's clone, commit, push; return the new commit."""
        write_files(self.work.path, files)
        git("add", "--all", ".", cwd=self.work.path)
        git("commit", "--quiet", "-m", message, cwd=self.work.path)
        git("push", "--quiet", "origin", "main", cwd=self.work.path)
        return self.work.head()


SCENARIO = md(
    """
name: Digest
description: Writes the daily digest
evaluation:
  enabled: true
loop:
  enabled: true
"""
)

HEARTBEAT = md(
    """
name: Pulse
schedule: '*/5 * * * *'
evaluation:
  enabled: true
"""
)
