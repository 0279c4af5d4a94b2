"""An evolve entity, its graded runs and a shipped cycle for the evolve trigger and watch tests.

``shop`` is a workflow graded without a judge (``method: none``): ``revenue`` is its objective (computed, the
engine's 10% band) and ``conversion`` a guard with a floor. Grades are written as the grading settles them, at
the instant a test names; a shipped cycle's watch is opened by the real machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine

from evolution.loop import machine
from evolution.models import Cycle, Round
from grading.models import Entity, Grade
from tests.grading.grading_helpers import make_entity, make_run

JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

METRICS: dict[str, Any] = {
    "revenue": {"kind": "computed", "direction": "max", "role": "objective"},
    "conversion": {"kind": "computed", "direction": "max", "role": "guard", "floor": 0.25},
}


def shop(
    slug: str = "shop",
    *,
    metrics: dict[str, Any] | None = None,
    trigger: dict[str, Any] | None = None,
    watch: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    **fields: Any,
) -> Entity:
    loop = {"enabled": True, "preset": "evolve", "trigger": trigger or {"windowRuns": 10}, **(loop or {})}
    if watch is not None:
        loop["watch"] = watch
    return make_entity(
        slug,
        evaluation={"method": "none", "metrics": metrics or METRICS, **(evaluation or {})},
        loop=loop,
        **fields,
    )


def graded_at(entity: Entity, at: datetime, metrics: dict[str, Any], *, judge: dict[str, Any] | None = None) -> Grade:
    """A run of ``entity`` that ended a second before ``at`` and was graded at ``at`` with ``metrics``."""
    run = make_run(entity, completed_at=at - timedelta(seconds=1), duration_ms=500)
    return Grade.objects.create(
        execution=run,
        entity=entity,
        status=Grade.Status.GRADED,
        reason="sampled",
        day=at.date(),
        booked_at=at - timedelta(seconds=1),
        due_at=at - timedelta(seconds=1),
        graded_at=at,
        passed=True,
        metrics=metrics,
        judge=JUDGE if judge is None else judge,
    )


def window_of(
    entity: Entity, values: list[dict[str, Any]], *, start: datetime, every: timedelta = MINUTE
) -> list[Grade]:
    """One graded run per vector in ``values``, ``every`` apart from ``start``."""
    return [graded_at(entity, start + i * every, v) for i, v in enumerate(values)]


def runs(revenue: list[float], conversion: float | list[float] | None = 0.4) -> list[dict[str, Any]]:
    """Vectors of revenue values with a conversion (one for all, one per run, or None for unmeasured)."""
    out = []
    for i, r in enumerate(revenue):
        vector: dict[str, Any] = {"revenue": r}
        c = conversion[i] if isinstance(conversion, list) else conversion
        if c is not None:
            vector["conversion"] = c
        out.append(vector)
    return out


def shipped_on(entity: Entity, before: list[Grade], *, merged_at: datetime, metrics: Any = None) -> Cycle:
    """A cycle that opened on ``before`` and merged at ``merged_at``, its watch opened by the machine."""
    window = {
        "from": None,
        "to": (merged_at - 10 * MINUTE).isoformat(),
        "runIds": [str(g.execution_id) for g in before],
        "ready": True,
        "metrics": metrics or [],
    }
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{merged_at.isoformat()}:{Cycle.objects.count()}",
        claim=entity.pk,
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.MERGE_WAIT,
        analysed=True,
        judge=JUDGE,
        terms=entity.terms,
        window=window,
        started_at=merged_at - 10 * MINUTE,
        moved_at=merged_at - 10 * MINUTE,
    )
    Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED, pr_number=7, merge_sha="a" * 40)
    Cycle.objects.filter(pk=cycle.pk).update(merged_at=merged_at)
    with time_machine.travel(merged_at, tick=False):
        machine.open_watch(cycle, merged_at)
    cycle.refresh_from_db()
    return cycle


def settle_with(cycle: Cycle, values: list[dict[str, Any]], *, start: datetime) -> Cycle:
    """Land one graded run per vector after the merge and read the watch once at the end."""
    grades = window_of(cycle.entity, values, start=start)
    at = grades[-1].graded_at + MINUTE
    with time_machine.travel(at, tick=False):
        machine.evaluate(cycle, at)
    cycle.refresh_from_db()
    return cycle
