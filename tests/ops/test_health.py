"""/healthz answers without touching anything; /readyz names each part, 200 when all hold and 503 naming what fails."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from singularity import pulse
from singularity.queues import QUEUES


@pytest.fixture
def parts_up(settings, tmp_path):
    """A brain checkout, beat's pulse and a live worker on every queue, as the real processes write them."""
    settings.VAR_DIR = tmp_path
    checkout = tmp_path / "brain"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    settings.BRAIN_CHECKOUT = checkout
    pulse.beat("beat")
    for queue in QUEUES:
        pulse.beat(f"worker:{queue}:{queue}@test")
    return settings


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed once the block ends: nothing listens there


def test_healthz_answers_without_a_query(client, db):
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert len(queries) == 0


@pytest.mark.django_db
def test_readyz_is_200_naming_every_part_when_all_hold(client, parts_up):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready" and body["failing"] == []
    assert {name: part["ok"] for name, part in body["checks"].items()} == {
        "database": True,
        "broker": True,
        "brain": True,
        "beat": True,
        "workers": True,
    }


@pytest.mark.django_db
def test_readyz_is_503_naming_the_broker_while_it_is_unreachable(client, parts_up):
    parts_up.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert "broker" in body["failing"] and body["checks"]["broker"]["ok"] is False
    assert body["checks"]["broker"]["detail"].startswith("CELERY_BROKER_URL: ")
    assert body["checks"]["database"]["ok"] is True and body["checks"]["brain"]["ok"] is True


@pytest.mark.django_db
def test_readyz_names_a_queue_without_a_live_worker_and_a_beat_that_stopped(client, parts_up):
    import time

    stale = time.time() - 3600
    pulse.beat("beat", now=stale)
    pulse.beat("worker:grading:grading@test", now=stale)
    body = client.get("/readyz").json()
    assert set(body["failing"]) == {"beat", "workers"}
    assert body["checks"]["workers"]["detail"] == "no live worker on grading"
    assert body["checks"]["beat"]["detail"].startswith("last ticked 3600 s ago")


@pytest.mark.django_db
def test_readyz_names_a_missing_brain_checkout(client, parts_up, tmp_path):
    parts_up.BRAIN_CHECKOUT = tmp_path / "nowhere"
    body = client.get("/readyz").json()
    assert body["failing"] == ["brain"] and "BRAIN_CHECKOUT" in body["checks"]["brain"]["detail"]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
@pytest.mark.django_db
def test_readyz_goes_503_naming_the_broker_while_redis_is_stopped_and_back_to_200_once_it_runs(
    client, parts_up, tmp_path
):
    from tests.evolution.test_broker_outage import Redis, free_port

    redis = Redis(free_port(), tmp_path)
    redis.start()
    try:
        parts_up.CELERY_BROKER_URL = redis.url
        # The workers and beat write their pulses to that Redis (singularity.pulse), as on a real deployment.
        pulse.beat("beat")
        for queue in QUEUES:
            pulse.beat(f"worker:{queue}:{queue}@test")
        assert client.get("/readyz").status_code == 200
        redis.stop()
        stopped = client.get("/readyz")
        assert stopped.status_code == 503
        body = stopped.json()
        assert "broker" in body["failing"] and body["checks"]["broker"]["detail"].startswith("CELERY_BROKER_URL: ")
        redis.start()  # nothing kept on disk: the pulses come back as the processes write them again
        pulse.beat("beat")
        for queue in QUEUES:
            pulse.beat(f"worker:{queue}:{queue}@test")
        assert client.get("/readyz").status_code == 200
    finally:
        redis.stop()
