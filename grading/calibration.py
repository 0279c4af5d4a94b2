"""Calibration: how far the judge agrees with people, per judged ``human: true`` metric (seed 003).

Over the entity's newest graded runs (never loop replays) that both the judge
and people scored — at most ``evaluation.human.agreement.maxPairs`` of them —
a pair agrees when the two numbers (both on 0..1) are within ``tolerance``.
Pairs count only under the entity's current judge: the model, method (and
its hash) and evaluator role of its newest grade. The loop module's hash is
not part of it, so editing ``<id>.loop.py`` keeps calibration; a new model or
method starts it over. Status is ``ok`` when at least ``minPairs`` pairs exist
and the agreeing share is at least ``threshold``, otherwise ``low``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from grading.models import Entity, Grade, Rating
from grading.people import people_values
from singularity.brain.defaults import EVALUATION

#: The judge facts calibration compares (DESIGN: model chain, method and evaluator role — not the loop module).
JUDGE_KEYS = ("model", "method", "method_hash", "role_hash")
#: Float slack so 0.8 - 0.55 still reads as within a tolerance of 0.25.
EPSILON = 1e-9


@dataclass(frozen=True)
class MetricCalibration:
    """One metric's calibration: ``agreement`` is the agreeing share (None with no pairs); ``reason`` says why."""

    metric_id: str
    status: str
    pairs: int
    agreement: float | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The shape ``ctx.calibration()`` hands a loop module: metricId, status, pairs, agreement."""
        return {"metricId": self.metric_id, "status": self.status, "pairs": self.pairs, "agreement": self.agreement}


def calibrated_metrics(entity: Entity) -> list[str]:
    """Return the ids of the entity's judged metrics that people rate too (``human: true``)."""
    metrics = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    return [
        metric_id
        for metric_id, spec in metrics.items()
        if spec and spec.get("kind") == "judged" and spec.get("human") is True
    ]


def agreement_terms(entity: Entity) -> dict[str, Any]:
    """Return the resolved ``evaluation.human.agreement`` block (engine values for any key missing)."""
    engine = EVALUATION["human"]["agreement"]
    human = (entity.terms.get("evaluation") or {}).get("human") or {}
    return {**engine, **(human.get("agreement") or {})}


def _own_grades(entity: Entity) -> QuerySet[Grade]:
    return Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)


def current_judge(entity: Entity) -> dict[str, Any] | None:
    """Return the judge facts of the entity's newest grade of its own runs, or None when it has none."""
    newest = _own_grades(entity).order_by("-graded_at", "-booked_at").values_list("judge", flat=True).first()
    if newest is None:
        return None
    return {key: (newest or {}).get(key) for key in JUDGE_KEYS}


def _under_judge(grades: QuerySet[Grade], judge: dict[str, Any]) -> QuerySet[Grade]:
    """Only grades whose judge facts equal ``judge``; a missing fact matches only another missing one.

    Missing, null and "" read the same, as in ``grading.pin.comparable``.
    """
    for key, value in judge.items():
        if not value:
            grades = grades.filter(
                Q(**{f"judge__{key}": None}) | Q(**{f"judge__{key}__isnull": True}) | Q(**{f"judge__{key}": ""})
            )
        else:
            grades = grades.filter(**{f"judge__{key}": value})
    return grades


def _status(metric_id: str, pairs: list[tuple[float, float]], terms: dict[str, Any]) -> MetricCalibration:
    min_pairs, tolerance, threshold = terms["minPairs"], terms["tolerance"], terms["threshold"]
    if not pairs:
        return MetricCalibration(metric_id, "low", 0, None, f"low: 0 of {min_pairs} pairs under the current judge")
    agreeing = sum(1 for judge, people in pairs if abs(judge - people) <= tolerance + EPSILON)
    share = agreeing / len(pairs)
    if len(pairs) < min_pairs:
        reason = f"low: {len(pairs)} of {min_pairs} pairs under the current judge"
        return MetricCalibration(metric_id, "low", len(pairs), share, reason)
    said = f"{agreeing} of {len(pairs)} pairs agree within {tolerance}"
    if share + EPSILON < threshold:
        return MetricCalibration(metric_id, "low", len(pairs), share, f"low: {said}, under the {threshold} needed")
    return MetricCalibration(metric_id, "ok", len(pairs), share, f"ok: {said}")


def calibration(entity: Entity) -> list[MetricCalibration]:
    """Return the calibration of each judged ``human: true`` metric of ``entity``; empty when there is none.

    Two queries per metric plus one, whatever the number of runs.
    """
    metric_ids = calibrated_metrics(entity)
    if not metric_ids:
        return []
    terms = agreement_terms(entity)
    judge = current_judge(entity)
    answers = []
    for metric_id in metric_ids:
        pairs: list[tuple[float, float]] = []
        if judge is not None:
            grades = list(
                _under_judge(_own_grades(entity), judge)
                .filter(metrics__has_key=metric_id)
                .filter(Exists(Rating.objects.filter(execution_id=OuterRef("execution_id"), metric_id=metric_id)))
                .order_by("-graded_at", "-booked_at")
                .values_list("execution_id", "metrics")[: int(terms["maxPairs"])]
            )
            people = people_values(execution_id for execution_id, _ in grades)
            for execution_id, metrics in grades:
                judged, rated = metrics.get(metric_id), people.get(str(execution_id), {}).get(metric_id)
                if isinstance(judged, int | float) and not isinstance(judged, bool) and rated is not None:
                    pairs.append((float(judged), rated))
        answers.append(_status(metric_id, pairs, terms))
    return answers
