"""Running a workflow scenario (and a heartbeat's tick) through the agent loop, against a loopback gateway and real MCP servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from grading.models import Entity, Execution
from grading.runners import run_entity
from singularity.errors import ConfigError
from singularity.tools import ToolCatalogue, build_catalogue
from tests.fakes.gateway import Reply
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db

TASKS = [
    {"id": "research", "prompt": "Find the customer's problem."},
    {"id": "answer", "prompt": "Write the reply."},
]


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


@pytest.fixture(autouse=True)
def prices(settings):
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("3")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("15")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    settings.BRAMA_MODEL = "test-model"


@pytest.fixture
def tools(mcp_config: str) -> Iterator[ToolCatalogue]:
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=5.0, include_builtins=False) as built:
        yield built


def workflow(**fields: Any) -> Entity:
    fields.setdefault("body", "You are the support triage agent.")
    return make_entity("support", **fields)


def user_messages(fake) -> list[str]:
    return [m["content"] for r in fake.requests for m in r.json["messages"] if m["role"] == "user"]


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def test_a_workflow_without_tasks_is_one_conversation_with_the_input(fake_gateway, tools):
    fake_gateway.script(Reply(content="billing", usage=usage(100, 10)))
    execution = run_entity(
        workflow(), input={"ticket": "refund"}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools
    )
    execution.refresh_from_db()
    assert execution.status == "succeeded"
    assert execution.output == {"result": "billing", "tasks": {}}
    request = fake_gateway.requests[0].json
    assert request["model"] == "test-model"
    assert request["messages"][0] == {"role": "system", "content": "You are the support triage agent."}
    assert json.loads(request["messages"][1]["content"].removeprefix("Input:\n")) == {"ticket": "refund"}


def test_the_cost_is_the_exact_sum_of_the_debits_and_no_being_pays_it(fake_gateway, tools):
    fake_gateway.script(
        Reply(tool_calls=[("echo__echo", {"text": "a"})], usage=usage(1_000, 100)),
        Reply(content="done", usage=usage(2_000, 1)),
    )
    execution = run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
    execution.refresh_from_db()
    # 0.003 + 0.0015 + 0.006 + 0.000015
    assert execution.cost_usd == Decimal("0.010515")
    from singularity.models import Being

    assert Being.objects.count() == 0


def test_tasks_run_in_order_each_its_own_conversation(fake_gateway, tools):
    fake_gateway.script(Reply(content="they want a refund"), Reply(content="Dear customer, refunded."))
    entity = workflow(frontmatter={"tasks": TASKS})
    execution = run_entity(
        entity, input={"ticket": "refund"}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools
    )
    execution.refresh_from_db()
    assert execution.output == {
        "result": "Dear customer, refunded.",
        "tasks": {"research": "they want a refund", "answer": "Dear customer, refunded."},
    }
    first, second = (r.json["messages"] for r in fake_gateway.requests)
    assert [m["role"] for m in first] == [m["role"] for m in second] == ["system", "user"]
    assert first[1]["content"].startswith("Find the customer's problem.")
    assert second[1]["content"].startswith("Write the reply.")
    assert "they want a refund" in second[1]["content"]


def test_input_keys_starting_with_an_underscore_never_reach_the_agent(fake_gateway, tools):
    fake_gateway.script(Reply(content="a"), Reply(content="b"))
    entity = workflow(frontmatter={"tasks": TASKS})
    execution = run_entity(
        entity,
        input={"ticket": "refund", "_expected": "billing"},
        source="manual",
        gateway=fake_gateway.gateway(),
        catalogue=tools,
    )
    sent = json.dumps([r.json for r in fake_gateway.requests])
    assert "refund" in sent
    assert "_expected" not in sent and "billing" not in sent
    execution.refresh_from_db()
    assert execution.input == {"ticket": "refund", "_expected": "billing"}


def tool_spans(execution) -> list[dict]:
    """The run's tool spans, in the order they ran."""
    return [span for span in execution.trace if span["kind"] == "tool"]


def tool_row(span: dict) -> tuple[str, str, bool]:
    attributes = span["attributes"]
    return (
        attributes["gen_ai.tool.name"],
        attributes["singularity.tool.status"],
        bool(attributes.get("singularity.dry_run")),
    )


def test_tool_calls_land_in_the_trace_and_failures_are_counted(fake_gateway, tools, tmp_path):
    marker = tmp_path / "marker"
    fake_gateway.script(
        Reply(
            tool_calls=[
                ("echo__echo", {"text": "hi"}),
                ("echo__fail", {}),
                ("echo__write_marker", {"path": str(marker)}),
                ("echo__nope", {}),
            ]
        ),
        Reply(content="done"),
    )
    execution = run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
    execution.refresh_from_db()
    assert execution.tool_failures == 2
    called = tool_spans(execution)
    assert [tool_row(span) for span in called] == [
        ("echo__echo", "success", False),
        ("echo__fail", "failed", False),
        ("echo__write_marker", "success", False),
        ("echo__nope", "failed", False),
    ]
    assert [span["status"] for span in called] == ["ok", "error", "ok", "error"]
    assert called[0]["attributes"]["gen_ai.tool.call.arguments"] == {"text": "hi"}
    assert "hi" in json.dumps(called[0]["attributes"]["gen_ai.tool.call.result"])
    assert "gen_ai.tool.call.result" not in called[1]["attributes"]  # a failed call has its error, not a result
    assert "failed on purpose" in called[1]["statusMessage"]
    assert all(span["startTime"] <= span["endTime"] for span in called)
    # The tool calls nest under the conversation that made them, beside its model calls.
    (conversation,) = [span for span in execution.trace if span["parentSpanId"] is None]
    assert {span["parentSpanId"] for span in execution.trace if span is not conversation} == {conversation["spanId"]}
    assert [span["kind"] for span in execution.trace].count("llm") == 2
    assert lines(marker) == 1


def test_an_indeterminate_tool_outcome_counts_as_a_failure(fake_gateway, mcp_config, tmp_path):
    fake_gateway.script(Reply(tool_calls=[("echo__sleep", {"seconds": 3})]), Reply(content="done"))
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=0.3, include_builtins=False) as slow:
        execution = run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=slow)
    execution.refresh_from_db()
    (called,) = tool_spans(execution)
    assert (called["attributes"]["singularity.tool.status"], called["status"], execution.tool_failures) == (
        "indeterminate",
        "error",
        1,
    )


def test_a_permanent_gateway_error_fails_the_run_with_its_message(fake_gateway, tools):
    fake_gateway.script(
        Reply(tool_calls=[("echo__echo", {"text": "a"})], usage=usage(1_000_000, 0)),
        Reply(status=400, error_message="model not allowed"),
    )
    execution = run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
    execution.refresh_from_db()
    assert execution.status == "failed"
    assert "model not allowed" in execution.error
    # What was spent before the failure is still the run's.
    assert execution.cost_usd == Decimal("3")
    assert [span["attributes"]["gen_ai.tool.name"] for span in tool_spans(execution)] == ["echo__echo"]
    # The failed model call is a span too, with the gateway's error.
    failed = [span for span in execution.trace if span["kind"] == "llm" and span["status"] == "error"]
    assert len(failed) == 1 and "model not allowed" in failed[0]["statusMessage"]
    assert execution.completed_at is not None


def test_the_round_limit_fails_the_run(fake_gateway, tools, settings):
    settings.SINGULARITY_MAX_TOOL_ROUNDS = 2
    fake_gateway.handler = lambda request, headers: Reply(tool_calls=[("echo__echo", {"text": "again"})])
    execution = run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
    execution.refresh_from_db()
    assert execution.status == "failed"
    assert "maximum tool rounds reached (2)" in execution.error
    assert len(tool_spans(execution)) == 2
    (conversation,) = [span for span in execution.trace if span["name"] == "conversation"]
    assert conversation["status"] == "error" and "maximum tool rounds" in conversation["statusMessage"]


def test_a_workflow_is_offered_the_mcp_tools_and_no_self_tools(fake_gateway, mcp_config):
    fake_gateway.script(Reply(content="ok"))
    # No catalogue given: the run builds one from settings, without the being's self tools, and closes it.
    from django.test import override_settings

    with override_settings(SINGULARITY_MCP_CONFIG=mcp_config):
        run_entity(workflow(), input={}, source="manual", gateway=fake_gateway.gateway())
    names = [t["function"]["name"] for t in fake_gateway.requests[0].json["tools"]]
    assert "echo__echo" in names
    assert not [n for n in names if n.startswith("self__")]


# --- a loop-launched run reads live and acts on nothing -------------------------------


def test_under_a_replay_a_write_is_answered_dry_and_a_read_runs_live(fake_gateway, tools, tmp_path):
    written, read = tmp_path / "written", tmp_path / "read"
    read.write_text("x\ny\nz\n", encoding="utf-8")
    fake_gateway.script(
        Reply(
            tool_calls=[
                ("echo__write_marker", {"path": str(written)}),
                ("echo__read_marker", {"path": str(read)}),
            ]
        ),
        Reply(content="done"),
    )
    execution = run_entity(
        workflow(), input={}, source="loop", loop_launched=True, gateway=fake_gateway.gateway(), catalogue=tools
    )
    execution.refresh_from_db()
    assert execution.loop_launched is True
    assert lines(written) == 0
    assert [tool_row(span) for span in tool_spans(execution)] == [
        ("echo__write_marker", "success", True),
        ("echo__read_marker", "success", False),
    ]
    assert tool_spans(execution)[0]["attributes"]["gen_ai.tool.call.arguments"] == {"path": str(written)}
    shown = [json.loads(m["content"]) for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"]
    assert shown[0]["result"] == {"dry_run": True, "status": "success"}
    assert shown[1]["result"] == {"lines": 3}


# --- refusals before anything starts --------------------------------------------------


def test_an_entity_that_failed_to_load_is_not_run(fake_gateway, tools):
    entity = workflow(load_error="frontmatter: not YAML")
    with pytest.raises(ConfigError, match="scenario:support: cannot run"):
        run_entity(entity, input={}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
    assert Execution.objects.count() == 0


def test_a_chat_role_is_not_run_as_an_execution(fake_gateway, tools):
    entity = make_entity("support-bot", kind=Entity.Kind.ROLE)
    with pytest.raises(ConfigError, match="episodes"):
        run_entity(entity, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)


# --- heartbeats -------------------------------------------------------------------------


def test_a_heartbeat_tick_sends_its_body_as_the_prompt_with_no_input(fake_gateway, tools):
    fake_gateway.script(Reply(content="all quiet", usage=usage(10, 2)))
    entity = make_entity("ops", kind=Entity.Kind.HEARTBEAT, body="Check the queues.", schedule="*/5 * * * *")
    execution = run_entity(entity, source="schedule", gateway=fake_gateway.gateway(), catalogue=tools)
    execution.refresh_from_db()
    assert (execution.status, execution.run_kind, execution.source) == ("succeeded", "heartbeat", "schedule")
    assert execution.output == {"result": "all quiet"}
    assert execution.input == {}
    assert fake_gateway.requests[0].json["messages"] == [{"role": "user", "content": "Check the queues."}]
    assert execution.cost_usd == Decimal("0.00006")


def test_a_heartbeat_refuses_an_input(fake_gateway, tools):
    entity = make_entity("ops", kind=Entity.Kind.HEARTBEAT, body="Check.")
    with pytest.raises(ConfigError, match="takes no input"):
        run_entity(entity, input={"x": 1}, source="manual", gateway=fake_gateway.gateway(), catalogue=tools)
