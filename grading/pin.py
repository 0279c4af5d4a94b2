"""Who graded: the judge snapshot every grade records, and when two grades were graded by the same judge.

A snapshot is ``{"model", "method", "method_hash", "loop_hash", "role_hash"}``:
the model chain dispatched under, the method file's name and the sha256 of its
bytes, the sha256 of the entity's ``<id>.loop.py`` ("" when it has none) and
the evaluator role's hash. Under ``method: none`` the model, the method and
the role are "none" and only the loop module's hash is the instrument.
"""

from __future__ import annotations

from typing import Any, Protocol

NONE = "none"
FIELDS = ("model", "method", "method_hash", "loop_hash", "role_hash")
#: What decides comparability (DESIGN): the method's name is shown, its hash compared.
COMPARED = ("model", "method_hash", "loop_hash", "role_hash")


class MethodLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def sha256(self) -> str: ...


def snapshot(
    entity: Any,
    method: MethodLike | None,
    loop_module_hash: str,
    role_hash: str,
    *,
    model: str = "",
) -> dict[str, str]:
    """Return the judge snapshot for a grade of ``entity``.

    ``method`` None means ``method: none``: model, method, method hash and
    role read "none". Otherwise ``model`` is the chain the judge dispatched
    under (``evaluation.modelRef`` or the engine's model).
    """
    if method is None:
        return {
            "model": NONE,
            "method": NONE,
            "method_hash": NONE,
            "loop_hash": loop_module_hash or "",
            "role_hash": NONE,
        }
    return {
        "model": model,
        "method": method.name,
        "method_hash": method.sha256,
        "loop_hash": loop_module_hash or "",
        "role_hash": role_hash,
    }


def comparable(judge_a: dict[str, Any] | None, judge_b: dict[str, Any] | None) -> bool:
    """Return True when two grades were produced by the same judge: model chain, method, loop module and role hashes.

    A row recording no judge is comparable to nothing. A snapshot that states
    no role hash (recorded before the role was pinned) matches only another
    that states none.
    """
    if not judge_a or not judge_b:
        return False
    return all((judge_a.get(key) or "") == (judge_b.get(key) or "") for key in COMPARED)


def changed(frozen: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Return what moved between a frozen snapshot and the current one, in the words of the refusal.

    E.g. ``["method"]`` for "judge: method changed since the freeze".
    """
    words = {"model": "model", "method_hash": "method", "loop_hash": "loop module", "role_hash": "evaluator role"}
    return [word for key, word in words.items() if (frozen.get(key) or "") != (current.get(key) or "")]
