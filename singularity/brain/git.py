"""The brain's git repository, through the git command line (real git, no library).

``Checkout`` is a working clone the engine reads from; every read can name a
commit, so an entity is always read at the commit it was loaded from.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from singularity.errors import ConfigError, UpstreamError

GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Singularity",
    "GIT_AUTHOR_EMAIL": "singularity@localhost",
    "GIT_COMMITTER_NAME": "Singularity",
    "GIT_COMMITTER_EMAIL": "singularity@localhost",
}


#: Extra environment for every git command, asked for each one: a forge's HTTPS credential travels this way
#: (``GIT_CONFIG_*`` variables), so it is never on a command line, in a remote URL, in an error or on disk.
ENV_SOURCES: list[Callable[[], dict[str, str]]] = []


def add_env_source(source: Callable[[], dict[str, str]]) -> None:
    """Call ``source()`` before every git command and add what it returns to the command's environment."""
    if source not in ENV_SOURCES:
        ENV_SOURCES.append(source)


class GitError(UpstreamError):
    """A git command failed; the message carries the command and git's own words."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


def git(*args: str, cwd: Path | str | None = None, input: bytes | None = None, timeout: float = 120) -> bytes:
    """Run ``git args`` and return its standard output; raise GitError with git's message on failure."""
    env = {**os.environ, **GIT_ENV}
    for source in ENV_SOURCES:
        env.update(source())
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, input=input, capture_output=True, timeout=timeout, env=env, check=False
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed: the brain needs the git command line") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)}: timed out after {timeout:g}s") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip() or proc.stdout.decode(errors="replace").strip()
        raise GitError(f"git {' '.join(args)}: {detail}")
    return proc.stdout


@dataclass(frozen=True)
class Checkout:
    """A clone of the brain at ``path`` tracking ``branch`` of ``origin``."""

    path: Path
    branch: str = "main"

    def head(self) -> str:
        return git("rev-parse", "HEAD", cwd=self.path).decode().strip()

    def fetch(self) -> str:
        """Fetch the branch and move the working tree to it; return the new head commit."""
        git("fetch", "--quiet", "origin", self.branch, cwd=self.path)
        git("reset", "--quiet", "--hard", f"origin/{self.branch}", cwd=self.path)
        return self.head()

    def read_at(self, commit: str, path: str) -> bytes:
        """The bytes of ``path`` as of ``commit``; GitError when it did not exist there.

        A file at a full commit id never changes, so such reads are cached per process.
        """
        if len(commit) != 40:
            return git("show", f"{commit}:{path}", cwd=self.path)
        return _read_cached(str(self.path), commit, path)

    def exists_at(self, commit: str, path: str) -> bool:
        try:
            git("cat-file", "-e", f"{commit}:{path}", cwd=self.path)
        except GitError:
            return False
        return True

    def files_at(self, commit: str) -> list[str]:
        """Every file path in the tree of ``commit``."""
        out = git("ls-tree", "-r", "--name-only", "-z", commit, cwd=self.path)
        return [p for p in out.decode().split("\0") if p]

    def tree_at(self, commit: str) -> dict[str, TreeEntry]:
        """Every file path in the tree of ``commit`` with its mode and size, read without reading the files."""
        out = git("ls-tree", "-r", "-l", "-z", commit, cwd=self.path)
        entries: dict[str, TreeEntry] = {}
        for record in out.decode().split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, _kind, _sha, size = meta.split()
            entries[path] = TreeEntry(mode=mode, size=int(size) if size.isdigit() else 0)
        return entries


@dataclass(frozen=True)
class TreeEntry:
    """One file of a commit's tree: git's mode (``120000`` is a symlink) and its size in bytes."""

    mode: str
    size: int

    @property
    def is_symlink(self) -> bool:
        return self.mode == "120000"


@functools.lru_cache(maxsize=512)
def _read_cached(repo: str, commit: str, path: str) -> bytes:
    return git("show", f"{commit}:{path}", cwd=repo)


def clone(url: str, path: Path, branch: str = "main") -> Checkout:
    """Clone ``url`` into ``path`` (which must not exist) and return the checkout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "--quiet", "--branch", branch, url, str(path))
    return Checkout(path=path, branch=branch)


def init_bare_from(source: Path, bare: Path, branch: str = "main", message: str = "Initial brain") -> None:
    """Make a bare repository at ``bare`` whose ``branch`` holds one commit of ``source``'s files."""
    work = bare.with_name(bare.name + ".seed")
    git("init", "--quiet", "--bare", "--initial-branch", branch, str(bare))
    git("init", "--quiet", "--initial-branch", branch, str(work))
    git("--work-tree", str(source), "--git-dir", str(work / ".git"), "add", "--all", ".", cwd=source)
    git("--work-tree", str(source), "--git-dir", str(work / ".git"), "commit", "--quiet", "-m", message, cwd=source)
    git("--git-dir", str(work / ".git"), "push", "--quiet", str(bare), f"{branch}:{branch}")
    subprocess.run(["rm", "-rf", str(work)], check=True)
