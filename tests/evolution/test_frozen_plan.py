"""A workflow scenario's loop.enabled and loop.threshold are frozen into a run's plan when the run starts (R5.19,
issue 29): editing the threshold while a run is in flight judges that run by the old one and later runs by the
new, in every reader that decides "bad" (the trigger at the landing, the windows on SQLite and Postgres, the
fleet's recent outcomes, the watch's count); a pipeline and a heartbeat read it live; a run recorded before
the plan was kept (no frozen value) reads the current value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evolution.loop import trigger
from evolution.presets.repair import graded_window, windows_for
from evolution.reads.recent import attach, newest_graded
from grading.executions import finish_execution, report_execution, start_execution
from grading.metrics import is_bad
from grading.models import Entity, Execution, Grade
from tests.grading.grading_helpers import make_entity

pytestmark = pytest.mark.django_db

LOOP = {"enabled": True, "threshold": 0.8, "trigger": {"windowRuns": 1, "minFailures": 1}}


def edit_loop(entity: Entity, **loop: Any) -> None:
    """What a brain sync does with an edited threshold: the entity's resolved terms change."""
    terms = dict(entity.terms)
    terms["loop"] = {**terms["loop"], **loop}
    entity.terms = terms
    entity.loop_enabled = bool(terms["loop"]["enabled"])
    entity.save(update_fields=["terms", "loop_enabled"])


def graded(execution: Execution, score: float, *, minutes: int = 0) -> Grade:
    """The run ends and is graded ``score`` (passed: only the threshold can make it bad)."""
    when = timezone.now() + timedelta(minutes=minutes)
    if not execution.terminal:
        finish_execution(execution, status=Execution.Status.SUCCEEDED, completed_at=when - timedelta(seconds=1))
    grade = Grade.objects.filter(execution=execution).first()
    if grade is None:  # booking runs on commit; the test's transaction never commits
        from grading.booking import on_terminal

        grade = on_terminal(Execution.objects.get(pk=execution.pk))
    Grade.objects.filter(pk=grade.pk).update(
        status=Grade.Status.GRADED, graded_at=when, score=score, passed=True, judge={"method": "default"}
    )
    return Grade.objects.select_related("entity").get(pk=grade.pk)


def workflow(slug: str = "digest", **loop: Any) -> Entity:
    terms = {**LOOP, **loop}
    return make_entity(slug, loop=terms, evaluation={"sample": {"rate": 1}})


def test_a_run_in_flight_is_judged_by_the_threshold_of_its_plan_and_later_runs_by_the_new(db) -> None:
    entity = workflow()
    in_flight = start_execution(entity, input={"topic": "a"}, source=Execution.Source.MANUAL)
    assert in_flight.plan_terms == {"enabled": True, "threshold": 0.8}
    edit_loop(entity, threshold=0.5)
    later = start_execution(entity, input={"topic": "b"}, source=Execution.Source.MANUAL)
    old, new = graded(in_flight, 0.6), graded(later, 0.6, minutes=1)
    assert old.plan_terms == {"enabled": True, "threshold": 0.8}
    assert is_bad(old, entity.terms) and not is_bad(new, entity.terms)
    # The trigger at each landing: the in-flight run opens (bad by 0.8), the later one does not (fine by 0.5).
    now = timezone.now() + timedelta(minutes=2)
    window, _ = trigger.decide(entity, old, now=now)
    assert window is not None
    assert trigger.decide(entity, new, now=now) == (None, "the run that landed is not bad")


def test_every_window_read_carries_the_frozen_threshold(db) -> None:
    """The windows read by the ORM, by the batch (a LATERAL statement on Postgres) and the fleet's recent runs."""
    entity = workflow(trigger={"windowRuns": 5, "minFailures": 1})
    first = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    edit_loop(entity, threshold=0.5)
    second = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    old, new = graded(first, 0.6), graded(second, 0.6, minutes=1)
    entity.refresh_from_db()
    now = timezone.now() + timedelta(minutes=2)
    expected = [False, True]  # newest first: the later run, then the one planned under 0.8
    by_orm = graded_window(entity, through=new, size=5, now=now)
    assert [is_bad(g, entity.terms) for g in by_orm] == expected
    batch = windows_for([new], {entity.pk: entity}, now=now)[new.pk]
    assert [is_bad(g, entity.terms) for g in batch] == expected
    recent = newest_graded({entity.pk: 5}, now=now)[entity.pk]
    attach(recent, {entity.pk: entity})
    assert [is_bad(g, entity.terms) for g in recent] == expected
    landed = trigger.landed_grades([old.pk, new.pk])
    assert [is_bad(g, entity.terms) for g in landed] == [True, False]  # oldest graded first


def test_a_pipeline_and_a_heartbeat_read_the_threshold_live(db) -> None:
    for slug, kind in (("shorts", Entity.Kind.PIPELINE), ("pulse", Entity.Kind.HEARTBEAT)):
        entity = make_entity(slug, kind=kind, loop=LOOP, evaluation={"sample": {"rate": 1, "maxPerDay": 50}})
        run = start_execution(entity, input={}, source=Execution.Source.SCHEDULE)
        assert run.plan_terms is None
        edit_loop(entity, threshold=0.5)
        assert not is_bad(graded(run, 0.6), entity.terms)


def test_a_reported_workflow_run_freezes_the_plan_it_was_recorded_under(db) -> None:
    """One reported run, and a batch (one INSERT … SELECT and one booking pass on Postgres)."""
    from grading.executions import book_many, report_many

    entity = workflow()
    now = timezone.now()
    data = {
        "status": "succeeded",
        "started_at": (now - timedelta(seconds=5)).isoformat(),
        "completed_at": now.isoformat(),
    }
    run = report_execution(entity, data, user=None)
    batch = report_many([(entity, data), (entity, data)], user=None)
    book_many(batch)
    edit_loop(entity, threshold=0.5)
    assert is_bad(graded(run, 0.6), entity.terms)
    for index, reported in enumerate(batch):
        assert Grade.objects.get(execution=reported).plan_terms == {"enabled": True, "threshold": 0.8}
        assert is_bad(graded(reported, 0.6, minutes=index + 1), entity.terms)


def test_a_run_with_no_frozen_plan_reads_the_current_threshold(db) -> None:
    entity = workflow()
    run = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    Execution.objects.filter(pk=run.pk).update(plan_terms=None)  # recorded before plans were kept
    run.refresh_from_db()
    edit_loop(entity, threshold=0.5)
    grade = graded(run, 0.6)
    assert grade.plan_terms is None and not is_bad(grade, entity.terms)


def test_a_run_planned_while_the_loop_was_off_opens_nothing_when_it_lands_after_a_join(db) -> None:
    entity = workflow(enabled=False)
    planned_off = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    edit_loop(entity, enabled=True)
    grade = graded(planned_off, 0.1)
    window, reason = trigger.decide(entity, grade, now=timezone.now() + timedelta(minutes=1))
    assert window is None and reason == "the loop was off when this run was planned"


def test_an_absent_threshold_frozen_into_the_plan_stays_absent(db) -> None:
    entity = workflow(threshold=None)
    run = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    assert run.plan_terms == {"enabled": True, "threshold": None}
    edit_loop(entity, threshold=0.5)
    assert is_bad(graded(run, 0.6), entity.terms)  # no threshold declared at plan time: every judged run is bad


def test_the_watchs_count_judges_each_run_by_the_threshold_of_its_plan(db) -> None:
    from evolution.loop.watch import window_grades
    from evolution.models import Cycle
    from evolution.presets.base import Observed
    from evolution.presets.repair import count

    entity = workflow()
    in_flight = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    edit_loop(entity, threshold=0.5)
    later = start_execution(entity, input={}, source=Execution.Source.MANUAL)
    old, new = graded(in_flight, 0.6), graded(later, 0.6, minutes=1)
    cycle = Cycle.objects.create(entity=entity, key="t", origin=Cycle.Origin.GRADE, phase=Cycle.Phase.WATCHING)
    ids = [old.execution_id, new.execution_id]
    seen = Observed(run_ids=ids, graded=2, ungraded=0, need=2, min_failures=2, load=lambda i: window_grades(cycle, i))
    answer = count(cycle, seen)
    assert (answer.verdict, answer.bad) == ("validated", 1)  # only the run planned under 0.8 is bad
