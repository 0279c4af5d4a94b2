"""What the notify alert rules read from grading: an entity's rolling objective, its failing share, a day's spend.

Registered with ``singularity.notify.alerts`` by ``connect`` (``GradingConfig.ready``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from grading.metrics import run_value, to_number
from grading.models import Entity, Execution, Grade
from singularity.notify import alerts
from singularity.notify.models import AlertRule

#: Decimal places a rolling value is rounded to before it is compared and sent.
PLACES = Decimal("0.0001")


def _entity(rule: AlertRule) -> Entity | None:
    target_kind, _, slug = rule.entity.partition(":")
    return Entity.objects.filter(target_kind=target_kind, slug=slug).first()


def _recent(entity: Entity, runs: int) -> list[Grade]:
    return list(
        Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False).order_by(
            "-graded_at"
        )[:runs]
    )


def objective(rule: AlertRule, now: datetime) -> Decimal | None:
    """The mean of the metric over the entity's newest ``runs`` graded runs (None before any has a value)."""
    entity = _entity(rule)
    if entity is None:
        return None
    values = [v for g in _recent(entity, rule.runs) if (v := to_number(run_value(g, rule.metric))) is not None]
    if not values:
        return None
    return (sum(Decimal(str(v)) for v in values) / len(values)).quantize(PLACES)


def failing(rule: AlertRule, now: datetime) -> Decimal | None:
    """The share of the entity's newest ``runs`` graded runs that failed (0..1)."""
    entity = _entity(rule)
    grades = _recent(entity, rule.runs) if entity is not None else []
    if not grades:
        return None
    return (Decimal(sum(g.passed is False for g in grades)) / len(grades)).quantize(PLACES)


def spend(rule: AlertRule, now: datetime) -> Decimal:
    """USD spent in the last 24 hours on runs and their grading (one entity's when the rule names one)."""
    since = now - timedelta(days=1)
    runs = Execution.objects.filter(started_at__gt=since, started_at__lte=now)
    grades = Grade.objects.filter(graded_at__gt=since, graded_at__lte=now)
    if rule.entity:
        entity = _entity(rule)
        runs, grades = runs.filter(entity=entity), grades.filter(entity=entity)
    # Summed here, exactly: SQLite keeps money as text, so the database's SUM would read it as a float.
    return sum(runs.values_list("cost_usd", flat=True), Decimal(0)) + sum(
        grades.values_list("cost_usd", flat=True), Decimal(0)
    )


def connect() -> None:
    alerts.register(AlertRule.Kind.OBJECTIVE, objective)
    alerts.register(AlertRule.Kind.FAILING, failing)
    alerts.register(AlertRule.Kind.SPEND, spend)
