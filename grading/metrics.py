"""The metric vector of a grade, and how the loop reads it: people over the judge, bad runs, tolerance bands.

Every value lands on its own unit: judged and reported metrics normalized to
0..1 ((v − min) / (max − min) on their scale), ``cost_usd`` as an exact
decimal string, other computed metrics as numbers. Money is compared as
``Decimal``, never as a float.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from grading.models import Execution, Grade
from grading.people import people_value
from singularity.brain.defaults import CATALOG_METRICS, DEFAULT_HUMAN_SCALE, EVALUATION
from singularity.brain.terms import metric_band
from singularity.errors import ConfigError
from singularity.money import money_str

VERDICT_ROLES = ("objective", "guard")
Number = float | Decimal


class MetricError(ConfigError):
    """A metric value the grade cannot use; the message names the metric."""


# --- Reading specs ------------------------------------------------------------


def specs(terms: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the resolved metric specs (``terms["evaluation"]["metrics"]``) by id."""
    return dict((terms.get("evaluation") or {}).get("metrics") or {})


def spec_of(terms: Mapping[str, Any], metric_id: str) -> dict[str, Any]:
    """Return one metric's resolved spec; the catalog's own for an undeclared catalog id; MetricError otherwise."""
    spec = specs(terms).get(metric_id)
    if spec is not None:
        return spec
    if metric_id in CATALOG_METRICS:
        return {**CATALOG_METRICS[metric_id], "catalog": True}
    raise MetricError(f"metric {metric_id!r} is not declared")


def judged_ids(terms: Mapping[str, Any]) -> list[str]:
    """Return the declared judged metrics the judge must answer (quality, the catalog's, is its overall score)."""
    return [
        metric_id
        for metric_id, spec in specs(terms).items()
        if spec.get("kind") == "judged" and metric_id != "quality" and not spec.get("catalog")
    ]


def human_rated(spec: Mapping[str, Any]) -> bool:
    """Return True for a metric where a person's rating stands over the judge: reported, or judged with human: true."""
    return spec.get("kind") == "reported" or (spec.get("kind") == "judged" and spec.get("human") is True)


def judge_scale(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the scale the judge answers a metric on: its own, the engine's 1–5 when human-rated, else None (0..1)."""
    if spec.get("scale"):
        return dict(spec["scale"])
    if spec.get("human") is True:
        return dict(DEFAULT_HUMAN_SCALE)
    return None


# --- Values -----------------------------------------------------------------


def to_number(value: Any) -> Number | None:
    """Return a vector value as a number: Decimal for money strings and Decimals, float otherwise; None if absent."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str | Decimal):
        try:
            return Decimal(value)
        except InvalidOperation:
            return None
    if isinstance(value, int | float):
        return float(value)
    return None


def _decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(str(value))


def catalog_values(execution: Execution) -> dict[str, Any]:
    """Return the engine's computed catalog for an execution: cost_usd (decimal string), duration_ms, tool_failures."""
    values: dict[str, Any] = {"cost_usd": money_str(execution.cost_usd), "tool_failures": execution.tool_failures}
    if execution.duration_ms is not None:
        values["duration_ms"] = execution.duration_ms
    return values


def normalize(metric_id: str, spec: Mapping[str, Any], value: Any) -> float:
    """Return a judge's answer for a metric normalized to 0..1; MetricError naming the metric when off its scale.

    A metric with no scale is answered on 0..1 itself. An answer outside
    [min, max] or between the scale's steps is refused.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise MetricError(f"judge: metric {metric_id!r}: {value!r} is not a number")
    number = _decimal(value)
    if not number.is_finite():
        raise MetricError(f"judge: metric {metric_id!r}: {value!r} is not a finite number")
    scale = judge_scale(spec) or {"min": 0, "max": 1, "step": None}
    low, high = _decimal(scale["min"]), _decimal(scale["max"])
    if number < low or number > high:
        raise MetricError(f"judge: metric {metric_id!r}: {value} is off its scale {low}..{high}")
    step = scale.get("step")
    if step and (number - low) % _decimal(step) != 0:
        raise MetricError(f"judge: metric {metric_id!r}: {value} is between the steps of {low}..{high} step {step}")
    return float((number - low) / (high - low)) if high != low else 0.0


def score_weights(terms: Mapping[str, Any]) -> tuple[float, float]:
    """Return (tasks, run) weights normalized by their sum (engine default 0.6 / 0.4)."""
    weights = (terms.get("evaluation") or {}).get("scoreWeights") or {}
    tasks, run = float(weights.get("tasks", 0.6)), float(weights.get("run", 0.4))
    total = tasks + run
    if total <= 0:
        return 0.0, 1.0
    return tasks / total, run / total


def combine_quality(run_score: float, task_scores: Iterable[float], terms: Mapping[str, Any], *, kind: str) -> float:
    """Return quality: for a workflow with task scores, tasks' mean and the run score by scoreWeights; else the run score."""
    scores = list(task_scores)
    if kind != "workflow" or not scores:
        return float(run_score)
    tasks_weight, run_weight = score_weights(terms)
    return tasks_weight * statistics.fmean(scores) + run_weight * float(run_score)


def on_floor(spec: Mapping[str, Any], value: Any) -> bool:
    """Return True when ``value`` stands on the metric's floor (direction-aware); True when there is no floor."""
    floor, number = spec.get("floor"), to_number(value)
    if floor is None or number is None:
        return True
    floor_value, number = _decimal(floor), _decimal(number)
    return number >= floor_value if spec.get("direction", "max") == "max" else number <= floor_value


def missed_target(spec: Mapping[str, Any], value: Any) -> bool:
    """Return True when ``value`` misses the metric's target (direction-aware); False with no target or no value."""
    target, number = spec.get("target"), to_number(value)
    if target is None or number is None:
        return False
    target_value, number = _decimal(target), _decimal(number)
    return number < target_value if spec.get("direction", "max") == "max" else number > target_value


def floors_failed(terms: Mapping[str, Any], vector: Mapping[str, Any]) -> list[str]:
    """Return the objectives and guards measured in ``vector`` that stand below their floor (method none's passed)."""
    return [
        metric_id
        for metric_id, spec in specs(terms).items()
        if spec.get("role") in VERDICT_ROLES and metric_id in vector and not on_floor(spec, vector[metric_id])
    ]


# --- Reading a grade --------------------------------------------------------


def observed(spec: Mapping[str, Any], judged: Any, rated: float | None) -> Any:
    """The one reading of a run's value of a metric (R3.15, R4.10): every reader of a run's value comes here.

    ``judged`` is the grade's own value (the judge's or the code's), ``rated`` people's median on 0..1 (None when
    nobody rated the run). On a human-rated metric (reported, or judged with human: true) a person's rating stands
    over the judge's number; a reported metric is people's alone — unrated, it has no value (never a zero, never a
    number some other hand wrote). Any other metric is the grade's.
    """
    if human_rated(spec):
        if rated is not None:
            return rated
        if spec.get("kind") == "reported":
            return None
    return judged


def run_value(grade: Grade, metric_id: str, ratings: Mapping[str, float] | None = None) -> Any:
    """Return the observed value of one metric of a graded run (``observed``), or None when nobody measured it.

    ``ratings`` is people's medians for this run by metric id (as grading.people.people_values gives); None looks
    them up.
    """
    spec = specs(grade.entity.terms).get(metric_id) or {}
    rated = None
    if human_rated(spec):
        rated = people_value(grade.execution, metric_id) if ratings is None else ratings.get(metric_id)
    return observed(spec, (grade.metrics or {}).get(metric_id), rated)


def missed_targets(
    grade: Grade,
    terms: Mapping[str, Any],
    ratings: Mapping[str, float] | None = None,
    *,
    vector: Mapping[str, Any] | None = None,
) -> list[str]:
    """Return the declared targets the run missed, read through people's ratings; observe metrics never count.

    ``vector`` is the run's observed vector when the caller has read it (``grading.observed``): its values are
    the ones read, so a window read from one source per metric judges its targets from that source too.
    """
    return [
        metric_id
        for metric_id, spec in specs(terms).items()
        if spec.get("role") in VERDICT_ROLES
        and spec.get("target") is not None
        and missed_target(spec, vector.get(metric_id) if vector is not None else run_value(grade, metric_id, ratings))
    ]


#: What ``is_bad`` reads of a grade (with the entity's terms and people's ratings): the loop's windows, the trigger
#: and the fleet read these columns alone (``plan_terms``: the threshold the run's plan froze, R5.19).
OUTCOME_FIELDS = (
    "entity_id", "status", "graded_at", "score", "passed", "failure_category", "metrics", "judge", "plan_terms",
)  # fmt: skip


def threshold_of(grade: Grade, terms: Mapping[str, Any], *, live: bool = False) -> Any:
    """The ``loop.threshold`` a graded run is judged by: the one its plan froze when the run started (a workflow
    scenario's, ``Grade.plan_terms``; R5.19), else the entity's current one — a pipeline, a heartbeat, a role, a
    run recorded before plans were kept, or ``live`` (a backtest asks what a policy's threshold would have done)."""
    frozen = None if live else grade.plan_terms
    if isinstance(frozen, Mapping) and "threshold" in frozen:
        return frozen["threshold"]
    return (terms.get("loop") or {}).get("threshold")


def is_bad(
    grade: Grade,
    terms: Mapping[str, Any],
    ratings: Mapping[str, float] | None = None,
    *,
    vector: Mapping[str, Any] | None = None,
    live: bool = False,
) -> bool:
    """Return True when a graded run is bad for the repair trigger and watch.

    Bad: it failed its evaluation, or the judge's score is below
    ``loop.threshold`` (with no threshold declared every judged run is bad;
    no score counts as failing), or a declared target was missed. Under
    ``method: none`` the threshold reads nothing: failed or a missed target.
    The threshold is the one the run's plan froze (``threshold_of``; ``live``
    reads the terms' own). A grade that was never graded is not in the window
    and is never bad.
    """
    if grade.status != Grade.Status.GRADED:
        return False
    if grade.passed is False:
        return True
    judged = (grade.judge or {}).get("method") != "none" and (terms.get("evaluation") or {}).get("method") != "none"
    if judged:
        threshold = threshold_of(grade, terms, live=live)
        if threshold is None or grade.score is None or grade.score < float(threshold):
            return True
    return bool(missed_targets(grade, terms, ratings, vector=vector))


# --- Bands and aggregates ---------------------------------------------------


def tolerance_band(metric: str | Mapping[str, Any], terms: Mapping[str, Any], baseline: Any) -> Decimal:
    """Return how far a metric may move from ``baseline`` before it counts as moved (exact, on its own unit).

    A metric naming ``tolerance`` (absolute) or ``tolerancePct`` (relative to
    the baseline) owns both axes: an axis it leaves out adds nothing; both
    named, the more forgiving band wins. Otherwise the engine's
    ``metricTolerance``: ``judged`` absolute for judged and reported metrics,
    ``computedPct`` relative for computed ones.
    """
    spec = spec_of(terms, metric) if isinstance(metric, str) else metric
    evaluation = {**EVALUATION, **(terms.get("evaluation") or {})}
    absolute, relative = metric_band(dict(spec), evaluation)
    base = to_number(baseline)
    bands = []
    if absolute is not None:
        bands.append(_decimal(absolute))
    if relative is not None and base is not None:
        bands.append(_decimal(relative) * abs(_decimal(base)))
    return max(bands) if bands else Decimal(0)


def movement(spec: Mapping[str, Any], baseline: Any, value: Any) -> Decimal | None:
    """Return how much ``value`` improved on ``baseline`` in the metric's own direction (negative: worse)."""
    base, number = to_number(baseline), to_number(value)
    if base is None or number is None:
        return None
    moved = _decimal(number) - _decimal(base)
    return moved if spec.get("direction", "max") == "max" else -moved


def past_tolerance(metric: str | Mapping[str, Any], terms: Mapping[str, Any], baseline: Any, value: Any) -> bool:
    """Return True when ``value`` is worse than ``baseline`` by more than the metric's tolerance band."""
    spec = spec_of(terms, metric) if isinstance(metric, str) else metric
    moved = movement(spec, baseline, value)
    return moved is not None and -moved > tolerance_band(spec, terms, baseline)


def aggregate(values: Iterable[Any], how: str = "median") -> Number | None:
    """Return the median (default) or mean of the measured values, skipping absent ones; None when none was measured.

    Money strings and Decimals aggregate exactly as Decimal; other numbers as float.
    """
    numbers = [number for number in (to_number(value) for value in values) if number is not None]
    if not numbers:
        return None
    if how not in ("median", "mean"):
        raise MetricError(f"aggregate must be median or mean, not {how!r}")
    if any(isinstance(number, Decimal) for number in numbers):
        exact = [_decimal(number) for number in numbers]
        return statistics.median(exact) if how == "median" else sum(exact, Decimal(0)) / len(exact)
    floats = [float(number) for number in numbers]
    return statistics.median(floats) if how == "median" else statistics.fmean(floats)
