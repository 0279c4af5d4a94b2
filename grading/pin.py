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


# --- Reading many grades' judges --------------------------------------------------------------

#: What ``judge_text`` reads for a grade whose judge is stored exactly as the pinned snapshot.
SAME = "="


def judge_text(pinned: dict[str, Any] | None) -> Any:
    """A grade's judge as its stored JSON text, or ``SAME`` where it is stored exactly as ``pinned`` (an expression
    for ``values_list``): a window's thousand grades mostly share the judge the cycle pinned, whose text is then
    neither sent nor decoded once a row. Equality is the database's (Postgres compares jsonb by value, SQLite the
    text as Django wrote it); a judge it does not find equal is read as text and compared by ``comparable``.
    """
    import json

    from django.db import connection
    from django.db.models import TextField
    from django.db.models.expressions import RawSQL
    from django.db.models.functions import Cast

    if not pinned or connection.vendor not in ("postgresql", "sqlite"):
        return Cast("judge", TextField())
    text = json.dumps(pinned)
    if connection.vendor == "postgresql":
        sql = 'CASE WHEN "grading_grade"."judge" = %s::jsonb THEN %s ELSE "grading_grade"."judge"::text END'
    else:
        sql = 'CASE WHEN "grading_grade"."judge" = %s THEN %s ELSE "grading_grade"."judge" END'
    return RawSQL(sql, (text, SAME))


def comparable_text(pinned: dict[str, Any] | None, text: str | None, seen: dict[str | None, bool]) -> bool:
    """``comparable(pinned, judge)`` for a judge read by ``judge_text``, decoded once per distinct text (``seen``)."""
    if text not in seen:
        import json

        seen[text] = comparable(pinned, pinned if text == SAME else (json.loads(text) if text else None))
    return seen[text]
