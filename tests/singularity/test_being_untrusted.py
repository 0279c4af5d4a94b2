"""Untrusted text and amounts from the model and the tools: stored as what they were, never a crash.

Each test runs ``manage.py being once`` as a real process against the test
database (SQLite or Postgres), a loopback gateway and real MCP servers.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from singularity.models import Being, Cycle, Event
from tests.fakes.gateway import Reply
from tests.fakes.mcp_fixtures import stdio_entry
from tests.singularity.helpers import manage, manage_env

REVENUE_SERVER = Path(__file__).resolve().parent / "revenue_server.py"

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"
SHOWN = "\\u0000"  # the six characters a NUL is stored and shown as


def env_for(fake, tmp_path: Path, **extra: str) -> dict[str, str]:
    return manage_env(
        BRAMA_BASE_URL=fake.base_url,
        BRAMA_API_KEY="test-key",
        BRAMA_MAX_RETRIES="0",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
        **extra,
    )


def once(fake, tmp_path: Path, *args: str, **extra: str):
    return manage("being", "once", "--name", "ada", *args, env=env_for(fake, tmp_path, **extra))


def test_a_nul_in_the_models_reply_is_stored_and_shown_as_an_escape(fake_gateway, tmp_path):
    fake_gateway.script(Reply(content=f"half{NUL}way"))
    proc = once(fake_gateway, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["final_content"] == f"half{SHOWN}way"
    cycle = Cycle.objects.get(being__name="ada")
    assert cycle.status == "completed" and cycle.final_content == f"half{SHOWN}way"
    assert cycle.messages[0]["content"] == f"half{SHOWN}way"


def test_a_lone_surrogate_in_the_models_reply_is_stored_as_an_escape(fake_gateway, tmp_path):
    fake_gateway.script(Reply(content="odd \ud800 one"))
    proc = once(fake_gateway, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert Cycle.objects.get(being__name="ada").final_content == "odd \\ud800 one"


def test_a_nul_in_tool_arguments_reaches_the_tool_as_an_escape(fake_gateway, tmp_path):
    fake_gateway.script(
        Reply(tool_calls=[("self__remember", {"key": f"k{NUL}", "value": f"v{NUL}w"})]),
        Reply(content="done"),
    )
    proc = once(fake_gateway, tmp_path)
    assert proc.returncode == 0, proc.stderr
    being = Being.objects.get(name="ada")
    assert being.memories == {f"k{SHOWN}": f"v{SHOWN}w"}
    assert json.loads(proc.stdout)["actions"] == ["self__remember"]
    stored_call = Cycle.objects.get(being=being).messages[0]["tool_calls"][0]["function"]
    assert json.loads(stored_call["arguments"]) == {"key": f"k{SHOWN}", "value": f"v{SHOWN}w"}


def test_a_nul_in_a_tool_result_is_shown_to_the_model_as_an_escape(fake_gateway, tmp_path):
    workspace = tmp_path / "ws" / "ada"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_bytes(b"a\x00b")
    fake_gateway.script(Reply(tool_calls=[("self__read_file", {"path": "notes.txt"})]), Reply(content="read it"))
    proc = once(fake_gateway, tmp_path)
    assert proc.returncode == 0, proc.stderr
    tool_message = [m for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"][0]
    assert json.loads(tool_message["content"])["result"]["content"] == f"a{SHOWN}b"
    assert Cycle.objects.get(being__name="ada").status == "completed"


@pytest.mark.parametrize("amount", ["1000000000000000000", "1" + "0" * 30, "9223373"])
def test_revenue_beyond_the_ledgers_range_is_refused_and_journaled_as_a_warning(
    fake_gateway, tmp_path, write_mcp_config, amount
):
    config = write_mcp_config({"finance": stdio_entry(REVENUE_SERVER)})
    if amount == "9223373" and connection.vendor != "sqlite":
        pytest.skip("within Postgres' numeric(30, 12); beyond only SQLite's integer column")
    fake_gateway.script(
        Reply(tool_calls=[("finance__report", {"revenue_usd": amount})]),
        Reply(content="rich?"),
    )
    proc = once(fake_gateway, tmp_path, SINGULARITY_MCP_CONFIG=config)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["status"], report["earned_usd"], report["balance_usd"]) == ("completed", "0.00", "10.00")
    being = Being.objects.get(name="ada")
    assert being.earned == 0 and being.remaining == Decimal(10)
    warning = Event.objects.get(being=being, kind="warning")
    assert "beyond the ledger's range" in warning.data["message"] and warning.data["tool"] == "finance__report"
    assert not Event.objects.filter(being=being, kind="revenue_credited").exists()


def test_an_unexpected_error_exits_5_leaves_no_cycle_running_and_resume_goes_on(fake_gateway, tmp_path):
    # A debit no ledger can hold: a billion tokens (the most one completion may report; more is the gateway's
    # error, exit 3) at 10**15 dollars per million is 10**18 USD.
    huge = {"prompt_tokens": 10**9, "completion_tokens": 0, "total_tokens": 10**9}
    fake_gateway.script(
        Reply(content="expensive", usage=huge),
        Reply(content="back", usage={"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}),
    )
    proc = once(fake_gateway, tmp_path, BRAMA_INPUT_PRICE_USD_PER_MILLION="1000000000000000")
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("singularity: ")  # one line, the last
    assert "Traceback" not in proc.stderr
    being = Being.objects.get(name="ada")
    assert being.status == "stopped" and being.remaining == Decimal(10) and being.lease_owner == ""
    cycle = Cycle.objects.get(being=being)
    assert cycle.status == "failed" and cycle.error
    assert Event.objects.filter(being=being, kind="warning").exists()

    proc = once(fake_gateway, tmp_path, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["final_content"] == "back"
    assert [c.status for c in Cycle.objects.filter(being=being).order_by("number")] == ["failed", "completed"]
