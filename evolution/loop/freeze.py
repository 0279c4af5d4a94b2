"""What a cycle freezes for its pre-merge check, written once right after the judge pin (seed 003, "What a cycle freezes").

Not a stage: the opening calls ``freeze`` and the check reads what it wrote.

- **The mode** (``check_mode``): a declared ``check.mode`` is honoured on a
  workflow; a heartbeat or a pipeline is never replayed (nothing can re-run
  it), whatever is declared. With no mode declared a workflow derives
  ``replay``: this product's workflows have no capability plan a person
  grants, open no pull request and run in the brain, and every tool that
  writes answers dry-run in a replay (docs/decisions.md).
- **History slots**: the last ``check.inputs`` distinct inputs among the
  entity's own graded runs through the cycle's anchor (the run whose grade
  opened it, else the window's newest run), the anchor's input first, then
  inputs no evidence run ran on (held out), then inputs the proposer saw. The
  scan reads at most ``SCAN_LIMIT`` of the newest graded runs (deeper than any
  window, bounded so the freeze costs the same whatever the history holds).
  Under ``incumbent: frozen`` a slot keeps its grade as the incumbent's score
  when that grade was made under the pinned judge and measured something; the
  anchor never keeps its score; under ``incumbent: replay`` no slot does.
- **Golden cases**: the loop module's ``CASES`` (``[{id, input}]``, ids
  unique), after the history, never held out, never scored; a case whose
  input a history slot already covers is dropped.
- **The base commit**: the default branch's tip as the remote holds it now.

``FreezeRefused`` (naming the file) when the brain will not yield a set: the
proposal is set aside skipped, as an unresolvable judge is.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from evolution.models import Cycle
from grading.models import Entity, Execution, Grade
from grading.pin import comparable
from singularity.brain import defaults as D
from singularity.errors import ConfigError

log = logging.getLogger(__name__)

REPLAY, NONE = "replay", "none"
#: The most graded runs one freeze reads, newest first.
SCAN_LIMIT = 2000
#: A frozen input is shown to people by its first characters.
LABEL_CHARS = 60


class FreezeRefused(ConfigError):
    """The brain's files will not yield a frozen set; the message names the file and why."""


def check_terms(entity: Entity) -> dict[str, Any]:
    """The entity's resolved ``loop.check`` block (the engine's defaults under whatever tiers wrote)."""
    loop = (entity.terms or {}).get("loop") or {}
    return {**D.LOOP["check"], **(loop.get("check") or {})}


def check_mode(entity: Entity) -> str:
    """``replay`` or ``none`` (see the module's docstring)."""
    if entity.kind != Entity.Kind.WORKFLOW:
        return NONE
    declared = check_terms(entity).get("mode")
    return declared if declared in (REPLAY, NONE) else REPLAY


def input_key(value: Any) -> str:
    """Two inputs are the same input when their JSON is (keys sorted)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def label_of(value: Any) -> str:
    """The first characters of an input as a person reads it (a ticket's text, else its JSON)."""
    if isinstance(value, dict):
        visible = {k: v for k, v in value.items() if not str(k).startswith("_")}
        if len(visible) == 1 and isinstance(next(iter(visible.values())), str):
            text = next(iter(visible.values()))
        else:
            text = input_key(visible)
    else:
        text = input_key(value)
    text = " ".join(str(text).split())
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _graded(entity: Entity) -> Any:
    return Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)


def _anchor(cycle: Cycle) -> Execution | None:
    """The run through which history is read: the one that opened the cycle, else the window's newest."""
    if cycle.anchor_id is not None:
        return cycle.anchor
    ids = [str(i) for i in (cycle.window or {}).get("runIds") or []]
    if not ids:
        return None
    return (
        Execution.objects.filter(pk__in=ids, entity_id=cycle.entity_id, loop_launched=False)
        .exclude(completed_at=None)
        .order_by("-completed_at", "-started_at")
        .first()
    )


def _scored(grade: Grade, judge: dict[str, Any]) -> bool:
    return comparable(grade.judge, judge) and bool(grade.metrics)


def _score(grade: Grade) -> dict[str, Any]:
    return {"passed": grade.passed, "vector": dict(grade.metrics or {}), "judge": dict(grade.judge or {})}


def _evidence_ids(scan: list[Grade], count: int) -> list[str]:
    """The runs the proposer is briefed on: the newest ``evidence.runs`` of the same scan (the brief's own rule)."""
    return [str(g.execution_id) for g in scan[: max(0, count)]]


def _history(
    cycle: Cycle, entity: Entity, terms: dict[str, Any], *, evidence_runs: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """The history slots and the evidence run ids, from one bounded scan newest first."""
    anchor = _anchor(cycle)
    if anchor is None:
        return [], []
    query = _graded(entity).select_related("execution")
    if anchor.completed_at is not None:
        query = query.filter(execution__completed_at__lte=anchor.completed_at)
    scan = list(query.order_by("-execution__completed_at", "-execution__started_at")[:SCAN_LIMIT])
    evidence = _evidence_ids(scan, evidence_runs)
    seen_inputs = {input_key(g.execution.input) for g in scan if str(g.execution_id) in set(evidence)}
    anchor_key = input_key(anchor.input)
    distinct: dict[str, Grade] = {}
    for grade in scan:
        key = input_key(grade.execution.input)
        if key not in distinct:
            distinct[key] = grade
    wanted = int(terms.get("inputs") or 0)
    keep_scores = terms.get("incumbent", "frozen") == "frozen"
    judge = dict(cycle.judge or {})
    ordered: list[tuple[str, Grade | None, bool]] = []
    anchor_grade = distinct.pop(anchor_key, None)
    ordered.append((anchor_key, anchor_grade, False))
    others = list(distinct.items())
    ordered += [(key, g, True) for key, g in others if key not in seen_inputs]
    ordered += [(key, g, False) for key, g in others if key in seen_inputs]
    slots = []
    for key, grade, held_out in ordered[:wanted]:
        is_anchor = key == anchor_key
        run_id = str(anchor.pk) if is_anchor else str(grade.execution_id) if grade else ""
        value = anchor.input if is_anchor else grade.execution.input if grade else None
        score = None
        if keep_scores and not is_anchor and grade is not None and _scored(grade, judge):
            score = _score(grade)
        slots.append(
            {
                "kind": "history",
                "runId": run_id,
                "caseId": None,
                "input": value,
                "label": label_of(value),
                "heldOut": held_out and not is_anchor,
                "anchor": is_anchor,
                "score": score,
            }
        )
    return slots, evidence


def _cases(entity: Entity) -> list[dict[str, Any]]:
    """The loop module's golden cases ``CASES`` at the entity's commit; FreezeRefused naming the file when malformed."""
    if not entity.loop_module_path or not entity.commit:
        return []
    from grading.methods import brain_checkout
    from singularity.brain.modules import BrainModuleError, load_at

    path = entity.loop_module_path
    try:
        module = load_at(brain_checkout(None), entity.commit, path).module
    except BrainModuleError as exc:
        raise FreezeRefused(
            f"{path}: the loop module will not load, so its golden cases cannot be read: {exc}"
        ) from exc
    cases = getattr(module, "CASES", None)
    if cases is None:
        return []
    if not isinstance(cases, list | tuple):
        raise FreezeRefused(f"{path}: CASES must be a list of {{id, input}}, not {type(cases).__name__}")
    seen: set[str] = set()
    out = []
    for index, case in enumerate(cases):
        if not isinstance(case, dict) or set(case) - {"id", "input"} or not isinstance(case.get("id"), str):
            raise FreezeRefused(f"{path}: CASES[{index}] must be {{id: text, input: …}}, not {case!r}"[:300])
        if not case["id"].strip():
            raise FreezeRefused(f"{path}: CASES[{index}].id is empty")
        if case["id"] in seen:
            raise FreezeRefused(f"{path}: CASES[{index}].id {case['id']!r} is used twice (ids are unique)")
        if "input" not in case or not isinstance(case["input"], dict):
            raise FreezeRefused(f"{path}: CASES[{index}] ({case['id']}): input must be a JSON object")
        seen.add(case["id"])
        out.append(case)
    return out


def base_commit(*, forge: Any = None) -> str:
    """The default branch's tip as the forge's remote holds it now; FreezeRefused when the remote has no such branch."""
    from evolution.forges import get_forge
    from singularity.brain.git import git

    forge = forge or get_forge()
    branch = forge.default_branch()
    out = git("ls-remote", "--heads", forge.remote_url(), f"refs/heads/{branch}").decode().split()
    if not out:
        raise FreezeRefused(
            f"the brain's remote has no default branch {branch!r} (git ls-remote found no refs/heads/{branch})"
        )
    return out[0]


def freeze(cycle: Cycle, *, now: datetime) -> dict[str, Any] | None:
    """Return the cycle's frozen set, or None under ``check.mode: none`` (no pre-merge check).

    FreezeRefused naming the file when the brain will not yield one. A remote
    that cannot be reached is not the brain's fault: the base falls back to the
    commit the engine last synced (logged), and the check still runs.
    """
    from singularity.brain.git import GitError

    entity = cycle.entity
    if check_mode(entity) != REPLAY:
        return None
    terms = check_terms(entity)
    loop = (entity.terms or {}).get("loop") or {}
    evidence = {**D.LOOP["evidence"], **(loop.get("evidence") or {})}
    slots, evidence_ids = _history(cycle, entity, terms, evidence_runs=int(evidence.get("runs") or 0))
    covered = {input_key(slot["input"]) for slot in slots}
    for case in _cases(entity):
        if input_key(case["input"]) in covered:
            continue
        covered.add(input_key(case["input"]))
        slots.append(
            {
                "kind": "case",
                "runId": None,
                "caseId": case["id"],
                "input": case["input"],
                "label": label_of(case["input"]),
                "heldOut": False,
                "anchor": False,
                "score": None,
            }
        )
    try:
        base = base_commit()
    except GitError as exc:
        log.warning(
            "loop: cycle %s: the remote's default branch could not be read (%s); base %s",
            cycle.pk,
            exc,
            entity.commit[:12],
        )
        base = entity.commit
    history = [s for s in slots if s["kind"] == "history"]
    return {
        "mode": REPLAY,
        "terms": {k: terms.get(k) for k in ("inputs", "trials", "deadlineHours", "incumbent")},
        "slots": slots,
        "evidenceRunIds": evidence_ids,
        "baseSha": base,
        "heldOut": {"k": sum(s["heldOut"] for s in history), "n": len(history)},
        "frozenAt": now.isoformat(),
    }


def held_out_text(frozen: dict[str, Any] | None) -> str:
    """ "held-out k of n" for the check's reason ("" with no frozen set)."""
    if not frozen:
        return ""
    held = frozen.get("heldOut") or {}
    return f"held-out {held.get('k', 0)} of {held.get('n', 0)}"
