"""Grading one booked run: claim it, measure it, judge it (or not, under ``method: none``), record the result.

The database decides who grades: a worker claims the booking with a
conditional ``UPDATE … WHERE status = 'booked'``, so two workers never grade
one run, and writes the result only if its claim still stands (a booking
failed as lost meanwhile keeps that verdict). Any failure settles the grade
``failed`` with the reason — never a score of zero.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import F
from django.utils import timezone

from grading import judge as judging
from grading.judge import JudgeError
from grading.loop_modules import measure
from grading.methods import method_name, resolve_method
from grading.metrics import (
    MetricError,
    catalog_values,
    combine_quality,
    floors_failed,
    judged_ids,
    normalize,
    specs,
)
from grading.models import Entity, Execution, Grade
from grading.pin import changed, snapshot
from singularity.errors import SingularityError
from singularity.gateway import Gateway

log = logging.getLogger(__name__)

#: Asked before grading: a check returning a frozen judge snapshot makes the grade refuse a different judge.
FrozenJudge = Callable[[Grade], "dict[str, Any] | None"]
_frozen_sources: list[FrozenJudge] = []


def register_frozen_judge(source: FrozenJudge) -> FrozenJudge:
    """Register where a cycle's frozen judge is found (the loop uses it); return the source.

    A grade with a frozen snapshot dispatches under its model and fails with
    "judge: <what> changed since the freeze" when the method, the loop module
    or the evaluator role moved.
    """
    if source not in _frozen_sources:
        _frozen_sources.append(source)
    return source


def unregister_frozen_judge(source: FrozenJudge) -> None:
    if source in _frozen_sources:
        _frozen_sources.remove(source)


class GradingFailed(SingularityError):
    """The grading settles failed with ``str(self)``; what was spent and who judged are kept."""

    def __init__(self, message: str, *, judge: dict[str, Any] | None = None, cost: Decimal = Decimal(0)) -> None:
        super().__init__(message)
        self.judge = judge or {}
        self.cost = cost


@dataclass
class Outcome:
    metrics: dict[str, Any]
    judge: dict[str, str]
    passed: bool
    score: float | None = None
    failure_category: str = ""
    criteria: list[dict[str, Any]] = field(default_factory=list)
    feedback: str = ""
    cost: Decimal = Decimal(0)


def _frozen(grade: Grade) -> dict[str, Any] | None:
    for source in list(_frozen_sources):
        frozen = source(grade)
        if frozen:
            return dict(frozen)
    return None


def _refuse_moved(frozen: dict[str, Any] | None, current: dict[str, str]) -> None:
    if frozen is None:
        return
    moved = [word for word in changed(frozen, current) if word != "model"]
    if moved:
        raise GradingFailed(f"judge: {' and '.join(moved)} changed since the freeze", judge=current)


def _without_judge(entity: Entity, execution: Execution, vector: dict[str, Any], loop_hash: str) -> Outcome:
    """Method none: the grade is the measurements; passed when every measured objective and guard is on its floor."""
    metrics = specs(entity.terms)
    below = floors_failed(entity.terms, vector)
    criteria = [
        {
            "criterion": f"{metric_id} on its floor ({'≥' if spec.get('direction', 'max') == 'max' else '≤'} {spec['floor']})",
            "scope": "run",
            "passed": metric_id not in below,
            "score": None,
            "reasoning": f"measured {vector[metric_id]}",
            "evidence": "",
        }
        for metric_id, spec in metrics.items()
        if spec.get("role") in ("objective", "guard") and spec.get("floor") is not None and metric_id in vector
    ]
    return Outcome(
        metrics=vector,
        judge=snapshot(entity, None, loop_hash, ""),
        passed=not below,
        failure_category=("below floor: " + ", ".join(below)) if below else "",
        criteria=criteria,
    )


def _with_judge(
    entity: Entity,
    execution: Execution,
    vector: dict[str, Any],
    loop_hash: str,
    *,
    frozen: dict[str, Any] | None,
    checkout: Any | None,
    gateway: Gateway | None,
) -> Outcome:
    """Ask the judge and fold its answer into the vector: quality, per-criterion verdicts, declared judged metrics."""
    method = resolve_method(entity, checkout=checkout)
    role = judging.resolve_role(entity, checkout=checkout)
    model = (frozen or {}).get("model") or judging.model_for(entity)
    pin = snapshot(entity, method, loop_hash, role.sha256, model=model)
    _refuse_moved(frozen, pin)
    try:
        call = judging.call_judge(entity, execution, method, role, model=model, gateway=gateway)
    except SingularityError as exc:
        raise GradingFailed(str(exc), judge=pin) from exc
    try:
        answer = judging.parse_answer(call.content)
        task_scores = _task_scores(entity, answer.tasks)
        quality = combine_quality(answer.overall_score, task_scores, entity.terms, kind=entity.kind)
        declared = specs(entity.terms)
        for metric_id in judged_ids(entity.terms):
            if metric_id not in answer.metrics:
                raise JudgeError(f"judge: no value for the declared metric {metric_id!r}")
            vector[metric_id] = normalize(metric_id, declared[metric_id], answer.metrics[metric_id])
    except (JudgeError, MetricError) as exc:
        raise GradingFailed(str(exc), judge=pin, cost=call.cost_usd) from exc
    vector["quality"] = quality
    return Outcome(
        metrics=vector,
        judge=pin,
        passed=answer.passed,
        score=quality,
        failure_category="" if answer.passed else (answer.failure_category or "unspecified"),
        criteria=answer.criteria,
        feedback=answer.feedback,
        cost=call.cost_usd,
    )


def _task_scores(entity: Entity, tasks: list[dict[str, Any]]) -> list[float]:
    """Return the judge's score of every task a workflow declares; JudgeError naming a task it did not score."""
    declared = [str(task.get("id")) for task in (entity.frontmatter or {}).get("tasks") or [] if isinstance(task, dict)]
    if entity.kind != Entity.Kind.WORKFLOW or not declared:
        return []
    scored = {task["id"]: float(task["score"]) for task in tasks}
    missing = [task_id for task_id in declared if task_id not in scored]
    if missing:
        raise JudgeError(f"judge: no score for task {', '.join(missing)}")
    return [scored[task_id] for task_id in declared]


def evaluate(
    entity: Entity,
    execution: Execution,
    *,
    frozen: dict[str, Any] | None = None,
    checkout: Any | None = None,
    gateway: Gateway | None = None,
) -> Outcome:
    """Return the outcome of grading ``execution``; GradingFailed (or a SingularityError) when it cannot be graded."""
    measured = measure(entity, execution, checkout=checkout)
    vector: dict[str, Any] = {**catalog_values(execution), **measured.values}
    if method_name(entity) == "none":
        outcome = _without_judge(entity, execution, vector, measured.loop_hash)
        _refuse_moved(frozen, outcome.judge)
        return outcome
    return _with_judge(entity, execution, vector, measured.loop_hash, frozen=frozen, checkout=checkout, gateway=gateway)


#: A failed grade carries no verdict: whatever an earlier attempt measured is cleared.
_NO_VERDICT: dict[str, Any] = {
    "status": Grade.Status.FAILED,
    "score": None,
    "passed": None,
    "failure_category": "",
    "criteria": [],
    "feedback": "",
    "metrics": {},
}


def _claim(grade: Grade) -> bool:
    """Move the booking to ``grading`` if it is still booked; return whether this caller got it."""
    claimed = Grade.objects.filter(pk=grade.pk, status=Grade.Status.BOOKED).update(
        status=Grade.Status.GRADING, started_at=timezone.now(), attempts=F("attempts") + 1
    )
    return claimed == 1


def _settle(grade: Grade, attempt: int, **fields: Any) -> bool:
    """Write the result if this attempt's claim still stands; return whether it was written."""
    written = Grade.objects.filter(pk=grade.pk, status=Grade.Status.GRADING, attempts=attempt).update(
        graded_at=timezone.now(), **fields
    )
    if not written:
        log.warning("grading of %s finished after its claim was lost; result dropped", grade.execution_id)
    return written == 1


def _grade(grade: Grade, *, checkout: Any | None = None, gateway: Gateway | None = None) -> bool:
    """Grade one booking if this caller claims it; return whether it did."""
    if not _claim(grade):
        return False
    grade.refresh_from_db()
    attempt = grade.attempts
    entity = Entity.objects.get(pk=grade.entity_id)
    execution = Execution.objects.select_related("entity").get(pk=grade.execution_id)
    try:
        outcome = evaluate(entity, execution, frozen=_frozen(grade), checkout=checkout, gateway=gateway)
    except GradingFailed as failure:
        _settle(grade, attempt, **_NO_VERDICT, error=str(failure), judge=failure.judge, cost_usd=failure.cost)
        return True
    except SingularityError as exc:
        _settle(grade, attempt, **_NO_VERDICT, error=str(exc), judge={}, cost_usd=Decimal(0))
        return True
    except Exception as exc:
        # A bug, not a verdict: record it on the row (so it is not read as lost) and let the task fail loudly.
        _settle(grade, attempt, **_NO_VERDICT, error=f"grading error: {type(exc).__name__}: {exc}", judge={})
        raise
    _settle(
        grade,
        attempt,
        status=Grade.Status.GRADED,
        error="",
        score=outcome.score,
        passed=outcome.passed,
        failure_category=outcome.failure_category,
        criteria=outcome.criteria,
        feedback=outcome.feedback,
        metrics=outcome.metrics,
        judge=outcome.judge,
        cost_usd=outcome.cost,
    )
    return True


def grade_now(grade: Grade, *, checkout: Any | None = None, gateway: Gateway | None = None) -> Grade:
    """Grade a booked run now and return its grade as stored (graded or failed).

    When another worker holds it, or it is no longer booked, nothing is done
    and the stored grade is returned. ``checkout`` and ``gateway`` default to
    the engine's brain checkout and the configured gateway.
    """
    _grade(grade, checkout=checkout, gateway=gateway)
    grade.refresh_from_db()
    return grade


def grade_by_id(grade_id: Any) -> bool:
    """Grade the booking ``grade_id`` if it is booked and due; return whether this worker graded it."""
    grade = Grade.objects.filter(pk=grade_id, status=Grade.Status.BOOKED, due_at__lte=timezone.now()).first()
    if grade is None:
        return False
    return _grade(grade)
