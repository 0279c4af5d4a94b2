"""An Accept answered while the broker is down does not wedge the entity (issue 14): a real worker, a real Redis.

A Redis of the test's own (another port: the shared one is never stopped)
carries the loop's messages to a real Celery worker. The broker is stopped,
a person accepts the proposal — the Accept stands, the apply's message is
lost — and the broker is started again, empty. The loop's next tick (sent
through the broker like beat's) finds the apply still due in the database
and hands it to the worker, which opens the pull request: the cycle moves on
to its merge wait. Runs only where ``redis-server`` is installed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from evolution.loop import machine
from evolution.models import Cycle, Round
from hitl.actions import answer_card
from singularity.celery import app as celery_app
from tests.evolution.forge_helpers import DIGEST_PATH, edited_digest, forge_brain

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Redis:
    """A redis-server of this test's own, stopped and started again on the same port (nothing kept on disk)."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server did not listen on {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def broker(tmp_path) -> Iterator[Redis]:
    redis = Redis(free_port(), tmp_path)
    redis.start()
    saved = (celery_app.conf.broker_url, celery_app.conf.broker_transport_options)
    celery_app.conf.broker_url = redis.url
    celery_app.conf.broker_transport_options = {}
    _forget_connections()
    try:
        yield redis
    finally:
        redis.stop()
        celery_app.conf.broker_url, celery_app.conf.broker_transport_options = saved
        _forget_connections()


def _forget_connections() -> None:
    """Drop the app's pooled broker connections so the next publish connects to the broker configured now.

    kombu keeps producer pools in a process-wide registry keyed by the connection: they are reset too, or a
    later test (even an eager one, which acquires a producer) meets "Acquire on closed pool".
    """
    from kombu import pools

    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
        celery_app._pool = None
    celery_app.amqp._producer_pool = None
    pools.reset()


def proposed(tmp_path, settings) -> Round:
    fb = forge_brain(tmp_path, settings)
    cycle = Cycle.objects.create(
        entity=fb.digest, key=f"test:{uuid.uuid4()}", origin=Cycle.Origin.REQUEST, phase=Cycle.Phase.ANALYSING
    )
    rnd = Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.PROPOSED,
        author="agent:test",
        summary="Say the digest's length out loud",
        hypothesis="A stated length keeps the digest short.",
        files=[{"path": DIGEST_PATH, "content": edited_digest()}],
    )
    return machine.ask_decide(rnd, now=timezone.now())


def wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_an_accept_while_the_broker_is_down_is_applied_once_the_broker_returns(tmp_path, settings, broker, alice):
    from celery.contrib.testing.worker import start_worker

    from evolution import tasks

    settings.LOOP_STEP_RESEND_AFTER_SECS = 0.5
    rnd = proposed(tmp_path, settings)
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        broker.stop()
        result = answer_card(rnd.card_id, user=alice, is_agent=False, choice="accept", via="dashboard")
        assert result.ok, result.detail  # the person's Accept stands though its message is lost
        rnd.refresh_from_db()
        cycle = Cycle.objects.get(pk=rnd.cycle_id)
        assert rnd.status == Round.Status.ACCEPTED and cycle.phase == Cycle.Phase.APPLYING
        assert rnd.apply_claimed_at is None  # no worker ever heard of it

        broker.start()  # empty: whatever was queued is gone
        time.sleep(0.6)
        tasks.tick.delay()  # the loop's clock, as beat sends it
        assert wait_for(lambda: Round.objects.get(pk=rnd.pk).status == Round.Status.APPLIED), "the apply never ran"
    rnd.refresh_from_db()
    cycle = Cycle.objects.get(pk=rnd.cycle_id)
    assert rnd.pr_number and rnd.decided_by == alice.username
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and not cycle.status
