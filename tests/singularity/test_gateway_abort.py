"""Gateway.abort cuts a call in flight (R7.22): the loopback server is slow, the call is abandoned at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from singularity.demo_model import ChatCompletionsServer, Reply
from singularity.gateway import Gateway, GatewayError


@pytest.fixture
def slow() -> Any:
    asked: list[float] = []

    def answer(request: dict[str, Any], headers: dict[str, str]) -> Reply:
        asked.append(time.monotonic())
        return Reply(content="{}", delay_s=20)

    with ChatCompletionsServer(answer) as server:
        server.asked = asked
        yield server


def call_in_a_thread(gateway: Gateway) -> dict[str, Any]:
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["completion"] = gateway.complete(model="m", messages=[{"role": "user", "content": "x"}], tools=[])
        except GatewayError as exc:
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    outcome["thread"] = threading.Thread(target=call, daemon=True)
    outcome["thread"].start()
    return outcome


def test_abort_cuts_the_call_in_flight_and_the_sdk_retries_nothing(slow) -> None:
    gateway = Gateway(slow.base_url, "", timeout=60, max_retries=2)
    outcome = call_in_a_thread(gateway)
    while not slow.asked:
        time.sleep(0.01)

    aborted = time.monotonic()
    gateway.abort()
    outcome["thread"].join(timeout=10)

    assert isinstance(outcome.get("error"), GatewayError), outcome
    assert "abandoned" in str(outcome["error"])  # the SDK's retries met the refusal, not the server
    # The socket was cut at once; what follows is the SDK's back-off before its (refused) retries, never the 20 s.
    assert outcome["at"] - aborted < 5
    assert len(slow.asked) == 1
    gateway.close()
