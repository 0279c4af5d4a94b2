"""Beings living under Celery: real workers, one cycle at a time per being, the database deciding."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from singularity.being.actions import create_being, request_stop, start_on_workers
from singularity.being.worker import run_worker_cycle, wake_due_beings
from singularity.celery import app as celery_app
from singularity.models import Being, Cycle, Event
from tests.concurrency import at_once
from tests.fakes.gateway import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gateway_settings(settings, fake_gateway, tmp_path):
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_API_KEY = "test-key"
    settings.BRAMA_MAX_RETRIES = 0
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    settings.SINGULARITY_MCP_CONFIG = ""
    return settings


def test_wake_claims_each_due_being_once():
    being = start_on_workers(create_being("ada"), by="alice")
    assert wake_due_beings() == [being.pk]
    assert wake_due_beings() == []
    Being.objects.filter(pk=being.pk).update(next_cycle_at=timezone.now() - timedelta(seconds=1))
    assert wake_due_beings() == [being.pk]


def test_a_worker_cycle_runs_and_schedules_the_next_one(gateway_settings, fake_gateway):
    gateway_settings.SINGULARITY_CYCLE_INTERVAL_SECS = 30
    fake_gateway.script(Reply(content="alive"))
    being = start_on_workers(create_being("ada"), by="alice")
    assert run_worker_cycle(being.pk) is True
    being.refresh_from_db()
    assert being.cycle == 1 and being.status == "running" and being.lease_owner == ""
    assert being.next_cycle_at > timezone.now() + timedelta(seconds=20)
    assert Cycle.objects.get(being=being).final_content == "alive"


def test_two_workers_racing_run_one_cycle(gateway_settings, fake_gateway):
    fake_gateway.handler = lambda request, headers: Reply(content="slow", delay_s=0.5)
    being = start_on_workers(create_being("ada"), by="alice")
    results = at_once(lambda: run_worker_cycle(being.pk), timeout=30)
    assert sorted(results) == [False, True]
    assert len(fake_gateway.requests) == 1
    assert Cycle.objects.filter(being=being).count() == 1


def test_stop_during_a_worker_cycle_finishes_as_stopped(gateway_settings, fake_gateway):
    started = threading.Event()

    def answer(request, headers):
        started.set()
        return Reply(tool_calls=[("self__remember", {"key": "k", "value": "v"})], delay_s=0.3)

    fake_gateway.handler = answer
    being = start_on_workers(create_being("ada"), by="alice")
    thread = threading.Thread(target=lambda: (run_worker_cycle(being.pk), connection.close()))
    thread.start()
    assert started.wait(10)
    request_stop(Being.objects.get(pk=being.pk), by="alice")
    assert Being.objects.get(pk=being.pk).status == "stopping"
    thread.join(timeout=30)
    being.refresh_from_db()
    assert being.status == "stopped" and being.host == ""
    assert Cycle.objects.get(being=being).status == "interrupted"
    last = Event.objects.filter(being=being).order_by("-seq").first()
    assert last.kind == "stopped" and last.data["by"].startswith("worker:")


def test_stop_when_idle_stops_at_once():
    being = start_on_workers(create_being("ada"), by="alice")
    request_stop(being, by="bob")
    assert being.status == "stopped"
    assert Event.objects.filter(being=being).order_by("-seq").first().data == {"status": "stopped", "by": "bob"}


def test_beat_wakes_beings_on_a_schedule_with_an_expiry():
    entry = settings.CELERY_BEAT_SCHEDULE["wake-beings"]
    assert entry["task"] == "singularity.tasks.wake_beings"
    assert entry["options"]["expires"] > 0


def test_a_real_celery_worker_runs_a_being_cycle(gateway_settings, fake_gateway):
    """A worker consuming from the configured broker (file system here, Redis in CI's second run).

    The task goes to a queue of its own, so messages other tests left on the
    default queue are neither consumed here nor in the way.
    """
    from celery.contrib.testing.worker import start_worker

    from singularity.tasks import run_being_cycle

    queue = f"test-worker-{uuid.uuid4().hex[:8]}"
    fake_gateway.script(Reply(content="from a worker"))
    being = start_on_workers(create_being("ada"), by="alice")
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10, queues=[queue]):
        run_being_cycle.apply_async(args=[being.pk], queue=queue)
        deadline = time.monotonic() + 30
        while not Cycle.objects.filter(being=being, status="completed").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert Cycle.objects.get(being=being).final_content == "from a worker"
