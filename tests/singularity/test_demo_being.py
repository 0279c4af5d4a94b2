"""The demo being plays a plausible being: it checks the demo shop's finance server, earns sometimes, remembers a few
meaningful things, and stays on its model."""

from __future__ import annotations

import json
import random
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.demo_model import PLAN, PLAN_WITHOUT_FINANCE, demo_policy
from singularity.demo_servers import FINANCE_SERVER, demo_mcp_servers, wire_demo_mcp, write_demo_mcp_config
from singularity.demo_servers.finance import sales
from singularity.models import Being, Event
from singularity.money import money_str
from singularity.tools import build_catalogue
from singularity.tools.builtin import BUILTINS
from singularity.tools.mcp_config import load_mcp_config
from tests.fakes.gateway import FakeGateway
from tests.singularity.helpers import make_being, make_runtime

BUILTIN_TOOLS = [
    {"type": "function", "function": {"name": b.name, "description": b.description, "parameters": b.parameters}}
    for b in BUILTINS
]
CHECK_TOOL = {
    "type": "function",
    "function": {"name": "finance__check_sales", "parameters": {"type": "object", "properties": {}}},
}


def framing(cycle: int, earned: str = "0.00") -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Begin autonomous cycle {cycle}. Balance: 9.99 USD. Earned: {earned} USD. Net profit: 0 USD. "
        "Current model: demo-model. Recent actions: none.\nA plain response without tool calls ends only this cycle.",
    }


def system(memories: dict[str, str] | None = None) -> dict[str, str]:
    text = "You are an autonomous being."
    if memories:
        text += "\n\nYour memories:\n" + json.dumps(memories, sort_keys=True)
    return {"role": "system", "content": text}


def ask(messages: list[dict], tools: list[dict]):
    return demo_policy({"model": "demo-model", "messages": messages, "tools": tools}, {})


def answered(messages: list[dict], reply, result: object) -> list[dict]:
    """The conversation after ``reply``'s one tool call returned ``result``."""
    (name, arguments) = reply.tool_calls[0]
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return messages + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"status": "success", "result": result})},
    ]


# --- the shop ---------------------------------------------------------------------


def test_the_shop_sometimes_sells_and_says_so_in_revenue_usd() -> None:
    results = [sales(random.Random(seed)) for seed in range(200)]
    sold = [r for r in results if r["orders"]]
    quiet = [r for r in results if not r["orders"]]
    assert 40 < len(sold) < 110  # about a third of the checks
    assert all("revenue_usd" not in r for r in quiet)
    for result in sold:
        assert Decimal(result["revenue_usd"]) == Decimal(result["unit_price_usd"]) * result["orders"] > 0
        assert result["simulated"] is True


def test_the_demo_config_runs_the_finance_server_with_this_interpreter(tmp_path: Path) -> None:
    path = write_demo_mcp_config(tmp_path / "var")
    (server,) = load_mcp_config(path)
    assert (server.name, server.transport, server.command) == ("finance", "stdio", sys.executable)
    assert server.args == (str(FINANCE_SERVER),)


def test_make_run_points_the_demo_at_the_shop_unless_a_config_is_set(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert wire_demo_mcp(env, tmp_path) is True
    assert [s.name for s in load_mcp_config(env["SINGULARITY_MCP_CONFIG"])] == ["finance"]
    mine = {"SINGULARITY_MCP_CONFIG": "/etc/my-mcp.json"}
    assert wire_demo_mcp(mine, tmp_path) is False
    assert mine == {"SINGULARITY_MCP_CONFIG": "/etc/my-mcp.json"}


@pytest.fixture
def shop_config(write_mcp_config):
    """An MCP config running the shipped finance server with repeatable draws."""
    return write_mcp_config(demo_mcp_servers(env={"DEMO_FINANCE_SEED": "7"}))


def test_the_finance_server_is_a_real_mcp_process(shop_config, settings, tmp_path) -> None:
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    with build_catalogue(mcp_config_path=shop_config, call_timeout=10, shutdown_grace=2) as catalogue:
        assert "finance__check_sales" in [tool["function"]["name"] for tool in catalogue.openai_tools()]
        outcomes = [catalogue.call(None, "finance__check_sales", {}) for _ in range(12)]
    assert {o.status for o in outcomes} == {"success"}
    expected = random.Random("7")
    assert [o.raw for o in outcomes] == [sales(expected) for _ in range(12)]


# --- the demo model playing the being ------------------------------------------------


def test_a_cycle_starts_by_checking_sales() -> None:
    reply = ask([system(), framing(3)], BUILTIN_TOOLS + [CHECK_TOOL])
    assert reply.tool_calls == [("finance__check_sales", {})]


def test_after_a_sale_it_remembers_the_sale_with_its_total() -> None:
    messages = [system({"plan": PLAN}), framing(12, earned="0.016")]
    first = ask(messages, BUILTIN_TOOLS + [CHECK_TOOL])
    sale = {"orders": 2, "item": "sticker sheet", "revenue_usd": "0.008"}
    second = ask(answered(messages, first, sale), BUILTIN_TOOLS + [CHECK_TOOL])
    assert second.tool_calls == [
        (
            "self__remember",
            {"key": "last_sale", "value": "cycle 12: 2 × sticker sheet for $0.008 (earned $0.024 in all)"},
        )
    ]
    third = ask(answered(answered(messages, first, sale), second, {"ok": True}), BUILTIN_TOOLS + [CHECK_TOOL])
    assert third.tool_calls == []
    assert third.content == "Cycle 12: sold 2 × sticker sheet for $0.008. Ending this cycle."


def test_without_a_sale_it_ends_the_cycle_at_once_once_its_plan_is_kept() -> None:
    messages = [system({"plan": PLAN}), framing(4)]
    first = ask(messages, BUILTIN_TOOLS + [CHECK_TOOL])
    second = ask(answered(messages, first, {"orders": 0, "note": "no sales"}), BUILTIN_TOOLS + [CHECK_TOOL])
    assert second.tool_calls == []
    assert second.content == "Cycle 4: no sales since the last check. Ending this cycle."


def test_it_writes_its_plan_down_once() -> None:
    messages = [system(), framing(1)]
    first = ask(messages, BUILTIN_TOOLS + [CHECK_TOOL])
    second = ask(answered(messages, first, {"orders": 0}), BUILTIN_TOOLS + [CHECK_TOOL])
    assert second.tool_calls == [("self__remember", {"key": "plan", "value": PLAN})]


def test_without_finance_tools_it_says_there_is_nothing_to_earn() -> None:
    first = ask([system(), framing(1)], BUILTIN_TOOLS)
    assert first.tool_calls == [("self__remember", {"key": "plan", "value": PLAN_WITHOUT_FINANCE})]
    later = ask([system({"plan": PLAN_WITHOUT_FINANCE}), framing(2)], BUILTIN_TOOLS)
    assert later.tool_calls == []
    assert "no finance tools are configured" in (later.content or "")


def test_a_failed_check_ends_the_cycle_saying_so() -> None:
    messages = [system({"plan": PLAN}), framing(5)]
    first = ask(messages, BUILTIN_TOOLS + [CHECK_TOOL])
    failed = answered(messages, first, None)
    failed[-1]["content"] = json.dumps({"status": "indeterminate", "result": None, "error": "deadline passed"})
    reply = ask(failed, BUILTIN_TOOLS + [CHECK_TOOL])
    assert reply.content == "Cycle 5: finance__check_sales failed (deadline passed); I will check again next cycle."


def test_outside_a_cycle_it_never_picks_a_tool_that_rewrites_the_mind() -> None:
    chosen = {
        ask([{"role": "user", "content": f"note {n}"}], BUILTIN_TOOLS + [CHECK_TOOL]).tool_calls[0][0]
        for n in range(60)
    }
    assert chosen and chosen <= {
        "self__remember",
        "self__recall",
        "self__list_files",
        "self__read_file",
        "self__write_file",
    }


# --- end to end: the runtime, the demo model and the real shop -----------------------


@pytest.mark.django_db
def test_the_demo_being_earns_sometimes_remembers_little_and_keeps_its_model(
    fake_gateway: FakeGateway, shop_config, settings, tmp_path
) -> None:
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    fake_gateway.handler = demo_policy
    being = make_being("demo", starting="10", model="demo-model")
    with build_catalogue(mcp_config_path=shop_config, call_timeout=10, shutdown_grace=2) as catalogue:
        runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
        reports = [runtime.run_cycle() for _ in range(8)]
    being.refresh_from_db()
    assert {r.status for r in reports} == {"completed"}
    assert being.model == "demo-model"
    assert set(being.memories) <= {"plan", "last_sale"} and being.memories["plan"] == PLAN
    assert "demo-note" not in json.dumps(being.memories) + being.system_prompt
    credits = Event.objects.filter(being=being, kind="revenue_credited")
    draws = random.Random("7")
    expected = [sales(draws) for _ in range(8)]
    sold = [Decimal(r["revenue_usd"]) for r in expected if r["orders"]]
    assert 0 < len(sold) < 8  # sometimes, not always
    assert [Decimal(e.data["amount"]) for e in credits.order_by("seq")] == sold
    assert {e.data["source"] for e in credits} == {"finance__check_sales"}
    assert being.earned == sum(sold)
    assert being.memories["last_sale"].endswith(f"(earned ${money_str(being.earned)} in all)")
    assert Being.objects.get(pk=being.pk).status == "running"
