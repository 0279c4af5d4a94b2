"""A backlog is never failed as lost: a grade merely queued in the broker past the 15-minute grace is left queued;
one whose message the broker no longer holds is sent again (issue 37). Real Redis (db 6), real messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from grading.booking import on_terminal, sweep_lost
from grading.models import Grade
from singularity.celery import app as celery_app
from singularity.queues import depth
from tests.grading.grading_helpers import make_entity, make_run
from tests.ops.broker import needs_redis

NO_JUDGE = {"method": "none", "metrics": {"cost_usd": {"role": "guard", "floor": 1}}}
T0 = datetime(2026, 5, 5, 9, 0, tzinfo=UTC)


@needs_redis
@pytest.mark.django_db
def test_a_grade_merely_queued_past_15_minutes_is_not_failed_and_one_the_broker_lost_is_sent_again(
    redis_broker, django_capture_on_commit_callbacks
):
    entity = make_entity(evaluation=NO_JUDGE)
    with time_machine.travel(T0), django_capture_on_commit_callbacks(execute=True):
        grade = on_terminal(make_run(entity))
    assert depth("grading") == 1  # its job waits in the grading queue: no worker on it yet

    for later in (timedelta(minutes=16), timedelta(hours=30)):
        with time_machine.travel(T0 + later), django_capture_on_commit_callbacks(execute=True):
            assert sweep_lost() == 0
        grade.refresh_from_db()
        assert grade.status == Grade.Status.BOOKED and grade.error == ""
        assert depth("grading") == 1  # left queued: neither failed nor sent twice

    redis_broker.delete("grading")  # the broker lost it (a restart without persistence)
    assert depth("grading") == 0
    with time_machine.travel(T0 + timedelta(minutes=20)), django_capture_on_commit_callbacks(execute=True):
        assert sweep_lost() == 0
    grade.refresh_from_db()
    assert grade.status == Grade.Status.BOOKED
    assert depth("grading") == 1  # sent again


@needs_redis
@pytest.mark.django_db
def test_a_grade_a_worker_has_taken_but_not_finished_counts_as_queued_not_lost(
    redis_broker, django_capture_on_commit_callbacks
):
    entity = make_entity(evaluation=NO_JUDGE)
    with time_machine.travel(T0), django_capture_on_commit_callbacks(execute=True):
        grade = on_terminal(make_run(entity))
    with celery_app.connection_for_read() as conn:
        channel = conn.default_channel
        taken = channel.basic_get("grading", no_ack=False)  # a worker's prefetch: out of the list, not acknowledged
        assert taken is not None
        assert redis_broker.llen("grading") == 0
        assert depth("grading") == 1  # still the broker's: redelivered if that worker dies
        with time_machine.travel(T0 + timedelta(minutes=16)), django_capture_on_commit_callbacks(execute=True):
            assert sweep_lost() == 0
        assert redis_broker.llen("grading") == 0  # not sent a second time
        grade.refresh_from_db()
        assert grade.status == Grade.Status.BOOKED
