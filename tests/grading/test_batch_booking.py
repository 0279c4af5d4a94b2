"""A reported batch is booked and graded in one pass, under the same rules as a run booked on its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import grading.grade
from grading.booking import on_terminal, on_terminal_many, register_exemption, unregister_exemption
from grading.executions import report_execution, report_many
from grading.grade import grade_many, grade_now
from grading.models import Execution, Grade, SampleDay
from grading.sampling import in_rate, take_slot, take_slots
from grading.tasks import grading as grading_tasks
from singularity.errors import StateError
from tests.concurrency import each_at_once
from tests.grading.grading_helpers import brain_repo, make_entity, make_run

Sampling = Execution.Sampling
T0 = datetime(2026, 4, 7, 10, 0, tzinfo=UTC)
RATE = 0.6
LOOP_PATH = "features/triage/triage.loop.py"
MEASURE = """
def measure(run):
    return [{"id": "accuracy", "value": (run.output or {}).get("accuracy")}]
"""
ACCURACY = {"kind": "computed", "direction": "max", "unit": "share", "role": "objective", "floor": 0.5}
GRADE_FIELDS = (
    "reason",
    "holds_slot",
    "day",
    "booked_at",
    "due_at",
    "status",
    "attempts",
    "started_at",
    "graded_at",
    "score",
    "passed",
    "failure_category",
    "criteria",
    "feedback",
    "metrics",
    "judge",
    "error",
    "cost_usd",
)


@pytest.fixture
def brain(tmp_path):
    return brain_repo(tmp_path / "brain", {LOOP_PATH: MEASURE, "features/triage/triage.scenario.md": "---\n---\n"})


def triage(brain, **evaluation: Any):
    """A method-none workflow graded by its loop module's accuracy, sampled at RATE with a ceiling of 4 a day."""
    _, commit = brain
    terms = {"method": "none", "sample": {"rate": RATE, "maxPerDay": 4}, "metrics": {"accuracy": ACCURACY}}
    return make_entity("triage", evaluation={**terms, **evaluation}, commit=commit, loop_module_path=LOOP_PATH)


def runs_in_and_out_of_rate(entity, *, inside: int, outside: int, **fields: Any) -> list[Execution]:
    """Finished runs of ``entity``: ``inside`` of them inside RATE, ``outside`` outside, interleaved."""
    wanted = {True: inside, False: outside}
    made: list[Execution] = []
    while wanted[True] or wanted[False]:
        run = make_run(entity, **fields)
        verdict = in_rate(run.pk, RATE)
        if wanted[verdict]:
            wanted[verdict] -= 1
            made.append(run)
        else:
            run.delete()
    return made


def snapshot(runs: list[Execution]) -> dict[str, Any]:
    """What the grading wrote for ``runs``: each run's verdict and grade, and the day's slot counts."""
    grades = {grade.pk: grade for grade in Grade.objects.filter(execution__in=runs)}
    return {
        "runs": [
            (
                Execution.objects.get(pk=run.pk).sampling,
                {name: getattr(grades[run.pk], name) for name in GRADE_FIELDS} if run.pk in grades else None,
            )
            for run in runs
        ],
        "slots": sorted(SampleDay.objects.values_list("entity__slug", "day", "booked")),
    }


def forget(runs: list[Execution]) -> None:
    """Undo every booking of ``runs`` so they can be booked again from scratch."""
    Grade.objects.filter(execution__in=runs).delete()
    Execution.objects.filter(pk__in=[run.pk for run in runs]).update(sampling="")
    SampleDay.objects.all().delete()
    for run in runs:
        run.sampling = ""


@pytest.mark.django_db
def test_a_batch_writes_the_same_rows_as_booking_and_grading_each_run_alone(brain):
    checkout, _ = brain
    entity = triage(brain)
    later = make_entity("digest", evaluation={"method": "none", "gradeAfterHours": 2})  # booked, not graded yet
    with time_machine.travel(T0, tick=False):
        runs = runs_in_and_out_of_rate(entity, inside=7, outside=3, output={"accuracy": 0.9})
        inside = [run for run in runs if in_rate(run.pk, RATE)]
        inside[0].output = {"accuracy": 0.2}  # below the floor: graded, not passed
        inside[1].output = {"accuracy": "high"}  # measure() answers no number: the grading fails, naming it
        for run in inside[:2]:
            run.save()
        runs.append(make_run(entity, loop_launched=True))  # a replay: its cycle books it
        runs += [make_run(later) for _ in range(2)]
        exempt = inside[-1].pk  # past the ceiling, but the loop needs its verdict

        def watched(execution: Execution) -> str | None:
            return "cycle-7" if execution.pk == exempt else None

        register_exemption(watched)
        try:
            for run in runs:
                grade = on_terminal(run)
                if grade is not None and grade.due_at <= T0:
                    grade_now(grade, checkout=checkout)
            alone = snapshot(runs)
            forget(runs)
            grades = on_terminal_many(runs)
            grade_many([grade for grade in grades if grade is not None and grade.due_at <= T0], checkout=checkout)
            together = snapshot(runs)
        finally:
            unregister_exemption(watched)

    assert together == alone
    verdicts = [sampling for sampling, _ in together["runs"]]
    assert set(verdicts) == {
        Sampling.SAMPLED,
        Sampling.SKIPPED_RATE,
        Sampling.SKIPPED_CAP,
        Sampling.EXEMPT,
        Sampling.LOOP_LAUNCHED,
    }
    graded = [grade for _, grade in together["runs"] if grade]
    assert {grade["status"] for grade in graded} == {Grade.Status.GRADED, Grade.Status.FAILED, Grade.Status.BOOKED}
    assert {grade["passed"] for grade in graded} == {True, False, None}
    assert ("triage", T0.date(), 4) in together["slots"]


@pytest.mark.django_db
def test_a_batch_returns_its_bookings_in_order_and_books_nothing_twice():
    entity = make_entity(evaluation={"method": "none", "gradeAfterHours": 1})
    runs = [make_run(entity) for _ in range(3)]
    first = on_terminal_many(runs)
    again = on_terminal_many(runs)
    assert [grade.pk for grade in first] == [run.pk for run in runs]
    assert [grade.pk for grade in again] == [run.pk for run in runs]
    assert Grade.objects.count() == 3
    assert SampleDay.objects.get(entity=entity).booked == 3


@pytest.mark.django_db
def test_a_batch_holding_a_running_execution_is_refused_whole():
    entity = make_entity(evaluation={"method": "none"})
    finished = make_run(entity)
    running = make_run(entity, status=Execution.Status.RUNNING)
    with pytest.raises(StateError, match=rf"execution {running.pk}: still running"):
        on_terminal_many([finished, running])
    assert Grade.objects.count() == 0
    assert Execution.objects.get(pk=finished.pk).sampling == ""


@pytest.fixture
def slow_slot_counts():
    """On PostgreSQL, every raise of a day's count sleeps ``PAUSE`` seconds in the database before it is written.

    The pause is inside the booking's transaction, between its read of the
    count and its commit: without the lock that read waits on, every other
    booking released meanwhile reads the count as it was and books on it.
    SQLite takes its one write lock at BEGIN (``transaction_mode``
    IMMEDIATE): its writers never overlap, and nothing is slowed.
    """
    if connection.vendor != "postgresql":
        yield
        return
    table = SampleDay._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION slow_slot_count() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({PAUSE}); RETURN NEW; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER slow_slot_count BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION slow_slot_count()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER slow_slot_count ON {table}")
        cursor.execute("DROP FUNCTION slow_slot_count()")


#: Seconds each raise of a day's count takes (``slow_slot_counts``): far longer than releasing the threads.
PAUSE = 0.2


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_never_book_past_the_ceiling(slow_slot_counts):
    # Delayed, so nothing is graded: this test is about the slots.
    entity = make_entity(evaluation={"method": "none", "sample": {"maxPerDay": 7}, "gradeAfterHours": 1})
    batches = [[make_run(entity) for _ in range(5)] for _ in range(4)]
    singles = [make_run(entity) for _ in range(4)]
    each_at_once(
        [lambda runs=runs: on_terminal_many(runs) for runs in batches]
        + [lambda run=run: on_terminal(run) for run in singles]
    )
    assert SampleDay.objects.get(entity=entity).booked == 7
    assert Grade.objects.filter(entity=entity, holds_slot=True).count() == 7
    assert Execution.objects.filter(entity=entity, sampling=Sampling.SKIPPED_CAP).count() == 24 - 7


@pytest.mark.django_db(transaction=True)
def test_concurrent_slot_takers_never_count_past_the_ceiling_by_the_day_row_lock_alone(slow_slot_counts):
    # The bookings above also lock their entity first, which alone keeps them in line; here nothing but take_slots'
    # own lock of the day's row stands between batches reading the count at once and each taking what looks free.
    entity = make_entity(evaluation={"method": "none", "sample": {"maxPerDay": 7}})
    day = timezone.now().date()
    SampleDay.objects.create(entity=entity, day=day, booked=0)

    def batch() -> int:
        with transaction.atomic():
            return take_slots(entity, day, 7, 3)

    def single() -> int:
        with transaction.atomic():
            return int(take_slot(entity, day, 7))

    granted = each_at_once([batch] * 6 + [single] * 3)
    assert SampleDay.objects.get(entity=entity, day=day).booked == 7
    assert sum(granted) == 7


def _chunks(rows: int, columns: int) -> int:
    """How many statements the backend needs to write ``rows`` rows of ``columns`` parameters (SQLite caps them)."""
    per_statement = max(1, (connection.features.max_query_params or 65535) // columns)
    return -(-rows // per_statement)


def _extra_statements(rows: int) -> int:
    """Statements a batch of ``rows`` needs beyond one grade insert and one result write (parameter limits)."""
    grade_columns = len(Grade._meta.concrete_fields)
    return _chunks(rows, grade_columns) - 1 + _chunks(rows, 13) - 1


@pytest.mark.django_db
def test_booking_and_grading_a_batch_takes_as_many_queries_for_100_runs_as_for_10(brain):
    checkout, _ = brain
    entity = triage(brain, sample={"rate": 1})
    plain = make_entity("digest", evaluation={"method": "none"})

    def book_and_grade(n: int) -> int:
        runs = [make_run(entity, output={"accuracy": 0.8}) for _ in range(n)] + [make_run(plain) for _ in range(n)]
        with CaptureQueriesContext(connection) as captured:
            grades = on_terminal_many(runs)
            written = grade_many([grade for grade in grades if grade is not None], checkout=checkout)
        assert len(written) == 2 * n
        assert all(grade.status == Grade.Status.GRADED for grade in written)
        return len(captured.captured_queries)

    book_and_grade(1)  # warm the caches
    ten = book_and_grade(10)
    hundred = book_and_grade(100)
    assert hundred - _extra_statements(200) == ten - _extra_statements(20)
    assert ten <= 20


@pytest.mark.django_db
def test_judged_runs_of_a_batch_are_enqueued_one_by_one_and_unjudged_ones_graded_here(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[str] = []
    monkeypatch.setattr(grading_tasks.grade_execution, "delay", sent.append)
    judged = make_entity("digest", evaluation={"method": "default"})
    measured = make_entity("rollup", evaluation={"method": "none"})
    row = {"status": "succeeded", "started_at": "2026-04-07T09:59:00Z", "completed_at": "2026-04-07T09:59:30Z"}
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks(execute=True):
        created = report_many([(judged, row), (measured, row), (judged, row), (measured, row)], user=None)
    status = dict(Grade.objects.values_list("execution_id", "status"))
    assert sorted(sent) == sorted(str(run.pk) for run in created if run.entity == judged)
    assert [status[run.pk] for run in created] == [
        Grade.Status.BOOKED,
        Grade.Status.GRADED,
        Grade.Status.BOOKED,
        Grade.Status.GRADED,
    ]
    assert Grade.objects.get(pk=created[1].pk).metrics == {"cost_usd": "0.00", "duration_ms": 30000, "tool_failures": 0}


@pytest.mark.django_db
def test_a_grade_already_claimed_is_left_to_whoever_holds_it():
    entity = make_entity(evaluation={"method": "none"})
    runs = [make_run(entity) for _ in range(2)]
    grades = on_terminal_many(runs)
    Grade.objects.filter(pk=grades[0].pk).update(status=Grade.Status.GRADING, attempts=1)
    written = grade_many(grades)
    assert [grade.pk for grade in written] == [grades[1].pk]
    assert Grade.objects.get(pk=grades[0].pk).status == Grade.Status.GRADING
    assert grade_many(grades) == []  # asking again grades nothing twice


@pytest.mark.django_db
def test_a_grade_not_due_yet_is_not_graded_by_the_batch():
    entity = make_entity(evaluation={"method": "none", "gradeAfterHours": 1})
    grades = on_terminal_many([make_run(entity, completed_at=timezone.now())])
    assert grade_many(grades) == []
    assert Grade.objects.get(pk=grades[0].pk).status == Grade.Status.BOOKED
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert [grade.status for grade in grade_many(grades)] == [Grade.Status.GRADED]


@pytest.mark.django_db
def test_where_the_database_returns_no_rows_the_claim_is_read_back_and_the_results_written_all_the_same(monkeypatch):
    monkeypatch.setattr(grading.grade, "returns_rows", lambda connection: False)
    entity = make_entity(evaluation={"method": "none", "metrics": {"cost_usd": {"role": "guard", "floor": 0.01}}})
    runs = [make_run(entity, cost_usd=cost) for cost in ("0.001", "0.5", "0.002")]
    grades = on_terminal_many(runs)
    Grade.objects.filter(pk=grades[0].pk).update(status=Grade.Status.GRADING, attempts=1)
    written = grade_many(grades)
    assert [grade.pk for grade in written] == [runs[1].pk, runs[2].pk]
    stored = {grade.pk: grade for grade in Grade.objects.all()}
    assert stored[runs[0].pk].status == Grade.Status.GRADING
    assert (stored[runs[1].pk].status, stored[runs[1].pk].passed) == (Grade.Status.GRADED, False)
    assert (stored[runs[2].pk].status, stored[runs[2].pk].passed) == (Grade.Status.GRADED, True)
    assert stored[runs[1].pk].failure_category == "below floor: cost_usd"


@pytest.mark.django_db
def test_a_run_reported_in_a_batch_is_stored_as_one_reported_alone(bob):
    entity = make_entity(evaluation={"method": "none", "gradeAfterHours": 1})
    row = {
        "status": "failed",
        "started_at": "2026-04-07T11:59:00+02:00",
        "completed_at": "2026-04-07T09:59:30.250Z",
        "cost_usd": "0.000000000123",
        "tool_failures": 2,
        "input": {"ticket": "refund", "nested": [1, 2.5, None, {"ü": True}]},
        "output": "just text",
        "error": "timeout",
        "trace": [{"tool": "kb__search", "status": "error"}],
    }
    fields = [f.attname for f in Execution._meta.concrete_fields if f.attname not in ("id", "sampling")]
    with time_machine.travel(T0, tick=False):
        alone = report_execution(entity, row, user=bob)
        together = report_many([(entity, row), (entity, {**row, "output": None})], user=bob)
    stored = {run.pk: run for run in Execution.objects.all()}
    assert {f: getattr(stored[together[0].pk], f) for f in fields} == {f: getattr(stored[alone.pk], f) for f in fields}
    assert stored[together[1].pk].output is None
    assert Execution.objects.filter(pk=together[1].pk, output__isnull=True).exists()
