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
  scan walks the entity's runs newest started first, a chunk at a time, and
  stops once it holds enough held-out inputs — at most ``SCAN_LIMIT`` runs
  (deeper than any window, bounded so the freeze costs the same whatever the
  history holds). The evidence runs are the scan's newest ``evidence.runs``.
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
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast

from evolution.models import Cycle
from grading.models import Entity, Execution, Grade
from grading.pin import comparable
from singularity.brain import defaults as D
from singularity.errors import ConfigError

log = logging.getLogger(__name__)

REPLAY, NONE = "replay", "none"
#: The most graded runs one freeze reads, newest first, and how many a query reads at a time.
SCAN_LIMIT = 2000
SCAN_CHUNK = 200
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


@dataclass(frozen=True)
class _Seen:
    """One graded run of the scan: its id and input, read as plain values."""

    run_id: str
    input: Any


def _scan(entity: Entity, anchor: Execution) -> Any:
    """The entity's own graded runs through the anchor, newest first: the (entity, started) index walked backwards.

    Each row is (id, the input's JSON text, started_at): a run whose input text was seen before is told apart by that
    text alone, so an entity whose inputs repeat costs one decode an input, not one a run.
    """
    query = Execution.objects.filter(
        entity=entity, loop_launched=False, grade__status=Grade.Status.GRADED, started_at__lte=anchor.started_at
    )
    return (
        query.annotate(text=Cast("input", TextField())).order_by("-started_at").values_list("id", "text", "started_at")
    )


#: The newest run of each input text among the runs a sliced scan names, newest first (``{scan}``: its SQL).
FIRST_OF_EACH_INPUT = """
SELECT id, text, started_at FROM (
    SELECT id, text, started_at, ROW_NUMBER() OVER (PARTITION BY text ORDER BY started_at DESC) AS nth
    FROM ({scan}) AS scan
) AS firsts WHERE nth = 1 ORDER BY started_at DESC
"""


def _first_of_each_input(query: Any, *, through: Any, limit: int) -> list[tuple[Any, str]]:
    """The rest of the scan in one statement: (id, input text) of the newest run of each input text among the next
    ``limit`` runs that started at ``through`` or before, newest first. The database reads those runs (past an
    entity's first ``limit`` runs, the same walk of the (entity, started) index a chunk is); only each input's first
    run comes back, so a history of repeated inputs costs one statement and a handful of rows however deep."""
    from django.db import connection

    sql, params = query.filter(started_at__lte=through)[:limit].query.sql_with_params()
    as_id = Execution._meta.pk.to_python
    with connection.cursor() as cursor:
        cursor.execute(FIRST_OF_EACH_INPUT.format(scan=sql), params)
        return [(as_id(pk), text) for pk, text, _started in cursor.fetchall()]


def _graded(run_ids: list[str]) -> dict[str, tuple[bool | None, dict[str, Any], dict[str, Any]]]:
    """The grades of the runs a frozen set keeps: {run id: (passed, metrics, judge)}, one statement."""
    if not run_ids:
        return {}
    rows = Grade.objects.filter(execution_id__in=run_ids).values_list("execution_id", "passed", "metrics", "judge")
    return {str(pk): (passed, metrics or {}, judge or {}) for pk, passed, metrics, judge in rows}


def _input_of(anchor: Execution, fetched: list[tuple[Any, Any, Any]]) -> Any:
    """The anchor's input: the trigger hands over its landed run with the input left unread, and the scan's newest
    chunk has read it (the anchor is its newest graded run) — decoded from there rather than read again."""
    if "input" in anchor.get_deferred_fields():
        text = next((text for pk, text, _started in fetched if pk == anchor.pk), None)
        if text is not None:
            return json.loads(text) if isinstance(text, str) else text
    return anchor.input


def _history(
    cycle: Cycle, entity: Entity, terms: dict[str, Any], *, evidence_runs: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """The history slots and the evidence run ids, from one bounded scan newest first.

    The scan reads each run's id and input only, in at most two statements whatever the history holds: the newest
    chunk, then (when it does not hold enough held-out inputs) each input's newest run over the rest of the bound.
    The grades of the runs kept as slots are read after it.
    """
    anchor = _anchor(cycle)
    if anchor is None:
        return [], []
    query = _scan(entity, anchor)
    wanted = int(terms.get("inputs") or 0)
    distinct: dict[str, _Seen] = {}
    keys: dict[str, str] = {}  # an input's JSON text → its key (a repeated input is decoded once)

    def see(pk: Any, text: Any) -> str:
        key = keys.get(text)
        if key is None:
            value = json.loads(text) if isinstance(text, str) else text
            key = keys[text] = input_key(value)
            if key not in distinct:
                distinct[key] = _Seen(str(pk), value)
        return key

    # The newest chunk: the evidence runs and, for an entity whose inputs vary, every input the slots need.
    fetched = list(query[:SCAN_CHUNK])
    shown = max(0, evidence_runs)
    evidence = [str(pk) for pk, _text, _started in fetched[:shown]]
    seen_inputs = {see(pk, text) for pk, text, _started in fetched[:shown]}
    for pk, text, _started in fetched[shown:]:
        see(pk, text)
    anchor_input = _input_of(anchor, fetched)
    anchor_key = input_key(anchor_input)
    held_out = sum(1 for key in distinct if key not in seen_inputs and key != anchor_key)
    if len(fetched) == SCAN_CHUNK < SCAN_LIMIT and not (len(evidence) < len(fetched) and held_out >= wanted):
        # Not enough inputs the proposer never saw: the rest of the bound in one statement, each input text's
        # newest run only. It starts at the chunk's last instant (an index walk, no offset); the runs of that
        # instant the chunk read come back again and are skipped, none lost and none twice.
        last = fetched[-1][2]
        done = {pk for pk, _text, started in fetched if started == last}
        for pk, text in _first_of_each_input(query, through=last, limit=SCAN_LIMIT - len(fetched) + len(done)):
            if pk not in done:
                see(pk, text)
    keep_scores = terms.get("incumbent", "frozen") == "frozen"
    judge = dict(cycle.judge or {})
    distinct.pop(anchor_key, None)
    ordered: list[tuple[str, _Seen | None, bool]] = [(anchor_key, None, False)]
    others = list(distinct.items())
    ordered += [(key, seen, True) for key, seen in others if key not in seen_inputs]
    ordered += [(key, seen, False) for key, seen in others if key in seen_inputs]
    chosen = ordered[:wanted]
    grades = _graded([seen.run_id for _key, seen, _held in chosen if seen is not None]) if keep_scores else {}
    slots = []
    for _key, seen, held_out in chosen:
        is_anchor = seen is None
        value = anchor_input if is_anchor else seen.input
        score = None
        if seen is not None and seen.run_id in grades:
            passed, metrics, graded_by = grades[seen.run_id]
            if comparable(graded_by, judge) and metrics:
                score = {"passed": passed, "vector": dict(metrics), "judge": dict(graded_by)}
        slots.append(
            {
                "kind": "history",
                "runId": str(anchor.pk) if is_anchor else seen.run_id,
                "caseId": None,
                "input": value,
                "label": label_of(value),
                "heldOut": held_out,
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


#: Within ``one_base_per_batch``: what the remote's default branch read came to, {(remote, branch): sha or error}.
_bases: ContextVar[dict[tuple[str, str], Any] | None] = ContextVar("loop_freeze_bases", default=None)


@contextmanager
def one_base_per_batch() -> Iterator[None]:
    """Within it the remote's default branch is read once: the cycles a batch of landings opens (one instant,
    ``on_landed``'s ``now``) freeze one base, and an unreachable remote is asked once, not once an opening."""
    if _bases.get() is not None:
        yield
        return
    token = _bases.set({})
    try:
        yield
    finally:
        _bases.reset(token)


def base_commit(*, forge: Any = None) -> str:
    """The default branch's tip as the forge's remote holds it now; FreezeRefused when the remote has no such branch.

    Read once per ``one_base_per_batch`` (a GitError too: the batch's later openings fall back at once)."""
    from evolution.forges import get_forge
    from singularity.brain.git import GitError, git

    forge = forge or get_forge()
    branch = forge.default_branch()
    url = forge.remote_url()
    memo = _bases.get()
    if memo is not None and (url, branch) in memo:
        known = memo[(url, branch)]
        if isinstance(known, Exception):
            raise known
        return known
    try:
        out = git("ls-remote", "--heads", url, f"refs/heads/{branch}").decode().split()
    except GitError as exc:
        if memo is not None:
            memo[(url, branch)] = exc
        raise
    if not out:
        raise FreezeRefused(
            f"the brain's remote has no default branch {branch!r} (git ls-remote found no refs/heads/{branch})"
        )
    if memo is not None:
        memo[(url, branch)] = out[0]
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
