"""``being run`` as its host: a stop asked from the page or the API, and the database failing mid-cycle."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from singularity.being.actions import request_stop
from singularity.models import Being, Cycle, Event
from tests.fakes.gateway import Reply
from tests.singularity.helpers import manage_env, spawn

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def env_for(fake, tmp_path: Path, **extra: str) -> dict[str, str]:
    return manage_env(
        BRAMA_BASE_URL=fake.base_url,
        BRAMA_API_KEY="test-key",
        BRAMA_MAX_RETRIES="0",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
        **extra,
    )


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def statuses(name: str) -> list[str]:
    return list(Cycle.objects.filter(being__name=name).order_by("number").values_list("status", flat=True))


def test_a_stop_asked_mid_cycle_ends_the_cycle_before_the_next_round(fake_gateway, tmp_path):
    fake_gateway.handler = lambda request, headers: Reply(
        tool_calls=[("self__remember", {"key": "k", "value": "v"})], usage=USAGE, delay_s=0.1
    )
    proc = spawn("being", "run", "--name", "ada", env=env_for(fake_gateway, tmp_path))
    try:
        wait_for(lambda: len(fake_gateway.requests) >= 2)
        being = request_stop(Being.objects.get(name="ada"), by="alice")
        assert being.status == "stopping"
        asked_at = len(fake_gateway.requests)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(fake_gateway.requests) <= asked_at + 1  # the round in flight finishes, no other starts
    assert statuses("ada") == ["interrupted"]
    being.refresh_from_db()
    assert (being.status, being.host, being.lease_owner) == ("stopped", "", "")
    assert Event.objects.filter(being=being).order_by("-seq").first().kind == "stopped"


def test_a_stop_asked_between_cycles_ends_the_wait(fake_gateway, tmp_path):
    fake_gateway.handler = lambda request, headers: Reply(content="resting", usage=USAGE)
    env = env_for(fake_gateway, tmp_path, SINGULARITY_CYCLE_INTERVAL_SECS="60")
    proc = spawn("being", "run", "--name", "ada", env=env)
    try:
        wait_for(lambda: statuses("ada") == ["completed"])
        request_stop(Being.objects.get(name="ada"), by="alice")
        assert proc.wait(timeout=30) == 0  # well before the 60 s interval ends
    finally:
        if proc.poll() is None:
            proc.kill()
    assert statuses("ada") == ["completed"] and len(fake_gateway.requests) == 1
    assert Being.objects.get(name="ada").status == "stopped"


class Hiccup:
    """Make the database fail the being's next write for a moment, as a real outage would.

    SQLite: another connection holds the write lock longer than the being waits for it
    ("database is locked"). Postgres: the being's server process is terminated
    ("terminating connection due to administrator command").
    """

    def __init__(self, hold_s: float = 1.5) -> None:
        self.hold_s = hold_s
        self.spared = None
        if connection.vendor == "postgresql":
            connection.ensure_connection()
            self.spared = connection.connection.info.backend_pid  # the test's own connection

    def __call__(self) -> None:
        if connection.vendor == "sqlite":
            locker = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
            locker.execute("BEGIN IMMEDIATE")
            threading.Timer(self.hold_s, lambda: (locker.execute("ROLLBACK"), locker.close())).start()
            return
        import psycopg

        info = connection.settings_dict
        with psycopg.connect(
            host=info["HOST"] or "127.0.0.1",
            port=info["PORT"] or 5432,
            user=info["USER"],
            password=info["PASSWORD"] or None,
            dbname=info["NAME"],
            autocommit=True,
        ) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
                [self.spared],
            )


def test_a_database_hiccup_mid_cycle_is_journaled_as_a_warning_and_the_run_carries_on(fake_gateway, tmp_path):
    hiccup = Hiccup()
    calls = itertools.count(1)

    def answer(request, headers):
        n = next(calls)
        if n == 2:
            hiccup()  # the save that records this completion fails
        return Reply(content=f"cycle reply {n}", usage=USAGE)

    fake_gateway.handler = answer
    env = env_for(fake_gateway, tmp_path, SINGULARITY_CYCLE_INTERVAL_SECS="0.5", SINGULARITY_SQLITE_TIMEOUT_SECS="0.2")
    proc = spawn("being", "run", "--name", "ada", env=env)
    try:
        wait_for(lambda: proc.poll() is not None or (len(statuses("ada")) >= 4 and statuses("ada")[-1] == "completed"))
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert statuses("ada")[:3] == ["completed", "failed", "completed"]
    warning = Event.objects.get(being__name="ada", kind="warning")
    assert warning.cycle == 2 and warning.data["message"].startswith("cycle 2 failed: ")
    assert Being.objects.get(name="ada").status == "stopped"
