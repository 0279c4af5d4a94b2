"""The client: a decorated agent's run reaches the server as a graded run; a slow or absent server costs nothing."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
import singularity_client as sg


@pytest.fixture(autouse=True)
def fresh_client() -> Iterator[None]:
    yield
    sg.shutdown()
    sg._state["dropped"] = 0


@pytest.fixture
def slow_server() -> Iterator[str]:
    """A server that takes 2 s to answer every request."""

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the handler's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(2)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_down_server_neither_blocks_nor_raises_and_the_lost_spans_are_counted():
    sg.configure("http://127.0.0.1:9", token="sg_x", timeout=1, schedule_delay_millis=50)

    @sg.observe(entity="scenario:triage")
    def triage(ticket: str) -> dict:
        with sg.llm("gpt-4o") as call:
            call.usage(input_tokens=1, output_tokens=1)
        return {"label": "billing"}

    started = time.monotonic()
    for _ in range(200):
        assert triage("t") == {"label": "billing"}
    assert time.monotonic() - started < 2.0
    sg.flush(timeout_millis=10_000)
    assert sg.dropped_spans() == 400


def test_a_slow_server_does_not_hold_the_caller_and_a_full_queue_is_counted(slow_server):
    sg.configure(slow_server, token="sg_x", max_queue_size=16, schedule_delay_millis=10, timeout=5)

    @sg.observe(entity="scenario:triage")
    def triage(ticket: str) -> str:
        return "billing"

    started = time.monotonic()
    for _ in range(200):
        triage("t")
    assert time.monotonic() - started < 1.0
    assert sg.dropped_spans() >= 200 - 2 * 16


def test_an_exception_is_raised_on_as_it_was():
    sg.configure("http://127.0.0.1:9", token="sg_x", timeout=1)

    @sg.observe(entity="scenario:triage")
    def broken() -> None:
        raise KeyError("ticket")

    with pytest.raises(KeyError, match="ticket"):
        broken()


def test_unconfigured_the_decorator_leaves_the_function_alone():
    @sg.observe(entity="scenario:triage")
    def triage(ticket: str) -> str:
        return ticket.upper()

    assert triage("t") == "T"


@pytest.mark.django_db(transaction=True)
def test_three_lines_make_a_graded_run_with_its_llm_and_tool_spans(live_server, tmp_path, settings):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from grading import otlp_assemble
    from grading.models import Execution, Grade
    from singularity.models import ApiToken
    from tests.grading.grading_helpers import brain_repo, make_entity

    checkout, commit = brain_repo(
        tmp_path / "brain",
        {
            "features/triage/triage.loop.py": "def measure(run):\n    return [{'id': 'accuracy', 'value': 1.0}]\n",
            "features/triage/triage.scenario.md": "---\n---\n",
        },
    )
    settings.BRAIN_CHECKOUT = checkout.path
    accuracy = {"kind": "computed", "direction": "max", "unit": "share", "role": "objective", "floor": 0.5}
    evaluation = {"method": "none", "sample": {"rate": 1.0, "maxPerDay": 100}, "metrics": {"accuracy": accuracy}}
    make_entity("triage", evaluation=evaluation, commit=commit, loop_module_path="features/triage/triage.loop.py")
    _, key = ApiToken.issue(get_user_model().objects.create_user("agent"), "agent", is_agent=True)

    sg.configure(live_server.url, token=key)

    @sg.observe(entity="scenario:triage")
    def triage(ticket: str) -> dict:
        with sg.llm("gpt-4o", input_messages=[{"role": "user", "content": ticket}]) as call:
            call.usage(input_tokens=120, output_tokens=30, cost_usd="0.0015")
        lookup("ticket-1")
        return {"label": "billing"}

    @sg.observe(kind="tool")
    def lookup(ticket_id: str) -> dict:
        return {"plan": "pro"}

    assert triage("my card was charged twice") == {"label": "billing"}
    assert sg.flush(timeout_millis=10_000)
    assert sg.dropped_spans() == 0
    otlp_assemble.sweep(now=timezone.now() + timedelta(minutes=1))

    (run,) = Execution.objects.all()
    assert (str(run.entity), run.status) == ("scenario:triage", "succeeded")
    assert run.input == {"ticket": "my card was charged twice"}
    assert run.output == {"label": "billing"}
    assert [(span["kind"], span["name"]) for span in run.trace] == [
        ("llm", "chat gpt-4o"),
        ("tool", "execute_tool lookup"),
    ]
    assert run.trace[1]["attributes"]["gen_ai.tool.call.result"] == {"plan": "pro"}
    assert run.cost_usd == Decimal("0.0015")
    assert Grade.objects.get(execution=run).status == Grade.Status.GRADED
