"""Running a pipeline scenario: its module imported from the brain at the entity's commit, run(ctx, input)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from grading.models import Entity
from grading.runners import run_entity
from singularity.tools import ToolCatalogue, build_catalogue
from tests.fakes.gateway import Reply
from tests.grading.runs_helpers import Brain, make_entity

pytestmark = pytest.mark.django_db

SCENARIO = "features/score/score.scenario.md"
PIPELINE = "features/score/score.pipeline.py"


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


VERSION_ONE = code(
    """
    def run(ctx, input):
        return {"version": 1, "seen": sorted(input)}
    """
)


@pytest.fixture
def brain(tmp_path: Path) -> Brain:
    return Brain(tmp_path, {SCENARIO: "---\nname: score\n---\nScore it.\n", PIPELINE: VERSION_ONE})


def pipeline(brain: Brain, commit: str | None = None, **fields: Any) -> Entity:
    fields.setdefault("pipeline_path", PIPELINE)
    return make_entity("score", kind=Entity.Kind.PIPELINE, path=SCENARIO, commit=commit or brain.first, **fields)


def test_the_pipeline_runs_the_code_of_the_entitys_commit_not_a_later_one(brain):
    entity = pipeline(brain)
    later = brain.commit({PIPELINE: "def run(ctx, input):\n    return {'version': 2}\n"})
    execution = run_entity(entity, input={"a": 1}, source="manual", checkout=brain.checkout)
    execution.refresh_from_db()
    assert (execution.status, execution.output) == ("succeeded", {"version": 1, "seen": ["a"]})
    entity.commit = later
    entity.save()
    again = run_entity(entity, input={}, source="manual", checkout=brain.checkout)
    assert again.output == {"version": 2}
    assert (again.commit, execution.commit) == (later, brain.first)


def test_the_context_carries_the_run_ref_the_replay_mark_the_entity_and_its_params(brain):
    brain_commit = brain.commit(
        {
            PIPELINE: code(
                """
                def run(ctx, input):
                    ctx.log("starting")
                    return {"run_ref": ctx.run_ref, "loop_launched": ctx.loop_launched,
                            "entity": ctx.entity, "params": ctx.params, "logs": ctx.logs}
                """
            )
        }
    )
    entity = pipeline(brain, brain_commit, definition_hash="e" * 64, frontmatter={"params": {"threshold": 0.7}})
    execution = run_entity(entity, input={}, source="loop", loop_launched=True, checkout=brain.checkout)
    execution.refresh_from_db()
    assert execution.output == {
        "run_ref": {"runKind": "pipeline", "runId": str(execution.pk), "definitionHash": "e" * 64},
        "loop_launched": True,
        "entity": "score",
        "params": {"threshold": 0.7},
        "logs": ["starting"],
    }
    (log,) = execution.trace
    assert (log["kind"], log["name"], log["attributes"]["singularity.log"]) == ("other", "log", "starting")


def test_params_are_empty_when_the_scenario_declares_none_and_the_hash_is_null_when_unknown(brain):
    brain_commit = brain.commit(
        {PIPELINE: "def run(ctx, input):\n    return {'params': ctx.params, 'ref': ctx.run_ref}\n"}
    )
    execution = run_entity(pipeline(brain, brain_commit, definition_hash=""), source="manual", checkout=brain.checkout)
    assert execution.output["params"] == {}
    assert execution.output["ref"]["definitionHash"] is None


def test_the_pipeline_never_sees_the_label_keys(brain):
    execution = run_entity(
        pipeline(brain), input={"text": "hi", "_label": "greeting"}, source="manual", checkout=brain.checkout
    )
    assert execution.output["seen"] == ["text"]


def test_an_exception_in_run_fails_the_execution_with_the_error_and_where_it_was_raised(brain):
    brain_commit = brain.commit(
        {
            PIPELINE: code(
                """
                def helper(value):
                    raise ValueError(f"cannot score {value}")

                def run(ctx, input):
                    return helper(input["x"])
                """
            )
        }
    )
    execution = run_entity(pipeline(brain, brain_commit), input={"x": 3}, source="manual", checkout=brain.checkout)
    execution.refresh_from_db()
    assert execution.status == "failed"
    assert execution.error.splitlines() == [
        "ValueError: cannot score 3",
        f"  at {PIPELINE}:5 in run",
        f"  at {PIPELINE}:2 in helper",
    ]
    assert execution.output is None


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("def run(ctx, input):\n    return [1]\n", "returned list, expected a dict"),
        ("def run(ctx, input):\n    return {'x': object()}\n", "not JSON"),
        ("RUN = 1\n", "has no module-level run(ctx, input)"),
        ("def run(ctx, input)\n", "import failed: SyntaxError"),
    ],
)
def test_a_broken_pipeline_fails_the_execution_naming_why(brain, source, error):
    brain_commit = brain.commit({PIPELINE: source})
    execution = run_entity(pipeline(brain, brain_commit), source="manual", checkout=brain.checkout)
    assert execution.status == "failed"
    assert error in execution.error
    assert PIPELINE in execution.error


def test_a_pipeline_missing_at_its_commit_fails_the_execution(brain):
    execution = run_entity(
        pipeline(brain, pipeline_path="features/score/gone.pipeline.py"), source="manual", checkout=brain.checkout
    )
    assert execution.status == "failed"
    assert "gone.pipeline.py: not found at commit" in execution.error


# --- the helpers: agents and tools, with the run's cost and the replay rule ------------------


@pytest.fixture
def tools(mcp_config: str) -> Iterator[ToolCatalogue]:
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=5.0, include_builtins=False) as built:
        yield built


AGENT_AND_TOOLS = code(
    """
    def run(ctx, input):
        answer = ctx.run_agent("Summarise.", {"text": input["text"], "_label": "x"}, instructions="Be brief.")
        written = ctx.call_tool("echo__write_marker", {"path": input["marker"]})
        counted = ctx.call_tool("echo__read_marker", {"path": input["marker"]})
        failed = ""
        try:
            ctx.call_tool("echo__fail", {})
        except Exception as exc:
            failed = str(exc)
        return {"answer": answer, "written": written, "counted": counted, "failed": failed}
    """
)


def test_run_agent_and_call_tool_add_their_cost_and_calls_to_the_run(brain, fake_gateway, tools, tmp_path, settings):
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("1")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("2")
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    fake_gateway.script(Reply(content="short", usage=usage))
    marker = tmp_path / "marker"
    execution = run_entity(
        pipeline(brain, brain.commit({PIPELINE: AGENT_AND_TOOLS})),
        input={"text": "long text", "marker": str(marker)},
        source="manual",
        gateway=fake_gateway.gateway(),
        catalogue=tools,
        checkout=brain.checkout,
    )
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    assert execution.output["answer"] == "short"
    assert execution.output["written"] == {"lines": 1}
    assert execution.output["counted"] == {"lines": 1}
    assert "echo__fail: failed" in execution.output["failed"]
    assert execution.cost_usd == Decimal("0.002")
    assert execution.tool_failures == 1
    called = [span for span in execution.trace if span["kind"] == "tool"]
    assert [span["attributes"]["gen_ai.tool.name"] for span in called] == [
        "echo__write_marker",
        "echo__read_marker",
        "echo__fail",
    ]
    messages = fake_gateway.requests[0].json["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert "long text" in messages[1]["content"] and "_label" not in messages[1]["content"]


def test_under_a_replay_call_tool_answers_writes_dry_and_reads_live(brain, fake_gateway, tools, tmp_path):
    fake_gateway.script(Reply(content="short"))
    marker = tmp_path / "marker"
    marker.write_text("earlier\n", encoding="utf-8")
    execution = run_entity(
        pipeline(brain, brain.commit({PIPELINE: AGENT_AND_TOOLS})),
        input={"text": "t", "marker": str(marker)},
        source="loop",
        loop_launched=True,
        gateway=fake_gateway.gateway(),
        catalogue=tools,
        checkout=brain.checkout,
    )
    assert execution.status == "succeeded", execution.error
    assert execution.output["written"] == {"dry_run": True, "status": "success"}
    assert execution.output["counted"] == {"lines": 1}
    assert marker.read_text(encoding="utf-8") == "earlier\n"
    # echo__fail is not annotated read-only either: under a replay it is answered dry, not run.
    assert execution.output["failed"] == ""
    called = [span for span in execution.trace if span["kind"] == "tool"]
    assert [bool(span["attributes"].get("singularity.dry_run")) for span in called] == [True, False, True]


def test_a_pipeline_that_calls_no_agent_starts_no_tool_servers(brain, settings):
    settings.SINGULARITY_MCP_CONFIG = "/nonexistent/mcp.json"
    execution = run_entity(pipeline(brain), input={}, source="manual", checkout=brain.checkout)
    assert execution.status == "succeeded"
