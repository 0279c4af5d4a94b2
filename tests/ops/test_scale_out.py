"""Grading scales out over worker processes, and a backlog loses no grade (issue 37).

Real ``celery worker`` processes, each with its own hostname, consume the
grading queue in Redis and grade in the test's Postgres database through a
loopback judge; runs are reported through ``grading.executions.report_many``
as the API does. Postgres and Redis only: on SQLite the workers' writers
serialise on the file's one lock, so "sharing" would measure the lock; the
embedded broker is one host's folders, which is not what scaling out across
hosts runs on.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from grading.booking import LOST, sweep_lost
from grading.models import Entity, Grade
from singularity.celery import app as celery_app
from tests.ops.broker import URL, needs_redis
from tests.ops.workers import (
    TaskEvents,
    grading_workers,
    judged_brain,
    loopback_judge,
    report_runs,
    sync_brain,
    worker_env,
)


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("worker processes sharing the grading need Postgres (SQLite serialises every writer)")


def states(entity: Entity) -> dict[str, int]:
    return dict(Grade.objects.filter(entity=entity).values_list("status").annotate(n=Count("pk")))


def wait_settled(entity: Entity, total: int, timeout: float, every: float = 0.3, sweep: timedelta | None = None):
    """Wait until ``total`` grades of ``entity`` are graded or failed (running the lost-grade sweep with ``sweep`` as
    its grace, when given); return the states."""
    deadline = time.monotonic() + timeout
    while True:
        seen = states(entity)
        if seen.get("graded", 0) + seen.get("failed", 0) >= total:
            return seen
        assert time.monotonic() < deadline, f"not settled within {timeout:.0f} s: {seen}"
        if sweep is not None:
            sweep_lost(grace=sweep)
        time.sleep(every)


@needs_redis
@pytest.mark.django_db(transaction=True)
def test_two_worker_processes_share_the_grading_and_every_grade_lands_once(postgres_only, redis_broker, tmp_path):
    with loopback_judge(delay_s=0.1) as judge:
        env = worker_env(tmp_path / "var", URL, judged_brain(tmp_path), judge.base_url)
        sync_brain(env)
        entity = Entity.objects.get(slug="judged")
        with grading_workers(env, ["alpha", "beta"]) as workers, TaskEvents(celery_app) as events:
            report_runs(entity, 40)
            seen = wait_settled(entity, 40, timeout=120)
            time.sleep(1)  # the last task-succeeded events on their way
            hostnames = {worker.hostname() for worker in workers}
    assert seen == {"graded": 40}
    grades = list(Grade.objects.filter(entity=entity))
    assert all(grade.attempts == 1 for grade in grades)  # claimed once each
    graded_by = events.graded_by()
    assert set(graded_by) == {str(grade.pk) for grade in grades}
    assert all(len(hosts) == 1 for hosts in graded_by.values())  # no grade graded twice
    shares = {host: sum(1 for hosts in graded_by.values() if hosts == [host]) for host in hostnames}
    assert set(shares) == hostnames and all(n > 0 for n in shares.values()), shares


@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_backlog_loses_no_grade_and_a_dead_workers_grade_is_run_again(postgres_only, redis_broker, tmp_path):
    # A message the dead worker had taken comes back to the queue 5 s after it was taken (Redis' visibility timeout).
    with loopback_judge(delay_s=0.05) as judge:
        env = worker_env(
            tmp_path / "var", URL, judged_brain(tmp_path), judge.base_url, CELERY_VISIBILITY_TIMEOUT_SECS="5"
        )
        sync_brain(env)
        entity = Entity.objects.get(slug="judged")
        report_runs(entity, 100)  # the backlog: queued before any worker runs
        assert states(entity) == {"booked": 100}
        with grading_workers(env, ["survivor", "victim"], concurrency=4) as (survivor, victim):
            wait_settled(entity, 25, timeout=120)
            victim.kill()
            killed_at = timezone.now()
            time.sleep(1)  # the survivor's gradings in flight finish; the victim's stay "grading"
            orphans = set(
                Grade.objects.filter(status=Grade.Status.GRADING, started_at__lt=killed_at).values_list("pk", flat=True)
            )
            # The sweep runs every second with a grace of 3 s, far shorter than its 15 minutes: every grade still
            # queued is past it, and none may be failed as lost.
            seen = wait_settled(entity, 100, timeout=180, every=1.0, sweep=timedelta(seconds=3))
    assert seen == {"graded": 100}
    assert not Grade.objects.filter(entity=entity, error=LOST).exists()
    assert orphans, "the victim was grading nothing when it was killed"
    rerun = Grade.objects.filter(pk__in=orphans)
    assert all(grade.status == Grade.Status.GRADED and grade.attempts == 2 for grade in rerun)
