"""Python files of the brain (``*.loop.py``, ``*.pipeline.py``) imported from a commit, with their hash.

A module is built from the file's bytes at the commit being measured (never
from whatever the working tree holds now), and the sha256 of those bytes is
returned with it: the hash is what a grade records, so the bytes imported and
the hash recorded are always the same. Modules are cached by hash, so a
changed file is re-imported and an unchanged one is not.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import types
from dataclasses import dataclass

from singularity.brain.git import Checkout, GitError
from singularity.errors import ConfigError

_cache: dict[str, types.ModuleType] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class BrainModule:
    module: types.ModuleType
    sha256: str
    path: str
    commit: str


class BrainModuleError(ConfigError):
    """The file is missing at that commit, or importing it raised."""


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
    module, digest = module_from_source(path, source)
    return BrainModule(module=module, sha256=digest, path=path, commit=commit)
