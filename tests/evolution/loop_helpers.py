"""Graded runs and cycles for the loop's core tests, made with the ORM (entities from grading's helpers)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from evolution.models import Cycle, Round
from grading.models import Entity, Execution, Grade
from tests.grading.grading_helpers import make_entity, make_run

JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}


def looped(slug: str = "triage", *, loop: dict[str, Any] | None = None, **kwargs: Any) -> Entity:
    """A workflow entity in the loop (repair), graded without a judge by a pass/fail floor."""
    return make_entity(
        slug,
        evaluation=kwargs.pop("evaluation", {"method": "none"}),
        loop={"enabled": True, **(loop or {})},
        **kwargs,
    )


def graded(
    entity: Entity,
    *,
    bad: bool,
    at: datetime | None = None,
    loop_launched: bool = False,
    status: str = Grade.Status.GRADED,
    judge: dict[str, Any] | None = None,
) -> Grade:
    """A run of ``entity`` graded at ``at`` (now): bad means it failed its evaluation."""
    at = at or timezone.now()
    run = make_run(entity, completed_at=at - timedelta(seconds=1), loop_launched=loop_launched)
    return Grade.objects.create(
        execution=run,
        entity=entity,
        status=status,
        reason="sampled",
        day=at.date(),
        booked_at=at - timedelta(seconds=1),
        due_at=at - timedelta(seconds=1),
        graded_at=at if status == Grade.Status.GRADED else None,
        passed=None if status != Grade.Status.GRADED else not bad,
        score=None,
        judge=JUDGE if judge is None else judge,
    )


def history(entity: Entity, pattern: str, *, start: datetime | None = None) -> list[Grade]:
    """Grades in order from a pattern like "bgbb" (b bad, g good), one minute apart, oldest first."""
    start = start or timezone.now() - timedelta(minutes=len(pattern) + 1)
    return [graded(entity, bad=c == "b", at=start + timedelta(minutes=i)) for i, c in enumerate(pattern)]


def cycles_of(entity: Entity) -> list[Cycle]:
    return list(Cycle.objects.filter(entity=entity).order_by("started_at", "id"))


def settled_cycle(entity: Entity, status: str, *, at: datetime, analysed: bool = True) -> Cycle:
    """A cycle of ``entity`` that settled at ``at``."""
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{at.isoformat()}:{status}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.SETTLED,
        status=status,
        analysed=analysed,
        started_at=at - timedelta(minutes=5),
        completed_at=at,
        moved_at=at,
    )


def proposed_round(cycle: Cycle, **fields: Any) -> Round:
    """Round 1 of ``cycle`` holding a proposal."""
    defaults = {
        "summary": "Add 'invoice' to the billing rule",
        "hypothesis": "Invoices are billing questions.",
        "files": [{"path": "features/triage/triage.scenario.md", "content": "new\n"}],
        "author": "pipeline:fixer",
        "status": Round.Status.ANALYSING,
    }
    defaults.update(fields)
    return Round.objects.create(cycle=cycle, number=defaults.pop("number", 1), **defaults)


def first_run(cycle: Cycle) -> Execution | None:
    return cycle.anchor
