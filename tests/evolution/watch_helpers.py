"""Shipped cycles and post-merge runs for the watch, merge-wait and verdict tests.

``pulse`` is a heartbeat in the loop graded without a judge (``method:
none``): a tick is bad when it had a tool failure (the ``tool_failures``
guard's floor is 0). It declares no ``sample.maxPerDay``, so its ticks are
graded only when the watch exempts them — which is what the seed's heartbeat
story needs. Runs are booked and graded by the real grading code
(``on_terminal`` → ``grade_now``) at the instant the test travels to.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine

from evolution.loop import machine
from evolution.models import Cycle, Round
from grading.booking import on_terminal
from grading.grade import grade_now
from grading.models import Entity, Execution, Grade
from tests.grading.grading_helpers import make_entity, make_run

#: Who grades a ``method: none`` entity with no loop module (grading.pin.snapshot).
NONE_JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}
#: A judge that is not the one a cycle pinned (another method file).
OTHER_JUDGE = {
    "model": "openai:gpt-5.2",
    "method": "default",
    "method_hash": "b" * 64,
    "loop_hash": "",
    "role_hash": "r",
}

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def pulse(
    slug: str = "pulse",
    *,
    watch_block: dict[str, Any] | None = None,
    trigger: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    **fields: Any,
) -> Entity:
    """A heartbeat in the loop (repair), bad when a tick had a tool failure; never sampled (rate 0)."""
    loop: dict[str, Any] = {"enabled": True}
    if watch_block is not None:
        loop["watch"] = watch_block
    if trigger is not None:
        loop["trigger"] = trigger
    return make_entity(
        slug,
        kind="heartbeat",
        schedule="*/5 * * * *",
        evaluation={
            "method": "none",
            "metrics": {"tool_failures": {"role": "guard", "floor": 0}},
            "sample": {"rate": 0},
            **(evaluation or {}),
        },
        loop=loop,
        manifest=manifest,
        **fields,
    )


def cycle_in(entity: Entity, phase: str, *, at: datetime = T0, judge: dict[str, Any] | None = None) -> Cycle:
    """A cycle of ``entity`` holding its claim in ``phase``, pinned to ``judge`` (the none judge by default)."""
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{at.isoformat()}:{Cycle.objects.count()}",
        claim=entity.pk,
        origin=Cycle.Origin.GRADE,
        phase=phase,
        judge=NONE_JUDGE if judge is None else judge,
        terms=entity.terms,
        window={"runIds": [], "progress": {"have": 5, "need": 5, "unit": "graded runs"}},
        started_at=at - 2 * HOUR,
        moved_at=at - 2 * HOUR,
    )


def shipped(
    entity: Entity,
    *,
    merged_at: datetime = T0,
    judge: dict[str, Any] | None = None,
    merge_sha: str = "a" * 40,
    **round_fields: Any,
) -> Cycle:
    """A cycle whose round 1 merged at ``merged_at``, its watch opened there (``machine.open_watch``)."""
    cycle = cycle_in(entity, Cycle.Phase.MERGE_WAIT, at=merged_at, judge=judge)
    Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.MERGED,
        pr_number=round_fields.pop("pr_number", 7),
        merge_sha=merge_sha,
        **round_fields,
    )
    Cycle.objects.filter(pk=cycle.pk).update(merged_at=merged_at)
    with time_machine.travel(merged_at, tick=False):
        machine.open_watch(cycle, merged_at)
    cycle.refresh_from_db()
    return cycle


def tick(entity: Entity, at: datetime, *, bad: bool = False, **run: Any) -> Grade | None:
    """A run of ``entity`` ending at ``at``, booked and graded there; the watch hears its grade. None: not graded."""
    checkout = run.pop("checkout", None)
    with time_machine.travel(at, tick=False):
        execution = make_run(entity, completed_at=at, tool_failures=1 if bad else 0, **run)
        booking = on_terminal(execution)
        if booking is None:
            return None
        grade = grade_now(booking, checkout=checkout)
        machine.on_grades([grade.pk])
    return grade


def ticks(entity: Entity, pattern: str, *, start: datetime, every: timedelta = timedelta(minutes=5)) -> list[Grade]:
    """Runs from a pattern like "gbg" (b bad, g good), one every ``every`` from ``start``; return their grades."""
    grades = []
    for index, mark in enumerate(pattern):
        grade = tick(entity, start + index * every, bad=mark == "b")
        assert grade is not None, f"run {index} of {entity} was not graded"
        grades.append(grade)
    return grades


def made_grade(
    entity: Entity,
    at: datetime,
    *,
    status: str = Grade.Status.GRADED,
    judge: dict[str, Any] | None = None,
    bad: bool = False,
    loop_launched: bool = False,
) -> Grade:
    """A grade written as the grading would have settled it (for a judge the pinned one can no longer produce)."""
    execution = Execution.objects.create(
        entity=entity,
        run_kind=Execution.RunKind.HEARTBEAT,
        status=Execution.Status.SUCCEEDED,
        source=Execution.Source.LOOP if loop_launched else Execution.Source.SCHEDULE,
        loop_launched=loop_launched,
        started_at=at - timedelta(seconds=2),
        completed_at=at - timedelta(seconds=1),
        sampling=Execution.Sampling.EXEMPT,
    )
    graded = status == Grade.Status.GRADED
    return Grade.objects.create(
        execution=execution,
        entity=entity,
        status=status,
        reason="exempt:test",
        holds_slot=False,
        day=at.date(),
        booked_at=at - timedelta(seconds=1),
        due_at=at - timedelta(seconds=1),
        graded_at=at,
        passed=(not bad) if graded else None,
        metrics={"tool_failures": int(bad)} if graded else {},
        judge=(NONE_JUDGE if judge is None else judge) if graded else {},
        error="" if graded else "judge: no structured output",
    )


def refreshed(cycle: Cycle) -> Cycle:
    cycle.refresh_from_db()
    return cycle


# --- A real pull request on the local forge ---------------------------------------------


def open_pull(brain: Any, branch: str = "loop/pulse-1", files: dict[str, str] | None = None) -> Any:
    """Push ``branch`` changing ``files`` (the digest's notes by default), pass its diff gate, open its PR."""
    from evolution.forges.base import DIFF_GATE

    head = brain.push_branch(branch, files or {"features/digest/notes.md": f"Line one.\nChanged on {branch}.\n"})
    brain.forge.set_status(head, DIFF_GATE, "success", "checked")
    return brain.forge.open_pull(head=branch, base="main", title=f"loop: {branch}", body="A change.")


def merged_pull(brain: Any, branch: str = "loop/pulse-1") -> Any:
    """A PR opened and merged by a person on the local forge; return it as the forge holds it."""
    pull = open_pull(brain, branch)
    return brain.forge.merge_pull(pull.number, by="alice")
