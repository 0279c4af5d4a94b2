"""A dead MCP server comes back before the next cycle, and while it is down the model is not offered its tools."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from singularity.models import Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.fakes.mcp_fixtures import ECHO_SERVER
from tests.singularity.helpers import make_being, make_runtime

pytestmark = pytest.mark.django_db

ECHO = ("echo__echo", {"text": "hi"})


def offered(request) -> set[str]:
    return {tool["function"]["name"] for tool in request.json.get("tools", [])}


def kill_children(catalogue) -> None:
    for pid in catalogue._host.child_pids():
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while catalogue._host.child_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not catalogue._host.child_pids()


@pytest.fixture
def gated_echo(tmp_path: Path, write_mcp_config):
    """An echo server that refuses to start while ``refuse`` exists (to hold it down)."""
    refuse = tmp_path / "refuse"
    wrapper = tmp_path / "gated_echo.py"
    wrapper.write_text(
        "import os, runpy, sys\n"
        f"if os.path.exists({str(refuse)!r}):\n"
        "    sys.exit('refusing to start')\n"
        f"sys.argv[0] = {str(ECHO_SERVER)!r}\n"
        f"runpy.run_path({str(ECHO_SERVER)!r}, run_name='__main__')\n"
    )
    config = write_mcp_config({"echo": {"command": sys.executable, "args": [str(wrapper)]}})
    return config, refuse


def test_a_killed_server_is_restarted_before_the_next_cycle(fake_gateway, settings, tmp_path, gated_echo):
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    config, _refuse = gated_echo
    with build_catalogue(mcp_config_path=config, call_timeout=5, shutdown_grace=2) as catalogue:
        being = make_being()
        runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
        fake_gateway.script(Reply(tool_calls=[ECHO]), Reply(content="done"))
        runtime.run_cycle()
        kill_children(catalogue)

        fake_gateway.script(Reply(tool_calls=[ECHO]), Reply(content="done"))
        runtime.run_cycle()
    assert "echo__echo" in offered(fake_gateway.requests[2])
    finished = Event.objects.filter(being=being, kind="tool_finished").order_by("seq")
    assert [e.data["status"] for e in finished] == ["success", "success"]
    warning = Event.objects.get(being=being, kind="warning")
    assert "server echo was down" in warning.data["message"] and "restarted" in warning.data["message"]


def test_while_a_server_stays_down_its_tools_are_not_offered_and_it_comes_back_after_the_backoff(
    fake_gateway, settings, tmp_path, gated_echo
):
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    settings.SINGULARITY_MCP_RESTART_BACKOFF_SECS = 0.5
    config, refuse = gated_echo
    with build_catalogue(mcp_config_path=config, call_timeout=5, shutdown_grace=2) as catalogue:
        being = make_being()
        runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
        fake_gateway.script(Reply(content="done"))
        runtime.run_cycle()
        assert "echo__echo" in offered(fake_gateway.requests[0])

        refuse.write_text("down")
        kill_children(catalogue)
        fake_gateway.script(Reply(content="done"))
        runtime.run_cycle()  # the restart fails: the cycle runs without echo's tools
        assert "echo__echo" not in offered(fake_gateway.requests[1])
        assert "self__remember" in offered(fake_gateway.requests[1])
        fake_gateway.script(Reply(content="done"))
        runtime.run_cycle()  # within the backoff: not tried again, still not offered
        assert "echo__echo" not in offered(fake_gateway.requests[2])

        refuse.unlink()
        time.sleep(0.6)
        fake_gateway.script(Reply(tool_calls=[ECHO]), Reply(content="done"))
        runtime.run_cycle()
    assert "echo__echo" in offered(fake_gateway.requests[3])
    assert Event.objects.filter(being=being, kind="tool_finished").get().data["status"] == "success"
    notes = [e.data["message"] for e in Event.objects.filter(being=being, kind="warning").order_by("seq")]
    assert "restart failed" in notes[0] and "refusing to start" in notes[0]
    assert "next restart in" in notes[1]
    assert "has been restarted" in notes[2]
