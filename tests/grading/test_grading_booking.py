"""Bookings: slots held while the judge waits, the due and lost sweeps, eval_start, one grading per run."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from grading.booking import (
    GIVE_UP_AFTER,
    LOST,
    MAX_ATTEMPTS,
    GradingOff,
    book_for_rating,
    eval_start,
    on_terminal,
    sweep_due,
    sweep_lost,
)
from grading.grade import grade_now
from grading.models import Execution, Grade
from grading.sampling import booked_on, calendar_day
from singularity.celery import app as celery_app
from tests.concurrency import each_at_once
from tests.grading.grading_helpers import make_entity, make_run

#: Method none: grading needs no model, so these tests are about the booking alone.
NO_JUDGE = {"method": "none", "metrics": {"cost_usd": {"role": "guard", "floor": 1}}}
T0 = datetime(2025, 5, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Run enqueued tasks in-process, as a worker would, instead of writing them to the broker."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def delayed_entity(**evaluation):
    return make_entity(evaluation={**NO_JUDGE, "sample": {"maxPerDay": 1}, "gradeAfterHours": 72, **evaluation})


@pytest.mark.django_db
def test_a_booking_records_when_the_grade_is_owed():
    entity = delayed_entity()
    run = make_run(entity, completed_at=T0)
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False):
        grade = on_terminal(run)
    assert grade is not None
    assert grade.status == Grade.Status.BOOKED
    assert grade.due_at == T0 + timedelta(hours=72)
    assert grade.holds_slot


@pytest.mark.django_db
def test_a_delayed_booking_holds_its_slot_while_the_judge_waits():
    entity = delayed_entity()
    first, second = make_run(entity), make_run(entity)
    assert on_terminal(first) is not None
    assert on_terminal(second) is None
    assert second.sampling == Execution.Sampling.SKIPPED_CAP
    assert first.grade.status == Grade.Status.BOOKED  # not graded yet, and still holding the day's only slot


@pytest.mark.django_db
def test_the_nearest_tier_wins_even_when_it_says_zero():
    entity = make_entity(
        evaluation={**NO_JUDGE, "gradeAfterHours": 0}, manifest={"evaluation": {"gradeAfterHours": 72}}
    )
    run = make_run(entity, completed_at=T0)
    with time_machine.travel(T0, tick=False):
        grade = on_terminal(run)
    assert grade.due_at == T0


@pytest.mark.django_db
def test_a_delayed_grade_is_graded_by_the_due_sweep_once_its_time_comes(
    eager_tasks, django_capture_on_commit_callbacks
):
    entity = delayed_entity()
    run = make_run(entity, completed_at=T0)
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks(execute=True) as callbacks:
        grade = on_terminal(run)
    assert callbacks == []  # nothing enqueued while the grade is not owed

    with time_machine.travel(T0 + timedelta(hours=71), tick=False), django_capture_on_commit_callbacks(execute=True):
        assert sweep_due() == 0
    grade.refresh_from_db()
    assert grade.status == Grade.Status.BOOKED

    with (
        time_machine.travel(T0 + timedelta(hours=72, seconds=30), tick=False),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert sweep_due() == 1
    grade.refresh_from_db()
    assert grade.status == Grade.Status.GRADED
    assert grade.metrics["cost_usd"] == "0.0123"

    with time_machine.travel(T0 + timedelta(hours=73), tick=False), django_capture_on_commit_callbacks(execute=True):
        assert sweep_due() == 0  # graded once


@pytest.mark.django_db
def test_a_grade_due_now_is_enqueued_after_commit(eager_tasks, django_capture_on_commit_callbacks):
    entity = make_entity(evaluation=NO_JUDGE)
    run = make_run(entity)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        grade = on_terminal(run)
    # The booking enqueues its grading after commit; the grading, once settled, announces the landed grade.
    assert [c.__qualname__.split(".")[0] for c in callbacks] == ["_enqueue_on_commit", "_announce"]
    grade.refresh_from_db()
    assert grade.status == Grade.Status.GRADED


def empty_queue() -> int:
    """The broker's answer when the grading queue holds nothing (the booking's message is gone)."""
    return 0


@pytest.mark.django_db
def test_a_grading_job_lost_from_an_empty_queue_is_sent_again_then_failed_as_lost_and_frees_its_slot(
    django_capture_on_commit_callbacks,
):
    entity = delayed_entity()
    first = make_run(entity, completed_at=T0)
    with time_machine.travel(T0, tick=False):
        grade = on_terminal(first)
        day = calendar_day()
    assert booked_on(entity, day) == 1

    with time_machine.travel(T0 + timedelta(hours=72, minutes=14), tick=False):
        with django_capture_on_commit_callbacks() as sent:
            assert sweep_lost(queued=empty_queue) == 0  # inside the grace
        assert sent == []
    with time_machine.travel(T0 + timedelta(hours=72, minutes=16), tick=False):
        with django_capture_on_commit_callbacks() as sent:
            assert sweep_lost(queued=empty_queue) == 0  # its job is gone from the queue: sent again, not failed
        assert [c.__qualname__.split(".")[0] for c in sent] == ["_enqueue_on_commit"]
    grade.refresh_from_db()
    assert grade.status == Grade.Status.BOOKED and booked_on(entity, day) == 1
    with time_machine.travel(T0 + timedelta(hours=72) + GIVE_UP_AFTER + timedelta(minutes=16), tick=False):
        assert sweep_lost(queued=empty_queue) == 1  # still lost a day on: failed
        assert sweep_lost(queued=empty_queue) == 0  # idempotent
    grade.refresh_from_db()
    assert grade.status == Grade.Status.FAILED
    assert grade.error == LOST == "grading job lost"
    assert grade.score is None and grade.metrics == {}
    assert not grade.holds_slot
    assert booked_on(entity, day) == 0

    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        second = make_run(entity)
        assert on_terminal(second) is not None  # the freed slot books the day's next run


@pytest.mark.django_db
def test_a_booking_past_the_grace_is_left_queued_while_the_queue_holds_a_backlog_or_cannot_be_asked(
    django_capture_on_commit_callbacks,
):
    entity = make_entity(evaluation=NO_JUDGE)
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks():
        grade = on_terminal(make_run(entity))
    for depth in (1000, None):
        with time_machine.travel(T0 + GIVE_UP_AFTER + timedelta(hours=1), tick=False):
            with django_capture_on_commit_callbacks() as sent:
                assert sweep_lost(queued=lambda depth=depth: depth) == 0
            assert sent == []  # neither failed nor sent twice
    grade.refresh_from_db()
    assert grade.status == Grade.Status.BOOKED and grade.error == ""


@pytest.mark.django_db
def test_a_grading_whose_worker_died_is_run_again_and_failed_as_lost_after_its_last_start(
    django_capture_on_commit_callbacks,
):
    entity = make_entity(evaluation=NO_JUDGE)
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks():
        grade = on_terminal(make_run(entity))
        Grade.objects.filter(pk=grade.pk).update(status=Grade.Status.GRADING, started_at=T0, attempts=1)
    with time_machine.travel(T0 + timedelta(minutes=16), tick=False):
        with django_capture_on_commit_callbacks() as sent:
            assert sweep_lost(queued=empty_queue) == 0
        assert [c.__qualname__.split(".")[0] for c in sent] == ["_enqueue_on_commit"]
    grade.refresh_from_db()
    assert grade.status == Grade.Status.BOOKED and grade.attempts == 1  # booked again, its start counted
    Grade.objects.filter(pk=grade.pk).update(status=Grade.Status.GRADING, started_at=T0, attempts=MAX_ATTEMPTS)
    with time_machine.travel(T0 + timedelta(minutes=16), tick=False):
        assert sweep_lost(queued=empty_queue) == 1
    grade.refresh_from_db()
    assert grade.status == Grade.Status.FAILED and grade.error == LOST


@pytest.mark.django_db
def test_a_late_result_does_not_overwrite_a_lost_verdict():
    entity = make_entity(evaluation=NO_JUDGE)
    grade = on_terminal(make_run(entity))
    Grade.objects.filter(pk=grade.pk).update(status=Grade.Status.FAILED, error=LOST)
    grade.refresh_from_db()
    assert grade_now(grade).error == LOST


@pytest.mark.django_db
def test_eval_start_pulls_a_delayed_grading_forward_without_a_second_grade():
    entity = delayed_entity()
    run = make_run(entity, completed_at=T0)
    with time_machine.travel(T0, tick=False):
        booked = on_terminal(run)
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        graded = eval_start(run)
        assert graded.pk == booked.pk
        assert graded.status == Grade.Status.GRADED
        assert graded.due_at == T0 + timedelta(hours=1)
        assert graded.attempts == 1
        assert sweep_due() == 0
    assert Grade.objects.filter(execution=run).count() == 1
    assert booked_on(entity, calendar_day(T0)) == 1


@pytest.mark.django_db
def test_eval_start_grades_a_run_the_sampler_passed_by_holding_no_slot():
    entity = make_entity(evaluation={**NO_JUDGE, "sample": {"maxPerDay": 1}})
    on_terminal(make_run(entity))
    skipped = make_run(entity)
    on_terminal(skipped)
    grade = eval_start(skipped)
    assert grade.status == Grade.Status.GRADED
    assert grade.reason == "manual" and not grade.holds_slot
    skipped.refresh_from_db()
    assert skipped.sampling == Execution.Sampling.MANUAL


@pytest.mark.django_db
def test_eval_start_regrades_a_graded_run_in_place():
    entity = make_entity(evaluation=NO_JUDGE)
    run = make_run(entity)
    on_terminal(run)
    first = eval_start(run)
    again = eval_start(run)
    assert (first.pk, again.pk) == (run.pk, run.pk)
    assert again.status == Grade.Status.GRADED and again.attempts == 2


@pytest.mark.django_db
def test_eval_start_is_refused_when_grading_is_off():
    entity = make_entity(evaluation={"enabled": False})
    run = make_run(entity)
    with pytest.raises(GradingOff, match="evaluation.enabled is false"):
        eval_start(run)
    assert not Grade.objects.exists()


@pytest.mark.django_db
def test_eval_start_command_grades_a_run_now():
    entity = delayed_entity()
    run = make_run(entity)
    on_terminal(run)
    out = StringIO()
    call_command("eval_start", str(run.pk), stdout=out)
    assert "graded, passed=True" in out.getvalue()
    run.grade.refresh_from_db()
    assert run.grade.status == Grade.Status.GRADED


@pytest.mark.django_db
def test_eval_start_command_names_an_unknown_run():
    with pytest.raises(CommandError, match="not found"):
        call_command("eval_start", "00000000-0000-0000-0000-000000000000")


@pytest.mark.django_db
def test_a_rating_books_a_passed_by_run_once_counted_from_the_run_end():
    entity = make_entity(evaluation={**NO_JUDGE, "sample": {"rate": 0}, "gradeAfterHours": 2})
    run = make_run(entity, completed_at=T0)
    on_terminal(run)
    assert run.sampling == Execution.Sampling.SKIPPED_RATE
    grade = book_for_rating(run)
    assert (grade.reason, grade.holds_slot, grade.due_at) == ("rated", False, T0 + timedelta(hours=2))
    assert book_for_rating(run).pk == grade.pk
    run.refresh_from_db()
    assert run.sampling == Execution.Sampling.RATED


@pytest.mark.django_db
def test_a_rating_books_nothing_when_grading_is_off():
    run = make_run(make_entity(evaluation={"enabled": False}))
    with pytest.raises(GradingOff):
        book_for_rating(run)


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_grade_one_run_once():
    entity = make_entity(evaluation={**NO_JUDGE, "gradeAfterHours": 1})  # delayed: nothing enqueued
    run = make_run(entity)
    grade = on_terminal(run)
    from grading.grade import _grade

    # Each worker holds its own copy, read before any is released: all six see the grade pending.
    copies = [Grade.objects.get(pk=grade.pk) for _ in range(6)]
    did = each_at_once([lambda mine=mine: _grade(mine) for mine in copies])
    assert did.count(True) == 1
    grade.refresh_from_db()
    assert grade.status == Grade.Status.GRADED and grade.attempts == 1
