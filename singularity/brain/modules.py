"""Python files of the brain (``*.loop.py``, ``*.pipeline.py``) imported from a commit, with their hash.

A module is built from the file's bytes at the commit being measured (never
from whatever the working tree holds now), and the sha256 of those bytes is
returned with it: the hash is what a grade records, so the bytes imported and
the hash recorded are always the same.

``load_at`` is how the engine reads a module: it is imported in the brain's
sandbox (``singularity.brain.sandbox``, separate processes under a deadline
and a memory cap), once per (file, hash), and what comes back stands for it
(its functions run there when called). ``module_from_source`` imports bytes
into this process instead: for tests and tools that read a module's own code,
never for the engine's calls.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

from singularity.brain.git import Checkout, GitError
from singularity.errors import ConfigError

_cache: dict[str, types.ModuleType] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class BrainModule:
    #: The module as imported in the sandbox: functions run there, data is read from there.
    module: Any
    sha256: str
    path: str
    commit: str


class BrainModuleError(ConfigError):
    """The file is missing at that commit, or importing it raised, spun past its deadline, exited or ran out of
    memory (the message names the file and what it did)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def module_from_source(path: str, source: bytes) -> tuple[types.ModuleType, str]:
    """Import ``source`` as a fresh module named after ``path`` and its hash; return the module and the hash."""
    digest = sha256(source)
    with _lock:
        cached = _cache.get(f"{path}:{digest}")
    if cached is not None:
        return cached, digest
    name = "brain_" + path.replace("/", "_").replace(".", "_").replace("-", "_") + "_" + digest[:12]
    module = types.ModuleType(name)
    module.__file__ = f"<brain>/{path}"
    # Registered before it runs (as an import is) so dataclasses and pickling can find their module;
    # compiled with dont_inherit so the engine's own __future__ flags never leak into brain code.
    sys.modules.setdefault(name, module)
    try:
        code = compile(source, module.__file__, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the brain's own code, by design
    except Exception as exc:
        sys.modules.pop(name, None)
        raise BrainModuleError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    with _lock:
        _cache[f"{path}:{digest}"] = module
    return module, digest


def load_at(checkout: Checkout, commit: str, path: str) -> BrainModule:
    """Import ``path`` as it is at ``commit``; BrainModuleError naming the file when it cannot."""
    try:
        source = checkout.read_at(commit, path)
    except GitError:
        raise BrainModuleError(f"{path}: not found at commit {commit[:12]}") from None
    from singularity.brain import sandbox

    digest = sha256(source)
    try:
        module = sandbox.load(path, digest, source, resolver=lambda relative: _helper(checkout, commit, relative))
    except sandbox.SandboxError as exc:
        raise BrainModuleError(str(exc)) from exc
    return BrainModule(module=module, sha256=digest, path=path, commit=commit)


def _helper(checkout: Checkout, commit: str, relative: str) -> bytes | None:
    """A helper a brain module imports, as it is at the module's commit (None when there is no such file)."""
    try:
        return checkout.read_at(commit, relative)
    except GitError:
        return None


def hash_at(checkout: Checkout, commit: str, path: str) -> str:
    """The sha256 of ``path`` as it is at ``commit`` (nothing imported); BrainModuleError when it is missing."""
    try:
        return sha256(checkout.read_at(commit, path))
    except GitError:
        raise BrainModuleError(f"{path}: not found at commit {commit[:12]}") from None
