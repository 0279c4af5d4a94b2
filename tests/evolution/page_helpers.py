"""Entities, graded runs, cycles in every phase, rounds, cards and lessons for the pages, API and card tests.

Everything is made with the ORM (terms resolved by the real resolver through
grading's helpers), the way the loop's own modules leave its rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from evolution.models import Cycle, Lesson, Recall, Round
from grading.models import Entity, Execution, Grade
from hitl.models import Card
from tests.grading.grading_helpers import make_entity, make_run

ACCURACY = {"kind": "judged", "direction": "max", "role": "objective", "target": 0.9}
JUDGE = {"model": "openai:gpt-5.2", "method": "default", "method_hash": "m1", "loop_hash": "", "role_hash": "r1"}


def in_loop(slug: str = "digest", *, evaluation: dict[str, Any] | None = None, **kwargs: Any) -> Entity:
    """A workflow in the loop (repair preset), judged, with an ``accuracy`` objective (target 0.9)."""
    evaluation = {"metrics": {"accuracy": ACCURACY}} if evaluation is None else evaluation
    return make_entity(slug, evaluation=evaluation, loop={"enabled": True, **kwargs.pop("loop", {})}, **kwargs)


def graded_run(
    entity: Entity,
    *,
    passed: bool = True,
    score: float | None = 0.8,
    metrics: dict[str, Any] | None = None,
    at: datetime | None = None,
    category: str = "",
    loop_launched: bool = False,
) -> Execution:
    """A finished run of ``entity`` graded at ``at`` (now)."""
    at = at or timezone.now()
    run = make_run(entity, completed_at=at - timedelta(seconds=1), loop_launched=loop_launched)
    Grade.objects.create(
        execution=run,
        entity=entity,
        status=Grade.Status.GRADED,
        reason="sampled",
        day=at.date(),
        booked_at=at - timedelta(seconds=1),
        due_at=at - timedelta(seconds=1),
        graded_at=at,
        passed=passed,
        score=score,
        failure_category=category,
        metrics=metrics if metrics is not None else {},
        judge=JUDGE,
    )
    return run


def window_of(runs: list[Execution]) -> dict[str, Any]:
    """A repair window naming ``runs`` (oldest first)."""
    return {
        "from": None,
        "to": timezone.now().isoformat(),
        "runIds": [str(r.pk) for r in runs],
        "reason": f"{len(runs)} of the last {len(runs)} graded runs bad",
        "ready": True,
        "progress": {"have": len(runs), "need": len(runs), "unit": "graded runs"},
        "metrics": [],
    }


_counter = {"n": 0}


def make_cycle(
    entity: Entity,
    *,
    phase: str = Cycle.Phase.ANALYSING,
    status: str = "",
    at: datetime | None = None,
    claim: bool | None = None,
    **fields: Any,
) -> Cycle:
    """A cycle of ``entity`` at ``phase``; it holds the entity's claim in the phases that hold one."""
    at = at or timezone.now()
    _counter["n"] += 1
    holds = phase in (
        Cycle.Phase.ANALYSING,
        Cycle.Phase.APPLYING,
        Cycle.Phase.MERGE_WAIT,
        Cycle.Phase.WATCHING,
        Cycle.Phase.REVERTING,
    )
    settled = phase == Cycle.Phase.SETTLED
    fields.setdefault("terms", entity.terms)
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{_counter['n']}:{at.isoformat()}",
        claim=entity.pk if (holds if claim is None else claim) else None,
        origin=fields.pop("origin", Cycle.Origin.GRADE),
        phase=phase,
        status=status,
        analysed=fields.pop("analysed", True),
        started_at=at,
        moved_at=fields.pop("moved_at", at),
        completed_at=fields.pop("completed_at", at + timedelta(hours=1) if settled else None),
        **fields,
    )


def make_round(cycle: Cycle, number: int = 1, **fields: Any) -> Round:
    """Round ``number`` of ``cycle`` holding a proposal (status proposed unless told)."""
    fields.setdefault("status", Round.Status.PROPOSED)
    fields.setdefault("author", "pipeline:demo-proposer")
    fields.setdefault("summary", "Ask for the date first")
    fields.setdefault("hypothesis", "Runs fail when the date is missing.")
    fields.setdefault("files", [{"path": "features/digest/digest.scenario.md", "content": "a\nb\nc\n"}])
    return Round.objects.create(cycle=cycle, number=number, **fields)


def make_card(rnd: Round, *, kind: str = Card.Kind.DECIDE, status: str = Card.Status.PENDING, **fields: Any) -> Card:
    """The round's decide (or retry) card, attached to it."""
    card = Card.objects.create(
        producer="loop",
        kind=kind,
        key=f"loop:{kind}:{rnd.pk}",
        subject=f"cycle {rnd.cycle_id} · r{rnd.number}",
        title=f"proposal {rnd.pk}",
        expires_at=timezone.now() + timedelta(hours=72),
        status=status,
        **fields,
    )
    Round.objects.filter(pk=rnd.pk).update(card=card)
    rnd.card = card
    return card


def make_lesson(rnd: Round, *, outcome: str = Cycle.Status.VALIDATED, **fields: Any) -> Lesson:
    """The lesson ``rnd`` left."""
    return Lesson.objects.create(
        entity=rnd.cycle.entity,
        cycle=rnd.cycle,
        round=rnd,
        outcome=outcome,
        summary=fields.pop("summary", rnd.summary),
        hypothesis=fields.pop("hypothesis", rnd.hypothesis),
        **fields,
    )


def recall(lesson: Lesson, rnd: Round) -> Recall:
    return Recall.objects.create(lesson=lesson, round=rnd)


def every_phase(entity_prefix: str = "e") -> dict[str, Cycle]:
    """One entity per phase with a cycle there (and the rows that phase leaves), keyed by phase."""
    made: dict[str, Cycle] = {}
    now = timezone.now()
    for index, phase in enumerate(Cycle.Phase.values):
        entity = in_loop(f"{entity_prefix}-{phase.replace('_', '-')}")
        status = Cycle.Status.REGRESSED if phase == Cycle.Phase.REVERTING else ""
        if phase == Cycle.Phase.SETTLED:
            status = Cycle.Status.VALIDATED
        cycle = make_cycle(entity, phase=phase, status=status, at=now - timedelta(days=3, minutes=index))
        if phase == Cycle.Phase.ANALYSING:
            make_round(cycle, status=Round.Status.ANALYSING, summary="", files=[])
        elif phase == Cycle.Phase.DECIDING:
            make_card(make_round(cycle))
        elif phase == Cycle.Phase.APPLYING:
            make_round(cycle, status=Round.Status.ACCEPTED, decided_by="alice")
        elif phase == Cycle.Phase.CHECKING:
            make_round(cycle, status=Round.Status.APPLIED, decided_by="alice", pr_number=10 + index,
                       pr_url=f"http://testserver/evolution/pulls/{10 + index}/", checked_sha="c" * 40)  # fmt: skip
            Cycle.objects.filter(pk=cycle.pk).update(applied_at=now, check_deadline=now + timedelta(hours=24))
        elif phase == Cycle.Phase.MERGE_WAIT:
            make_round(cycle, status=Round.Status.APPLIED, decided_by="alice", pr_number=10 + index,
                       pr_url=f"http://testserver/evolution/pulls/{10 + index}/", merge_gate="human")  # fmt: skip
            Cycle.objects.filter(pk=cycle.pk).update(applied_at=now, merge_deadline=now + timedelta(days=14))
        elif phase == Cycle.Phase.WATCHING:
            make_round(cycle, status=Round.Status.MERGED, decided_by="alice", pr_number=10 + index, merge_sha="m" * 40)
            Cycle.objects.filter(pk=cycle.pk).update(
                watch_opened_at=now, watch_deadline=now + timedelta(days=14), watch_tally="1 of 5 graded",
                watch_window={"runIds": [], "progress": {"have": 1, "need": 5, "unit": "graded runs"}},
            )  # fmt: skip
        elif phase == Cycle.Phase.REVERTING:
            make_round(cycle, status=Round.Status.MERGED, decided_by="alice", pr_number=10 + index, merge_sha="m" * 40,
                       revert_pr_number=90 + index, revert_opened_at=now,
                       revert_deadline=now + timedelta(days=14))  # fmt: skip
        else:
            rnd = make_round(cycle, status=Round.Status.MERGED, decided_by="alice", pr_number=10 + index,
                             merge_sha="m" * 40)  # fmt: skip
            Cycle.objects.filter(pk=cycle.pk).update(
                watch_verdict={"verdict": "validated", "comparator": "count", "n": 5, "reason": "5 of 5 ok"}
            )
            make_lesson(rnd)
        cycle.refresh_from_db()
        made[phase] = cycle
    return made
