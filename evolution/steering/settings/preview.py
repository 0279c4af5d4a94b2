"""The policy a settings change would make: loop_set's dry run of several keys at once, read back as resolved terms.

A backtest of a proposed change replays the history through the terms this
answers — the entity's own definition with every change written as the dry
run writes it (the same key checks, the same wholesale copies, the same load
of the brain at the staged commit), and nothing pushed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from evolution.steering.settings.base import INVALID, OP_SET, REMOVE, SET, Answer, Edit, SettingsRefusal, Tip
from evolution.steering.settings.write import _run
from evolution.steering.settings.writes import check_key, key_edits
from grading.models import Entity


@dataclass(frozen=True)
class Change:
    """One key a proposed policy sets or removes: ``loop.trigger.minFailures = 3``."""

    key: str
    op: str = SET
    value: Any = None

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "op": self.op, "value": self.value}

    def words(self) -> str:
        return Edit(self.key, self.op, self.value).words()


def changes_from(raw: Any) -> list[Change]:
    """``[{key, op?, value?}]`` as Changes; SettingsRefusal(invalid) naming the item that is not one."""
    if not isinstance(raw, list) or not raw:
        raise SettingsRefusal(INVALID, "changes: a non-empty list of {key, op, value}")
    found = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise SettingsRefusal(INVALID, f"changes[{index}]: an object with a key, not {item!r}")
        found.append(Change(item["key"], item.get("op") or SET, item.get("value")))
    return found


def _nested(block: Any, path: list[str], change: Change) -> Any:
    """``block`` (a copied wholesale block) with ``change`` made at ``path`` inside it."""
    tree = copy.deepcopy(block)
    node = tree
    for step in path[:-1]:
        if not isinstance(node.get(step), dict):
            node[step] = {}
        node = node[step]
    if change.op == REMOVE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = change.value
    return tree


def plan(tip: Tip, changes: list[Change]) -> list[Edit]:
    """The edits of all ``changes`` at the tip, in order: a key inside a block an earlier change copied is made in
    that copy (two keys of one wholesale block never undo each other)."""
    edits: list[Edit] = []
    for change in changes:
        index = next(
            (
                i
                for i, e in enumerate(edits)
                if e.op == SET and isinstance(e.value, dict) and change.key.startswith(e.key + ".")
            ),
            None,
        )
        if index is None:
            edits += key_edits(tip, change.key, change.op, change.value)
            continue
        host = edits[index]
        path = change.key[len(host.key) + 1 :].split(".")
        edits[index] = Edit(host.key, SET, _nested(host.value, path, change))
    return edits


def proposed_terms(target: Entity, changes: list[Change], *, actor: str) -> tuple[dict[str, Any], Answer]:
    """The entity's resolved terms with ``changes`` made (a dry run: nothing is written) and the dry run's answer.

    Raises SettingsRefusal: a key, op or value no tier could take, or a change that would break what it reaches.
    """
    if not changes:
        raise SettingsRefusal(INVALID, "changes: name at least one key")
    for change in changes:
        check_key(change.key, change.op, change.value, target)
    answer, staged = _run(
        target, lambda tip: plan(tip, changes), op=OP_SET, actor=actor, dry_run=True, expect=None, allow_widen=True
    )
    if staged is None or staged.terms_after is None:
        return dict(target.terms or {}), answer  # the files already say so: the policy is today's
    return staged.terms_after, answer
