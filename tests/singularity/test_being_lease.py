"""Only the lease holder writes a being: a process that lost its lease writes nothing, not even at shutdown."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from singularity.being import lease
from singularity.being.actions import create_being, finish_stopped, start_on_workers
from singularity.errors import StateError
from singularity.models import Being, Event
from tests.fakes.gateway import Reply
from tests.singularity.helpers import manage_env, spawn

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_a_process_that_lost_its_lease_writes_nothing_and_the_new_holder_carries_on(fake_gateway, tmp_path):
    # Process A waits on its first completion; meanwhile its lease runs out and process B takes the being over.
    counter = itertools.count()
    b_called = threading.Event()
    after_a: list[int] = []

    def answer(request, headers):
        if next(counter) == 0:
            b_called.wait(60)
            return Reply(
                content="A's late answer", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            )
        b_called.set()
        if a.poll() is not None:
            after_a.append(1)
        return Reply(content="B", delay_s=0.02)

    fake_gateway.handler = answer
    env = env_for(fake_gateway, tmp_path, SINGULARITY_CYCLE_INTERVAL_SECS="0.05")
    a = spawn("being", "run", "--name", "ada", env=env)
    wait_for(lambda: len(fake_gateway.requests) >= 1)
    Being.objects.filter(name="ada").update(lease_until=timezone.now() - timedelta(seconds=1))
    b = spawn("being", "run", "--name", "ada", "--resume", env=env)
    try:
        a_out, a_err = a.communicate(timeout=60)
        assert a.returncode == 4, a_err
        assert "lease lost" in a_err
        wait_for(lambda: len(after_a) >= 3 or b.poll() is not None)
        assert b.poll() is None, b.communicate()[1]  # the new holder did not crash
        being = Being.objects.get(name="ada")
        assert being.status == "running" and being.last_error == ""
        assert f":{b.pid}:" in being.lease_owner
    finally:
        if b.poll() is None:
            b.send_signal(signal.SIGINT)
    _, b_err = b.communicate(timeout=60)
    assert b.returncode == 0, b_err

    events = list(Event.objects.filter(being__name="ada").order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    stopped = [e for e in events if e.kind == "stopped"]
    assert len(stopped) == 1 and f":{b.pid}:" in stopped[0].data["by"]
    owners = [e.data["owner"] for e in events if e.kind == "started"]
    assert len(owners) == 2 and f":{a.pid}:" in owners[0] and f":{b.pid}:" in owners[1]
    # A's late completion was never recorded.
    assert not Being.objects.get(name="ada").cycles.filter(final_content="A's late answer").exists()


def test_finish_stopped_by_an_owner_who_lost_the_lease_writes_nothing():
    being = create_being("ada")
    assert lease.acquire(being, "cli:old:1:aaaa")
    Being.objects.filter(pk=being.pk).update(status=Being.Status.RUNNING, lease_owner="cli:new:2:bbbb")
    with pytest.raises(StateError, match="lease"):
        finish_stopped(being, by="cli:old:1:aaaa", owner="cli:old:1:aaaa")
    being.refresh_from_db()
    assert being.status == "running" and being.event_seq == 0
    assert not Event.objects.filter(being=being).exists()


def test_an_unleased_write_is_refused_while_another_process_holds_the_lease():
    being = start_on_workers(create_being("ada"), by="alice")
    assert lease.acquire(being, "worker:h:1:cccc")
    Being.objects.filter(pk=being.pk).update(status=Being.Status.STOPPED)  # a stale status, the lease is live
    with pytest.raises(StateError, match="worker:h:1:cccc"):
        start_on_workers(Being.objects.get(pk=being.pk), by="bob")
    assert Event.objects.filter(being=being).count() == 1  # only alice's start
