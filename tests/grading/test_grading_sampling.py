"""Sampling: the rate by a hash of the run id, the per-entity daily ceiling, the ceiling unattended entities owe."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import time_machine

from grading.booking import book_exempt, on_terminal, register_exemption, unregister_exemption
from grading.models import Execution, Grade, SampleDay
from grading.sampling import booked_on, calendar_day, in_rate, take_slot
from tests.concurrency import at_once, each_at_once
from tests.grading.grading_helpers import make_entity, make_run

Sampling = Execution.Sampling


def test_the_rate_verdict_is_the_same_every_time_it_is_asked():
    ids = [uuid.uuid4() for _ in range(200)]
    first = [in_rate(run_id, 0.3) for run_id in ids]
    assert [in_rate(run_id, 0.3) for run_id in ids] == first
    assert [in_rate(str(run_id), 0.3) for run_id in ids] == first


def test_the_rate_verdict_is_sha256_of_the_id_below_rate_times_two_to_the_64():
    import hashlib

    share = int.from_bytes(hashlib.sha256(b"run-7").digest()[:8], "big") / 2**64
    assert in_rate("run-7", share + 0.001) is True
    assert in_rate("run-7", share - 0.001) is False


def test_the_share_graded_over_ten_thousand_ids_is_close_to_the_rate():
    ids = [uuid.UUID(int=n * 7919 + 13) for n in range(10_000)]
    for rate in (0.1, 0.2, 0.5):
        share = sum(in_rate(run_id, rate) for run_id in ids) / len(ids)
        assert abs(share - rate) < 0.015, (rate, share)


def test_rate_one_grades_everything_and_zero_nothing():
    ids = [uuid.uuid4() for _ in range(100)]
    assert all(in_rate(run_id, 1) for run_id in ids)
    assert not any(in_rate(run_id, 0) for run_id in ids)


@pytest.mark.django_db
def test_a_run_outside_the_rate_is_passed_by_and_holds_no_slot():
    entity = make_entity(evaluation={"sample": {"rate": 0.5, "maxPerDay": 10}})
    outside = next(run for run in (make_run(entity) for _ in range(50)) if not in_rate(run.pk, 0.5))
    assert on_terminal(outside) is None
    outside.refresh_from_db()
    assert outside.sampling == Sampling.SKIPPED_RATE
    assert not Grade.objects.filter(execution=outside).exists()


@pytest.mark.django_db
def test_max_per_day_bounds_each_entity_on_its_own():
    chatty = make_entity("chatty", evaluation={"sample": {"maxPerDay": 2}})
    quiet = make_entity("quiet", evaluation={"sample": {"maxPerDay": 2}})
    verdicts = []
    for _ in range(5):
        run = make_run(chatty)
        on_terminal(run)
        verdicts.append(run.sampling)
    assert verdicts == [Sampling.SAMPLED] * 2 + [Sampling.SKIPPED_CAP] * 3
    assert Grade.objects.filter(entity=chatty).count() == 2

    others = [make_run(quiet) for _ in range(3)]
    for run in others:
        on_terminal(run)
    assert [run.sampling for run in others] == [Sampling.SAMPLED, Sampling.SAMPLED, Sampling.SKIPPED_CAP]


@pytest.mark.django_db
def test_the_ceiling_counts_a_calendar_day_in_the_configured_time_zone(settings):
    settings.TIME_ZONE = "Asia/Tokyo"
    entity = make_entity(evaluation={"sample": {"maxPerDay": 1}})
    # 23:30 and 23:45 in Tokyo, then 00:10 the next Tokyo day — the same UTC day throughout.
    with time_machine.travel(datetime(2025, 3, 1, 14, 30, tzinfo=UTC), tick=False):
        first = make_run(entity)
        on_terminal(first)
    with time_machine.travel(datetime(2025, 3, 1, 14, 45, tzinfo=UTC), tick=False):
        second = make_run(entity)
        on_terminal(second)
    with time_machine.travel(datetime(2025, 3, 1, 15, 10, tzinfo=UTC), tick=False):
        third = make_run(entity)
        on_terminal(third)
        assert calendar_day().isoformat() == "2025-03-02"
    assert (first.sampling, second.sampling, third.sampling) == (
        Sampling.SAMPLED,
        Sampling.SKIPPED_CAP,
        Sampling.SAMPLED,
    )
    assert first.grade.day.isoformat() == "2025-03-01"
    assert third.grade.day.isoformat() == "2025-03-02"


@pytest.mark.django_db
def test_an_attended_scenario_needs_no_ceiling():
    entity = make_entity(evaluation={"sample": {"rate": 1}})
    run = make_run(entity)
    assert on_terminal(run) is not None
    assert run.sampling == Sampling.SAMPLED


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "schedule"), [("workflow", "0 3 * * *"), ("heartbeat", "*/5 * * * *"), ("role", "")])
def test_an_unattended_entity_without_a_ceiling_anywhere_is_not_graded(kind, schedule):
    entity = make_entity("watcher", kind=kind, schedule=schedule, evaluation={"sample": {"rate": 1}})
    assert entity.unattended
    run = make_run(entity)
    assert on_terminal(run) is None
    run.refresh_from_db()
    assert run.sampling == Sampling.SKIPPED_NO_CEILING
    assert run.status == Execution.Status.SUCCEEDED  # it ran; only the grading is refused
    assert not Grade.objects.exists()


@pytest.mark.django_db
def test_a_ceiling_from_the_manifest_covers_an_unattended_entity():
    manifest = {"evaluation": {"sample": {"maxPerDay": 2}}}
    entity = make_entity("tick", kind="heartbeat", schedule="* * * * *", manifest=manifest)
    runs = [make_run(entity) for _ in range(3)]
    for run in runs:
        on_terminal(run)
    assert [run.sampling for run in runs] == [Sampling.SAMPLED, Sampling.SAMPLED, Sampling.SKIPPED_CAP]
    assert entity.provenance["evaluation.sample.maxPerDay"] == "manifest"


@pytest.mark.django_db
def test_method_none_owes_no_ceiling():
    entity = make_entity(
        "tick",
        kind="heartbeat",
        schedule="* * * * *",
        evaluation={"method": "none", "metrics": {"cost_usd": {"role": "guard", "floor": 1}}},
    )
    run = make_run(entity)
    assert on_terminal(run) is not None
    assert run.sampling == Sampling.SAMPLED


@pytest.mark.django_db
def test_nothing_is_graded_when_evaluation_is_off():
    entity = make_entity(evaluation={"enabled": False})
    assert not entity.evaluation_enabled
    run = make_run(entity)
    assert on_terminal(run) is None
    assert run.sampling == Sampling.OFF
    assert not Grade.objects.exists()


@pytest.mark.django_db
def test_a_loop_replay_is_left_to_its_cycle_and_takes_no_slot():
    entity = make_entity(evaluation={"sample": {"maxPerDay": 1}})
    replay = make_run(entity, loop_launched=True)
    assert on_terminal(replay) is None
    assert replay.sampling == Sampling.LOOP_LAUNCHED
    assert booked_on(entity, calendar_day()) == 0


@pytest.mark.django_db
def test_an_exempt_booking_is_graded_past_the_ceiling_and_holds_no_slot():
    entity = make_entity(evaluation={"sample": {"maxPerDay": 1, "rate": 1}, "gradeAfterHours": 72})
    on_terminal(make_run(entity))
    replay = make_run(entity, loop_launched=True)
    on_terminal(replay)

    grade = book_exempt(replay, "check:c1")
    assert grade.reason == "exempt:check:c1"
    assert grade.holds_slot is False
    assert grade.due_at <= grade.booked_at  # a replay is never delayed by gradeAfterHours
    replay.refresh_from_db()
    assert replay.sampling == Sampling.EXEMPT
    assert booked_on(entity, calendar_day()) == 1
    assert book_exempt(replay, "check:c1").pk == grade.pk  # idempotent


@pytest.mark.django_db
def test_a_run_a_watch_needs_is_booked_exempt_at_its_terminal_past_the_ceiling():
    entity = make_entity("tick", kind="heartbeat", schedule="* * * * *", evaluation={"sample": {"maxPerDay": 1}})
    on_terminal(make_run(entity))

    def watching(execution: Execution) -> str | None:
        return "watch:c9" if execution.entity_id == entity.pk else None

    register_exemption(watching)
    try:
        tick = make_run(entity)
        grade = on_terminal(tick)
    finally:
        unregister_exemption(watching)
    assert grade is not None and grade.reason == "exempt:watch:c9" and not grade.holds_slot
    assert tick.sampling == Sampling.EXEMPT
    after = make_run(entity)
    assert on_terminal(after) is None and after.sampling == Sampling.SKIPPED_CAP


@pytest.mark.django_db
def test_asking_twice_books_once():
    entity = make_entity(evaluation={"sample": {"maxPerDay": 5}})
    run = make_run(entity)
    first = on_terminal(run)
    again = on_terminal(run)
    assert first is not None and again is not None and first.pk == again.pk
    assert booked_on(entity, calendar_day()) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_bookings_never_exceed_the_ceiling():
    entity = make_entity(evaluation={"sample": {"maxPerDay": 3}})
    day = calendar_day()
    results = at_once(lambda: take_slot(entity, day, 3), 12)
    assert sum(results) == 3
    assert SampleDay.objects.get(entity=entity, day=day).booked == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_terminals_book_at_most_the_ceiling():
    # Delayed, so nothing is enqueued: this test is about the slots.
    entity = make_entity(evaluation={"sample": {"maxPerDay": 2}, "gradeAfterHours": 1})
    runs = [make_run(entity) for _ in range(8)]
    each_at_once([lambda run=run: on_terminal(run) for run in runs])
    assert Grade.objects.filter(entity=entity).count() == 2
    assert Execution.objects.filter(entity=entity, sampling=Sampling.SKIPPED_CAP).count() == 6
