"""A short lease and a slow gateway (issue 14): a lease that runs out while its holder waits on the model.

Nothing here moves the clock or the lease by hand. The lease is the
shortest the settings allow (10 s) and the loopback model server holds its
first answer for 20 s, so process A's lease really runs out mid-call;
process B then takes the being over. A's late answer is never written, A
exits 4 naming the lost lease, and B carries on with an unbroken journal.
"""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

import pytest
from django.utils import timezone

from singularity.models import Being, Event
from tests.fakes.gateway import Reply
from tests.singularity.helpers import manage_env, spawn

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECS = 10
SLOW_SECS = LEASE_SECS + 10  # B starts and takes the lease well before A hears back
USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_lease_that_runs_out_during_a_slow_model_call_writes_nothing_and_the_taker_carries_on(
    fake_gateway, tmp_path: Path
):
    calls = itertools.count()

    def answer(request, headers):
        if next(calls) == 0:
            return Reply(content="A's late answer", usage=USAGE, delay_s=SLOW_SECS)
        return Reply(content="B", usage=USAGE, delay_s=0.05)

    fake_gateway.handler = answer
    env = manage_env(
        BRAMA_BASE_URL=fake_gateway.base_url,
        BRAMA_API_KEY="test-key",
        BRAMA_MAX_RETRIES="0",
        BRAMA_TIMEOUT_SECS="60",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
        SINGULARITY_LEASE_SECS=str(LEASE_SECS),
        SINGULARITY_CYCLE_INTERVAL_SECS="0.2",
    )
    a = spawn("being", "run", "--name", "ada", env=env)
    b = None
    try:
        wait_for(lambda: len(fake_gateway.requests) >= 1)
        wait_for(lambda: Being.objects.filter(name="ada", lease_until__lt=timezone.now()).exists(), LEASE_SECS + 5)
        assert a.poll() is None  # A is alive, still waiting on the model: only its lease ran out
        b = spawn("being", "run", "--name", "ada", "--resume", env=env)
        _, a_err = a.communicate(timeout=60)
        assert a.returncode == 4, a_err
        assert "lease lost" in a_err
        wait_for(lambda: Being.objects.get(name="ada").cycles.filter(final_content="B").count() >= 2)
        assert b.poll() is None, b.communicate()[1]
    finally:
        for process in (a, b):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
    _, b_err = b.communicate(timeout=60)
    assert b.returncode == 0, b_err
    being = Being.objects.get(name="ada")
    assert not being.cycles.filter(final_content="A's late answer").exists()
    events = list(Event.objects.filter(being=being).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # no gap, no duplicate
    assert [e for e in events if e.kind == "stopped"][0].data["by"].count(f":{b.pid}:") == 1
