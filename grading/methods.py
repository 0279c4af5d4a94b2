"""The judge's method file: ``constitution/Evaluation/Methods/<name>.md`` at the entity's commit, with its hash.

Method "default" falls back to the engine's bundled text
(``singularity/brain/default_method.md``) when the brain has none. The hash
is the sha256 of the exact bytes the judge is given, so the pin and the
prompt can never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.models import Entity
from singularity.brain.git import GitError
from singularity.brain.modules import sha256
from singularity.errors import ConfigError

METHODS_DIR = "constitution/Evaluation/Methods"
BUNDLED_DEFAULT = Path(__file__).resolve().parent.parent / "singularity" / "brain" / "default_method.md"


class MethodError(ConfigError):
    """The entity's method file cannot be resolved; the message names the file."""


@dataclass(frozen=True)
class ResolvedMethod:
    name: str
    #: The brain path, or "engine:default_method.md" for the bundled text.
    path: str
    text: str
    sha256: str


def method_name(entity: Entity) -> str:
    """Return the resolved ``evaluation.method`` of the entity ("default" when unset)."""
    return str(entity.evaluation().get("method") or "default")


def method_path(name: str) -> str:
    return f"{METHODS_DIR}/{name}.md"


def _bundled(name: str) -> ResolvedMethod:
    try:
        data = BUNDLED_DEFAULT.read_bytes()
    except OSError as exc:
        raise MethodError(f"method {name!r}: the engine's bundled {BUNDLED_DEFAULT.name} is missing") from exc
    return ResolvedMethod(
        name=name, path=f"engine:{BUNDLED_DEFAULT.name}", text=data.decode("utf-8"), sha256=sha256(data)
    )


def brain_checkout(checkout: Any | None) -> Any:
    """Return ``checkout``, or the engine's brain checkout (grading.sync) when None."""
    if checkout is not None:
        return checkout
    from grading.sync import current_checkout

    return current_checkout()


def resolve_method(entity: Entity, *, checkout: Any | None = None, name: str | None = None) -> ResolvedMethod:
    """Return the method file the entity is judged by, at the entity's commit.

    MethodError naming the file when the brain has no such method (and it is
    not "default", which falls back to the engine's text). An entity with no
    commit (never synced from a brain) reads only the engine's default.
    """
    name = name or method_name(entity)
    if name == "none":
        raise MethodError(f"{entity}: method none has no method file")
    path = method_path(name)
    if entity.commit:
        repo = brain_checkout(checkout)
        try:
            data = repo.read_at(entity.commit, path)
        except GitError:
            data = None
        if data is not None:
            return ResolvedMethod(name=name, path=path, text=data.decode("utf-8"), sha256=sha256(data))
    if name == "default":
        return _bundled(name)
    raise MethodError(
        f"{entity}: evaluation.method {name!r}: {path} not found at commit {entity.commit[:12] or '(none)'}"
    )


# --- eval_list_methods, eval_get_method (R2.29) ------------------------------------------------------------------

#: A method's name: the stem of its file under METHODS_DIR.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


def users() -> dict[str, list[str]]:
    """Each method name to the graded entities using it now, as "<targetKind>:<id>" in order (one query)."""
    rows = (
        Entity.objects.filter(present=True, evaluation_enabled=True).exclude(terms={}).order_by("target_kind", "slug")
    )
    found: dict[str, list[str]] = {}
    for entity in rows:
        if entity.ok:
            found.setdefault(method_name(entity), []).append(f"{entity.target_kind}:{entity.slug}")
    return found


def _row(method: Any, used: dict[str, list[str]], *, content: bool) -> dict[str, Any]:
    row = {
        "name": method.name,
        "source": method.source,
        "path": method.path,
        "sha": method.sha256 or None,
        "usedBy": used.get(method.name, []),
        "error": method.error or None,
    }
    if content:
        row["content"] = method.text
    return row


def _methods_at_head(checkout: Any | None) -> dict[str, Any]:
    from singularity.brain.loader import load_methods

    repo = brain_checkout(checkout)
    return load_methods(repo, repo.head())


def list_methods(*, checkout: Any | None = None) -> list[dict[str, Any]]:
    """Every method at the brain's head — the engine's, the brain's copy of it (engine-customised), the brain's own —
    with its sha and the graded entities using it now; by name."""
    methods, used = _methods_at_head(checkout), users()
    return [_row(methods[name], used, content=False) for name in sorted(methods)]


def get_method(name: str, *, checkout: Any | None = None) -> dict[str, Any] | None:
    """Method ``name`` at the brain's head with its content and the sha a write swaps against; None when none."""
    method = _methods_at_head(checkout).get(name)
    return _row(method, users(), content=True) if method is not None else None
