"""The shared agent round loop, and the tool catalogue's dry-run answer under a loop-launched run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.agent import COMPLETED, ROUND_LIMIT, AgentHooks, AgentLoop, Prices
from singularity.errors import UpstreamError
from singularity.models import Being
from singularity.tools import ToolCatalogue, build_catalogue
from singularity.tools.catalogue import DRY_RUN_RESULT
from tests.fakes.gateway import Reply

FREE = Prices(Decimal(0), Decimal(0), Decimal(0))
#: $3 per million prompt tokens, $15 per million completion tokens.
PRICED = Prices(Decimal(3), Decimal(15), Decimal(0))


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Recorder(AgentHooks):
    """Hooks that write down every step in order."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.steps: list[str] = []
        self.stop_at = stop_at

    def before_round(self, round_number: int) -> str | None:
        self.steps.append(f"round {round_number}")
        return "stopped" if round_number == self.stop_at else None

    def after_completion(self, completion: Any, debit: Any, round_number: int) -> None:
        self.steps.append(f"debit {debit.total}")

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        self.steps.append(f"tool {call.name}:{outcome.status}")

    def gateway_failed(self, error: UpstreamError, round_number: int) -> None:
        self.steps.append(f"failed {error.permanent}")


@pytest.fixture
def mcp_catalogue(mcp_config: str) -> Iterator[ToolCatalogue]:
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=5.0, include_builtins=False) as built:
        yield built


def make_loop(gateway: Any, catalogue: ToolCatalogue, **kwargs: Any) -> AgentLoop:
    kwargs.setdefault("prices", FREE)
    kwargs.setdefault("max_rounds", 4)
    kwargs.setdefault("model", "m1")
    dry_run = kwargs.pop("dry_run", False)
    return AgentLoop(
        gateway=gateway,
        tools=catalogue.openai_tools(),
        call_tool=lambda name, arguments: catalogue.call(None, name, arguments, dry_run=dry_run),
        **kwargs,
    )


# --- the loop --------------------------------------------------------------------


def test_a_plain_reply_ends_the_loop_with_it(fake_gateway, mcp_catalogue):
    fake_gateway.script(Reply(content="the answer", usage=usage(10, 2)))
    result = make_loop(fake_gateway.gateway(), mcp_catalogue).run([{"role": "user", "content": "q"}])
    assert (result.status, result.final_content, result.rounds) == (COMPLETED, "the answer", 1)


def test_every_completion_is_debited_exactly_and_summed(fake_gateway, mcp_catalogue):
    fake_gateway.script(
        Reply(tool_calls=[("echo__echo", {"text": "a"})], usage=usage(1_000, 100)),
        Reply(content="done", usage=usage(2_000, 1)),
    )
    hooks = Recorder()
    result = make_loop(fake_gateway.gateway(), mcp_catalogue, prices=PRICED, hooks=hooks).run([])
    # 1000 × 3 / 1e6 + 100 × 15 / 1e6 = 0.0045 ; 2000 × 3 / 1e6 + 1 × 15 / 1e6 = 0.006015
    assert result.cost == Decimal("0.010515")
    assert hooks.steps == [
        "round 1",
        "debit 0.004500000000",
        "tool echo__echo:success",
        "round 2",
        "debit 0.006015000000",
    ]


def test_tools_run_in_order_and_their_outcomes_reach_the_next_round(fake_gateway, mcp_catalogue):
    fake_gateway.script(
        Reply(tool_calls=[("echo__echo", {"text": "one"}), ("echo__fail", {}), ("echo__echo", {"text": "two"})]),
        Reply(content="done"),
    )
    conversation: list[dict[str, Any]] = []
    result = make_loop(fake_gateway.gateway(), mcp_catalogue).run([{"role": "user", "content": "go"}], conversation)
    assert [(run.call.name, run.outcome.status) for run in result.tool_runs] == [
        ("echo__echo", "success"),
        ("echo__fail", "failed"),
        ("echo__echo", "success"),
    ]
    second = fake_gateway.requests[1].json["messages"]
    assert second[0] == {"role": "user", "content": "go"}
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert [json.loads(m["content"])["status"] for m in tool_messages] == ["success", "failed", "success"]
    assert [m["role"] for m in conversation] == ["assistant", "tool", "tool", "tool", "assistant"]


def test_the_model_is_offered_the_full_catalogue_every_round(fake_gateway, mcp_catalogue):
    fake_gateway.script(Reply(tool_calls=[("echo__echo", {"text": "a"})]), Reply(content="done"))
    make_loop(fake_gateway.gateway(), mcp_catalogue).run([])
    offered = [[t["function"]["name"] for t in r.json["tools"]] for r in fake_gateway.requests]
    assert offered[0] == offered[1] == [spec.name for spec in mcp_catalogue.specs()]


def test_the_system_message_and_model_are_read_again_before_every_round(fake_gateway, mcp_catalogue):
    fake_gateway.script(Reply(tool_calls=[("echo__echo", {"text": "a"})]), Reply(content="done"))
    state = {"system": 0, "model": 0}

    def system() -> dict[str, Any]:
        state["system"] += 1
        return {"role": "system", "content": f"prompt {state['system']}"}

    def model() -> str:
        state["model"] += 1
        return f"model-{state['model']}"

    make_loop(fake_gateway.gateway(), mcp_catalogue, system=system, model=model).run([])
    assert [r.json["messages"][0]["content"] for r in fake_gateway.requests] == ["prompt 1", "prompt 2"]
    assert [r.json["model"] for r in fake_gateway.requests] == ["model-1", "model-2"]


def test_the_round_limit_ends_the_loop_with_tools_still_coming(fake_gateway, mcp_catalogue):
    fake_gateway.handler = lambda request, headers: Reply(tool_calls=[("echo__echo", {"text": "again"})])
    result = make_loop(fake_gateway.gateway(), mcp_catalogue, max_rounds=3).run([])
    assert (result.status, result.rounds, len(result.tool_runs)) == (ROUND_LIMIT, 3, 3)
    assert len(fake_gateway.requests) == 3


def test_a_hook_can_end_the_loop_before_a_round_without_calling_the_model(fake_gateway, mcp_catalogue):
    fake_gateway.handler = lambda request, headers: Reply(tool_calls=[("echo__echo", {"text": "again"})])
    hooks = Recorder(stop_at=2)
    result = make_loop(fake_gateway.gateway(), mcp_catalogue, hooks=hooks).run([])
    assert result.status == "stopped"
    assert len(fake_gateway.requests) == 1


def test_a_gateway_error_is_reported_to_the_hooks_and_raised(fake_gateway, mcp_catalogue):
    fake_gateway.script(Reply(status=400, error_message="bad model"))
    hooks = Recorder()
    with pytest.raises(UpstreamError, match="bad model"):
        make_loop(fake_gateway.gateway(), mcp_catalogue, hooks=hooks).run([])
    assert hooks.steps == ["round 1", "failed True"]


# --- the catalogue under a loop-launched run --------------------------------------


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def test_a_workflow_catalogue_holds_the_mcp_tools_only(mcp_catalogue):
    assert not [spec.name for spec in mcp_catalogue.specs() if spec.name.startswith("self__")]


def test_an_mcp_tool_without_a_read_only_annotation_runs_dry_under_a_replay(mcp_catalogue, tmp_path):
    marker = tmp_path / "marker"
    outcome = mcp_catalogue.call(None, "echo__write_marker", {"path": str(marker)}, dry_run=True)
    assert (outcome.status, outcome.dry_run, outcome.raw, outcome.result) == (
        "success",
        True,
        DRY_RUN_RESULT,
        {"dry_run": True, "status": "success"},
    )
    assert lines(marker) == 0


def test_a_read_only_annotated_mcp_tool_runs_live_under_a_replay(mcp_catalogue, tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("one\ntwo\n", encoding="utf-8")
    outcome = mcp_catalogue.call(None, "echo__read_marker", {"path": str(marker)}, dry_run=True)
    assert (outcome.status, outcome.dry_run, outcome.raw) == ("success", False, {"lines": 2})


def test_outside_a_replay_the_write_runs(mcp_catalogue, tmp_path):
    marker = tmp_path / "marker"
    outcome = mcp_catalogue.call(None, "echo__write_marker", {"path": str(marker)})
    assert (outcome.dry_run, lines(marker)) == (False, 1)


def test_a_call_refused_in_production_is_refused_the_same_under_a_replay(mcp_catalogue):
    assert mcp_catalogue.call(None, "echo__nope", {}, dry_run=True).error == "unknown_tool: echo__nope"
    refused = mcp_catalogue.call(None, "echo__write_marker", "[1]", dry_run=True)
    assert (refused.status, refused.dry_run) == ("failed", False)


@pytest.fixture
def being(db: None, settings: Any, tmp_path: Path) -> Being:
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    return Being.objects.create(
        name="alpha",
        starting=Decimal(10),
        remaining=Decimal(10),
        model="m",
        system_prompt="p",
        memories={"k": "kept"},
    )


WRITES = [
    ("self__remember", {"key": "k2", "value": "v"}),
    ("self__forget", {"key": "k"}),
    ("self__set_prompt", {"prompt": "new"}),
    ("self__add_rule", {"rule": "r"}),
    ("self__add_learning", {"learning": "l"}),
    ("self__switch_model", {"model": "other"}),
    ("self__write_file", {"path": "f.txt", "content": "x"}),
    ("self__spawn_child", {"name": "kid", "prompt": "p"}),
]


@pytest.mark.parametrize(("name", "arguments"), WRITES)
def test_the_beings_writing_self_tools_run_dry_under_a_replay(being, tmp_path, name, arguments):
    catalogue = ToolCatalogue()
    outcome = catalogue.call(being, name, arguments, dry_run=True)
    assert (outcome.status, outcome.dry_run, outcome.raw) == ("success", True, DRY_RUN_RESULT)
    assert (being.memories, being.system_prompt, being.rules, being.learnings, being.model) == (
        {"k": "kept"},
        "p",
        [],
        [],
        "m",
    )
    assert not (tmp_path / "workspace" / "alpha" / "f.txt").exists()
    assert Being.objects.count() == 1


def test_the_beings_reads_run_live_under_a_replay(being, tmp_path):
    catalogue = ToolCatalogue()
    (tmp_path / "workspace" / "alpha").mkdir(parents=True)
    (tmp_path / "workspace" / "alpha" / "notes.txt").write_text("hello", encoding="utf-8")
    assert catalogue.call(being, "self__recall", {"key": "k"}, dry_run=True).raw == {"key": "k", "value": "kept"}
    read = catalogue.call(being, "self__read_file", {"path": "notes.txt"}, dry_run=True)
    assert (read.dry_run, read.raw["content"]) == (False, "hello")
    listed = catalogue.call(being, "self__list_files", {}, dry_run=True)
    assert [entry["name"] for entry in listed.raw["entries"]] == ["notes.txt"]


def test_a_dry_run_still_refuses_bad_arguments_to_a_self_tool(being):
    outcome = ToolCatalogue().call(being, "self__remember", {"key": "k"}, dry_run=True)
    assert (outcome.status, outcome.error) == ("failed", "invalid arguments: value: required")
