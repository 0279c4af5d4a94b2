"""What a settings write reaches (every entity it touches, validated by the loader) and which widenings of oversight it makes."""

from __future__ import annotations

import json
from typing import Any

from evolution.steering.settings.base import RANKED
from singularity.brain.loader import MANIFEST_PATH, BrainSnapshot, EntityDefinition


def _reached(tip_after: BrainSnapshot, definition: EntityDefinition | None) -> list[tuple[str, str]]:
    if definition is not None:
        return [(definition.target_kind, definition.slug)]
    return [(e.target_kind, e.slug) for e in tip_after.entities]


def breakages(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[str]:
    """Every entity the write would break, as "<kind>:<id>: <the loader's reason>" (brain-wide errors first).

    The target entity must load after the write; any other entity reached
    must not gain an error it did not have.
    """
    lines = [error for error in after.errors if error not in before.errors]
    for kind, slug in _reached(after, definition):
        now, then = after.entity(kind, slug), before.entity(kind, slug)
        if now is None or not now.error:
            continue
        if definition is not None or then is None or then.error != now.error:
            lines.append(f"{kind}:{slug}: {now.error}")
    return lines


def _rank(knob: str, value: Any) -> float:
    return float(RANKED[knob].get(value, 0))


def _leaf(terms: dict[str, Any], knob: str) -> Any:
    node: Any = terms.get("loop") or {}
    for name in knob.split("."):
        node = node.get(name) if isinstance(node, dict) else None
    return node


def knob_widenings(subject: str, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The widenings between two resolved terms of one entity: [{subject, knob, from, to}].

    autonomy.decide / merge human → auto; onInconclusive human → close → ship;
    onUnmeasured pause → continue; requireCalibration true → false;
    watch.onInconclusive revert → keep; maxConsecutiveRegressions raised or
    null (no breaker); editablePaths gaining a path; protectedPaths losing one;
    maxChangedLines raised.
    """
    found: list[dict[str, Any]] = []

    def widened(knob: str, old: Any, new: Any) -> None:
        found.append({"subject": subject, "knob": f"loop.{knob}", "from": old, "to": new})

    for knob in RANKED:
        old, new = _leaf(before, knob), _leaf(after, knob)
        if old != new and _rank(knob, new) > _rank(knob, old):
            widened(knob, old, new)
    old, new = _leaf(before, "autonomy.maxConsecutiveRegressions"), _leaf(after, "autonomy.maxConsecutiveRegressions")
    if old != new and old is not None and (new is None or new > old):
        widened("autonomy.maxConsecutiveRegressions", old, new)
    old, new = _leaf(before, "editablePaths") or [], _leaf(after, "editablePaths") or []
    if set(new) - set(old):
        widened("editablePaths", old, new)
    old, new = _leaf(before, "protectedPaths") or [], _leaf(after, "protectedPaths") or []
    if set(old) - set(new):
        widened("protectedPaths", old, new)
    old, new = _leaf(before, "maxChangedLines"), _leaf(after, "maxChangedLines")
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and new > old:
        widened("maxChangedLines", old, new)
    return found


def _brain_switch(manifest: dict[str, Any]) -> bool:
    """The brain-wide loop switch: off only when the manifest says ``loop.enabled: false``."""
    loop = manifest.get("loop") if isinstance(manifest, dict) else None
    return not (isinstance(loop, dict) and loop.get("enabled") is False)


def widenings(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[dict[str, Any]]:
    """Every widening of oversight the write makes, judged on resolved values for every entity it reaches."""
    found: list[dict[str, Any]] = []
    if definition is None and not _brain_switch(before.manifest) and _brain_switch(after.manifest):
        found.append({"subject": MANIFEST_PATH, "knob": "loop.enabled", "from": False, "to": True})
    for kind, slug in _reached(after, definition):
        then, now = before.entity(kind, slug), after.entity(kind, slug)
        if then is None or now is None or not then.ok or not now.ok:
            continue
        found.extend(knob_widenings(f"{kind}:{slug}", then.terms, now.terms))
    return found


def _groups(definition: EntityDefinition | None) -> set[str]:
    if definition is None or not definition.ok:
        return set()
    loop = definition.terms.get("loop") or {}
    return {g for g in loop.get("group") or [] if g in (loop.get("groups") or {})}


def held_departures(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[str]:
    """Each entity the write would take out of a lock group a hold stands on: "<kind>:<id> out of <group> (...)"."""
    from evolution.steering import supervision

    lines: list[str] = []
    for kind, slug in _reached(after, definition):
        left = _groups(before.entity(kind, slug)) - _groups(after.entity(kind, slug))
        for group in sorted(left):
            try:
                row = supervision.standing_hold({"group": group})
            except supervision.Refusal:
                row = None
            if row is not None:
                lines.append(f"{kind}:{slug} would leave lock group {group}, held by {row.actor}: {row.reason}")
    return lines


def _widen_refusal(widened: list[dict[str, Any]]) -> str:
    named = "; ".join(f"{w['subject']} {w['knob']}: {_show(w['from'])} → {_show(w['to'])}" for w in widened)
    return f"loop_set does not hand oversight to the machine: this write widens {named}. Use loop_widen, which a person approves"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
