"""``manage.py being`` as a user runs it: real processes, a loopback gateway, exit codes, crash safety."""

from __future__ import annotations

import json
import signal
import time
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.being.actions import create_being, validate_stimulus
from singularity.errors import ConfigError
from singularity.models import Being, Cycle, Event
from tests.fakes.gateway import Reply
from tests.singularity.helpers import manage, manage_env, spawn

pytestmark = pytest.mark.django_db(transaction=True)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def env_for(fake, tmp_path: Path, **extra: str) -> dict[str, str]:
    return manage_env(
        BRAMA_BASE_URL=fake.base_url,
        BRAMA_API_KEY="test-key",
        BRAMA_MAX_RETRIES="0",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
        **extra,
    )


def kinds(name: str) -> list[str]:
    return list(Event.objects.filter(being__name=name).order_by("seq").values_list("kind", flat=True))


def test_once_prints_the_report_and_the_ledger_matches_hand_arithmetic(fake_gateway, tmp_path):
    fake_gateway.script(
        Reply(tool_calls=[("self__remember", {"key": "plan", "value": "sell"})], usage=usage(1200, 300)),
        Reply(content="Cycle done.", usage=usage(1500, 100)),
    )
    env = env_for(
        fake_gateway, tmp_path, BRAMA_INPUT_PRICE_USD_PER_MILLION="3", BRAMA_OUTPUT_PRICE_USD_PER_MILLION="15"
    )
    proc = manage("being", "once", "--name", "ada", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # (1200*3 + 300*15)/1e6 + (1500*3 + 100*15)/1e6 = 0.0081 + 0.006 = 0.0141
    assert report == {
        "cycle": 1,
        "status": "completed",
        "final_content": "Cycle done.",
        "balance_usd": "9.9859",
        "earned_usd": "0.00",
        "net_profit_usd": "-0.0141",
        "total_tokens": 3100,
        "actions": ["self__remember"],
    }
    assert kinds("ada") == [
        "started",
        "cycle_started",
        "model_completed",
        "cost_debited",
        "tool_finished",
        "model_completed",
        "cost_debited",
        "stopped",
    ]
    being = Being.objects.get(name="ada")
    assert being.status == "stopped" and being.remaining == Decimal("9.9859")


def test_an_existing_being_without_resume_is_refused(tmp_path):
    create_being("ada")
    proc = manage("being", "once", "--name", "ada", env=manage_env(SINGULARITY_WORKSPACE=str(tmp_path)))
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "--resume" in proc.stderr


def test_resume_without_a_being_is_refused(tmp_path):
    proc = manage("being", "once", "--name", "ghost", "--resume", env=manage_env(SINGULARITY_WORKSPACE=str(tmp_path)))
    assert proc.returncode == 4
    assert "no being named 'ghost'" in proc.stderr
    assert not Being.objects.filter(name="ghost").exists()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SINGULARITY_STARTING_BALANCE_USD", "-1", "SINGULARITY_STARTING_BALANCE_USD: must not be below 0"),
        ("SINGULARITY_STARTING_BALANCE_USD", "ten", "SINGULARITY_STARTING_BALANCE_USD: expected a decimal number"),
        ("SINGULARITY_MAX_TOOL_ROUNDS", "0", "SINGULARITY_MAX_TOOL_ROUNDS: must be at least 1"),
        ("BRAMA_INPUT_PRICE_USD_PER_MILLION", "-2", "BRAMA_INPUT_PRICE_USD_PER_MILLION: must not be below 0"),
        ("SINGULARITY_MCP_CONFIG", "/nonexistent/mcp.json", "SINGULARITY_MCP_CONFIG: no such file"),
    ],
)
def test_bad_configuration_fails_at_boot_naming_the_variable(tmp_path, variable, value, message):
    proc = manage("being", "once", "--name", "ada", env=manage_env(**{variable: value}))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not Being.objects.exists()


def test_a_stimulus_over_64_kib_is_refused_and_nothing_is_created(tmp_path):
    proc = manage(
        "being",
        "once",
        "--name",
        "ada",
        "--stimulus",
        "x" * (64 * 1024 + 1),
        env=manage_env(SINGULARITY_WORKSPACE=str(tmp_path)),
    )
    assert proc.returncode == 2
    assert "--stimulus: 65537 bytes is over the 65536-byte limit" in proc.stderr
    assert not Being.objects.exists()


def test_a_stimulus_with_nul_is_refused():
    # argv cannot carry NUL, so the API and the command share this check.
    with pytest.raises(ConfigError, match="--stimulus: contains a NUL"):
        validate_stimulus("a\x00b")


def test_a_broken_mcp_config_fails_with_exit_2_naming_the_key(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"finance": {"args": ["x"]}}}))
    proc = manage(
        "being",
        "once",
        "--name",
        "ada",
        env=manage_env(SINGULARITY_MCP_CONFIG=str(config), SINGULARITY_WORKSPACE=str(tmp_path)),
    )
    assert proc.returncode == 2, proc.stderr
    assert "mcpServers.finance" in proc.stderr and str(config) in proc.stderr


def test_an_unreachable_gateway_exits_3_and_debits_nothing(tmp_path):
    env = manage_env(BRAMA_BASE_URL="http://127.0.0.1:9/v1", BRAMA_MAX_RETRIES="0", SINGULARITY_WORKSPACE=str(tmp_path))
    proc = manage("being", "once", "--name", "ada", env=env)
    assert proc.returncode == 3, proc.stderr
    being = Being.objects.get(name="ada")
    assert being.remaining == Decimal(10)
    assert Cycle.objects.get(being=being).status == "failed"
    assert "warning" in kinds("ada") and kinds("ada")[-1] == "stopped"


def test_a_permanent_gateway_error_aborts_the_run_with_exit_3(fake_gateway, tmp_path):
    fake_gateway.script(Reply(status=401, error_message="bad signature"))
    proc = manage("being", "run", "--name", "ada", env=env_for(fake_gateway, tmp_path))
    assert proc.returncode == 3
    assert "401" in proc.stderr and "bad signature" in proc.stderr
    assert Being.objects.get(name="ada").status == "stopped"


def test_a_transient_error_is_journaled_and_the_loop_continues_until_exhausted(fake_gateway, tmp_path):
    fake_gateway.script(
        Reply(status=503, error_message="overloaded"),
        Reply(content="a", usage=usage(1_000_000, 0)),
        Reply(content="b", usage=usage(1_000_000, 0)),
    )
    env = env_for(fake_gateway, tmp_path, BRAMA_INPUT_PRICE_USD_PER_MILLION="5")
    proc = manage("being", "run", "--name", "ada", env=env)
    assert proc.returncode == 0, proc.stderr
    being = Being.objects.get(name="ada")
    assert being.status == "exhausted"
    assert being.remaining == Decimal(0)
    assert [c.status for c in Cycle.objects.filter(being=being).order_by("number")] == [
        "failed",
        "completed",
        "completed",
    ]
    events = kinds("ada")
    assert events.count("warning") == 1 and events[-1] == "stopped"
    assert Event.objects.filter(being=being, kind="stopped").get().data["status"] == "exhausted"


def test_sigint_stops_after_the_current_step_and_journals_stopped(fake_gateway, tmp_path):
    fake_gateway.handler = lambda request, headers: Reply(content="idle", usage=usage(1, 1), delay_s=0.05)
    proc = spawn(
        "being", "run", "--name", "ada", env=env_for(fake_gateway, tmp_path, SINGULARITY_CYCLE_INTERVAL_SECS="0.05")
    )
    deadline = time.monotonic() + 30
    while len(fake_gateway.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    being = Being.objects.get(name="ada")
    assert being.status == "stopped" and being.lease_owner == ""
    assert kinds("ada")[-1] == "stopped"
    assert being.cycle >= 2


def test_a_process_killed_mid_round_loses_at_most_that_round_and_resume_continues(fake_gateway, tmp_path):
    calls = {"n": 0}

    def answer(request, headers):
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(tool_calls=[("self__remember", {"key": "a", "value": "1"})], usage=usage(100, 10))
        if calls["n"] == 2:
            return Reply(content="stuck", usage=usage(100, 10), delay_s=30)  # killed while waiting for this
        return Reply(content="resumed", usage=usage(100, 10))

    fake_gateway.handler = answer
    env = env_for(fake_gateway, tmp_path, BRAMA_INPUT_PRICE_USD_PER_MILLION="1", BRAMA_OUTPUT_PRICE_USD_PER_MILLION="1")
    proc = spawn("being", "run", "--name", "ada", env=env)
    deadline = time.monotonic() + 30
    while calls["n"] < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    being = Being.objects.get(name="ada")
    assert being.cycle == 1
    assert being.remaining == Decimal("9.99989")  # one completion of 110 tokens at 1 $/M
    assert being.memories == {"a": "1"}
    assert kinds("ada").count("cost_debited") == 1

    proc = manage("being", "once", "--name", "ada", "--resume", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cycle"] == 2 and report["final_content"] == "resumed"
    assert report["balance_usd"] == "9.99978"
    being.refresh_from_db()
    assert [c.status for c in Cycle.objects.filter(being=being).order_by("number")] == ["interrupted", "completed"]
    assert kinds("ada").count("cost_debited") == 2


def test_export_writes_the_seed_files(fake_gateway, tmp_path):
    fake_gateway.script(Reply(content="hi", usage=usage(10, 10)))
    env = env_for(fake_gateway, tmp_path, BRAMA_INPUT_PRICE_USD_PER_MILLION="1")
    assert manage("being", "once", "--name", "ada", env=env).returncode == 0
    out = tmp_path / "export"
    proc = manage("being", "export", "--name", "ada", "--dir", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "state.json").read_text())
    assert set(state["budget"]) == {"starting", "remaining", "api_spent", "instance_spent", "total_tokens", "earned"}
    assert state["budget"]["remaining"] == "9.99999"
    assert "net_profit" not in json.dumps(state["budget"])
    lines = (out / "activity.jsonl").read_text().splitlines()
    debits = [line for line in lines if '"cost_debited"' in line]
    assert len(debits) == 1 and json.loads(debits[0])["amount"] == "0.00001"


def test_an_absurd_usage_block_exits_3_debits_nothing_and_records_what_the_call_cost(fake_gateway, tmp_path):
    huge = {"prompt_tokens": 10**30, "completion_tokens": 0, "total_tokens": 10**30}
    fake_gateway.script(Reply(content="expensive", usage=huge))
    proc = manage("being", "once", "--name", "ada", env=env_for(fake_gateway, tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "is absurd: more than 1,000,000,000 tokens in one completion" in proc.stderr
    being = Being.objects.get(name="ada")
    assert being.remaining == Decimal(10) and being.total_tokens == 0
    assert Cycle.objects.get(being=being).status == "failed"
    warning = Event.objects.get(being=being, kind="warning").data
    assert warning["usage"] == huge and warning["elapsed_ns"] > 0 and "instance_usd" in warning
