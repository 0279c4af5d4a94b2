"""The verdict: one comparator reads the watch's window against the window the cycle opened on (seed 003).

"How a cycle is judged" and "Your own post-merge comparator". The nearest
comparator answers (``evolution.presets.resolve.comparator``): the entity's
``compare(before, after, terms)`` (or the project's ``LOOP_COMPARE``), else
its ``should_open`` (or ``LOOP_SHOULD_OPEN``) asked at each grade of the
window, else the preset's count (``evolution.presets.repair.count``). A
comparator of the brain's that throws, will not load or answers a shape the
engine cannot read raises ``ComparatorFault`` naming it; the machine settles
the cycle unvalidated on it, with no verdict record. At the deadline a
window that never got a verdict closes short (``closed_short``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from evolution.models import Cycle, as_json
from evolution.presets import evolve
from evolution.presets.base import (
    COMPARE,
    EVOLVE,
    SHOULD_OPEN,
    UNIT,
    VERDICTS,
    Answer,
    ComparatorFault,
    Observed,
    outcomes,
    record,
    trigger_terms,
)
from evolution.presets.readings import how
from evolution.presets.repair import count
from evolution.presets.resolve import ask_watch_window, comparator
from grading import observed as O
from grading.metrics import aggregate, specs
from grading.models import Grade
from grading.pin import comparable
from singularity.brain.deadline import BrainDeadline
from singularity.brain.sandbox import is_async

__all__ = ["ComparatorFault", "answer", "closed_short", "comparator"]


def ask_should_open(cycle: Cycle, seen: Observed, rule: Callable[..., Any]) -> Answer:
    """Ask the brain's should_open at each grade of the window not asked yet; open at any → regressed."""
    terms = cycle.entity.terms or {}
    trigger = trigger_terms(terms.get("loop") or {})
    trigger.update(windowRuns=seen.need, minFailures=seen.min_failures)
    asked = int((cycle.watch_window or {}).get("asked") or 0)
    runs = [str(g.execution_id) for g in seen.window]
    if is_async(rule):
        raise ComparatorFault("should_open must answer synchronously; it is declared async")
    for upto in range(asked + 1, seen.have + 1):
        window = outcomes(reversed(seen.window[:upto]), terms)  # newest first, as the trigger asks
        try:
            answer = rule(window=window, trigger=trigger)
        except BrainDeadline as exc:
            raise ComparatorFault(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - the brain's rule: any failure settles unvalidated, named
            raise ComparatorFault(f"should_open raised {type(exc).__name__}: {exc}") from exc
        if isinstance(answer, bool) or not isinstance(answer, dict) or not isinstance(answer.get("open"), bool):
            raise ComparatorFault(f"should_open must answer {{open, reason}}, not {answer!r}")
        if answer["open"]:
            tally = f"{upto} of {seen.need} {UNIT}"
            reason = f"should_open answered open at {tally} since the merge: {answer.get('reason') or 'no reason'}"
            answered = record("regressed", reason, tally, comparator=SHOULD_OPEN, n=upto)
            return Answer("regressed", answered, reason, runs[:upto], asked=upto)
    if not seen.full:
        return Answer(None, run_ids=runs, asked=seen.have)
    tally = f"{seen.have} of {seen.need} {UNIT}"
    reason = f"should_open never opened over {tally} since the merge"
    return Answer(
        "validated",
        record("validated", reason, tally, comparator=SHOULD_OPEN, n=seen.have),
        reason,
        runs,
        asked=seen.have,
    )


def _vector(
    grades: list[Grade],
    period: Any,
    terms: dict[str, Any] | None = None,
    *,
    people: Any = None,
    sources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Per-metric median (mean for ``aggregate: mean``) of the grades' observed vectors (``grading.observed``, from
    ``sources`` when two windows are compared), the window's own period metrics laid over it."""
    terms = terms or {}
    metric_specs = specs(terms)
    vectors = O.vectors([(g.execution_id, g.metrics) for g in grades], terms, people=people, sources=sources)
    ids = sorted({metric for vector in vectors.values() for metric in vector})
    vector = {
        metric: aggregate(
            (vectors[str(g.execution_id)].get(metric) for g in grades), how(metric_specs.get(metric) or {})
        )
        for metric in ids
    }
    if isinstance(period, dict):
        vector.update(period)
    elif isinstance(period, list):
        vector.update({item["id"]: item.get("value") for item in period if isinstance(item, dict) and "id" in item})
    return {metric: value for metric, value in vector.items() if value is not None}


def _before_grades(cycle: Cycle) -> list[Grade]:
    """The graded runs of the window the cycle opened on, under the judge it pinned, oldest first."""
    ids = [str(run) for run in (cycle.window or {}).get("runIds") or []]
    return [
        grade
        for grade in Grade.objects.filter(execution_id__in=ids, status=Grade.Status.GRADED)
        .select_related("entity", "execution")
        .order_by("execution__completed_at", "execution_id")
        if comparable(cycle.judge, grade.judge)
    ]


def _side(window: dict[str, Any], grades: list[Grade], terms: dict[str, Any], people: Any, chosen: Any) -> dict:
    return {
        "window": window,
        "vector": _vector(grades, window.get("metrics"), terms, people=people, sources=chosen),
        "outcomes": outcomes(grades, terms, people=people, sources=chosen),
    }


def sides(cycle: Cycle, seen: Observed, window: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The window the cycle opened on and the one the watch sampled, as compare reads them ({window, vector,
    outcomes}, oldest first), each human-rated metric read from ONE source for both (R4.15,
    ``grading.observed.sources``): neither side's number moves merely because of who rated which run."""
    terms = cycle.entity.terms or {}
    before, after = _before_grades(cycle), list(seen.window)
    people = O.ratings_of([g.execution_id for g in before + after], terms)
    chosen = O.sources(terms, [g.execution_id for g in before], [g.execution_id for g in after], people)
    return (
        _side(cycle.window or {}, before, terms, people, chosen),
        _side(window, after, terms, people, chosen),
    )


def before_side(cycle: Cycle) -> dict[str, Any]:
    """The window the cycle opened on, as compare reads it alone (each run's own reading)."""
    terms = cycle.entity.terms or {}
    return _side(cycle.window or {}, _before_grades(cycle), terms, None, None)


def compare_arguments(compare: Callable[..., Any], arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """What to call the brain's compare with: the seed's arguments it names (targetKind, targetId, spec, before,
    after, terms), all of them to a ``**kwargs``, or the whole record to a function of one other parameter (the
    seed's ``compare({ before, after })``)."""
    try:
        parameters = list(inspect.signature(compare).parameters.values())
    except (TypeError, ValueError):
        return [], arguments
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return [], arguments
    named = {p.name: arguments[p.name] for p in parameters if p.name in arguments and p.kind is not p.VAR_POSITIONAL}
    if not named and len([p for p in parameters if p.default is p.empty]) == 1:
        return [arguments], {}
    return [], named


def _checked(result: Any) -> dict[str, Any] | None:
    """Return compare's answer when it is null or a verdict record; ComparatorFault naming the shape otherwise."""
    owed = "null or a verdict record {verdict, perMetric, perInput, reason}"
    if result is None:
        return None
    if isinstance(result, bool):
        raise ComparatorFault(f"compare returned a bare boolean ({result}); it owes {owed}")
    if not isinstance(result, dict):
        raise ComparatorFault(f"compare returned {type(result).__name__}; it owes {owed}")
    if result.get("verdict") not in VERDICTS:
        raise ComparatorFault(
            f"compare returned verdict {result.get('verdict')!r}; it owes one of {', '.join(VERDICTS)}"
        )
    for key in ("perMetric", "perInput"):
        if not isinstance(result.get(key), list):
            raise ComparatorFault(f"compare's record has no {key} list; it owes {owed}")
    if result["verdict"] != "validated" and not result.get("reason"):
        raise ComparatorFault(f"compare answered {result['verdict']} with no reason; a negative verdict owes one")
    return result


def ask_compare(cycle: Cycle, seen: Observed, compare: Callable[..., Any], window: dict[str, Any]) -> Answer:
    """Ask the brain's compare(before, after, terms): None is "not yet", a verdict record settles verbatim."""
    runs = [str(g.execution_id) for g in seen.window]
    if is_async(compare):
        raise ComparatorFault("compare must answer synchronously; it is declared async")
    entity = cycle.entity
    before, after = sides(cycle, seen, ask_watch_window(cycle, window, now=timezone.now()))
    arguments = {
        "targetKind": entity.target_kind,
        "targetId": entity.slug,
        "spec": specs(entity.terms or {}),
        "before": before,
        "after": after,
        "terms": entity.terms,
    }
    args, kwargs = compare_arguments(compare, arguments)
    try:
        result = compare(*args, **kwargs)
    except BrainDeadline as exc:
        raise ComparatorFault(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the brain's comparator: any failure settles unvalidated, named
        raise ComparatorFault(f"compare raised {type(exc).__name__}: {exc}") from exc
    checked = _checked(result)
    if checked is None:
        return Answer(None, run_ids=runs)
    checked = as_json(checked)
    return Answer(
        checked["verdict"], checked, str(checked.get("reason") or f"compare answered {checked['verdict']}"), runs
    )


def answer(
    cycle: Cycle, seen: Observed, which: str, function: Callable[..., Any] | None, window: dict[str, Any]
) -> Answer:
    """The comparator's answer over the watch's window (``window``: the record compare is shown as its after side)."""
    if which == COMPARE:
        assert function is not None
        return ask_compare(cycle, seen, function, window)
    if which == SHOULD_OPEN:
        assert function is not None
        return ask_should_open(cycle, seen, function)
    if which == EVOLVE:
        if not seen.full:
            return evolve.compare(cycle, seen, window)
        return evolve.compare(cycle, seen, ask_watch_window(cycle, window, now=timezone.now()))
    return count(cycle, seen)


def closed_short(cycle: Cycle, seen: Observed, which: str, answered: Answer) -> tuple[str, dict[str, Any]]:
    """The reason and the record of a window the deadline closed without a verdict."""
    tally = seen.tally(bad=answered.bad)
    if which == COMPARE:
        reason = f"the watch closed short: compare gave no verdict by the deadline ({tally})"
    else:
        reason = f"the watch closed short: {tally}"
    return reason, record("unvalidated", reason, tally, comparator=which, n=seen.have, bad=answered.bad)
