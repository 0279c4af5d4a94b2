"""The proposer: the agent through a real loopback gateway, a proposer pipeline imported from the brain, their answers."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import pytest

from evolution.loop.brief import Brief
from evolution.loop.pipelines import refusal
from evolution.loop.proposer import ProposalFailed, propose
from evolution.models import Cycle, Round
from grading.models import Entity, Execution
from tests.evolution.loop_helpers import looped
from tests.fakes.gateway import Reply
from tests.grading.grading_helpers import brain_repo, make_entity

pytestmark = pytest.mark.django_db

PATH = "features/triage/triage.scenario.md"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
DATA = {
    "entity": {"id": "triage", "path": PATH},
    "definition": {"path": PATH, "content": "---\nname: Triage\n---\nOld rules.\n"},
    "runs": [{"id": "r1", "bad": True, "input": {"text": "I was overcharged", "_expected": "billing"}}],
    "window": {"ranked": [{"runId": "r1", "bad": True}]},
    "lessons": [{"id": 7, "rejection": {"kind": "human"}, "hypothesis": "Shorter rules"}],
    "instructions": {"brain": ["Plain words."], "entity": ["Billing first."]},
}


@pytest.fixture
def agent(fake_gateway, settings):
    """The fake gateway as the engine's, priced so an analysis costs something."""
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.BRAMA_MODEL = "engine-model"
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("2")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("10")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    return fake_gateway


def brief(prompt: str = "Propose a change to scenario triage.") -> Brief:
    return Brief(
        documents={"runs.json": "[]"},
        prompt=prompt,
        data=json.loads(json.dumps(DATA)),
        evidence_run_ids=["r1"],
        recalled=[7],
        tokens=10,
    )


def cycle_and_round(entity: Entity) -> tuple[Cycle, Round]:
    cycle = Cycle.objects.create(entity=entity, key=f"test:{uuid.uuid4()}", origin=Cycle.Origin.REQUEST)
    return cycle, Round.objects.create(cycle=cycle, number=1)


def answer(**overrides: Any) -> Reply:
    body = {
        "summary": "Add 'overcharged' to the billing rule.",
        "hypothesis": "Overcharge tickets fell through to general.",
        "files": [{"path": PATH, "content": "---\nname: Triage\n---\nNew rules.\n"}],
        "citedLessons": [7],
    }
    body.update(overrides)
    return Reply(content=json.dumps(body), usage=USAGE)


# --- The agent ------------------------------------------------------------------------------------


def test_the_agent_answers_whole_files_priced_exactly(agent):
    agent.script(answer())
    cycle, rnd = cycle_and_round(looped())
    proposal = propose(cycle, rnd, brief())
    assert proposal is not None
    assert proposal.summary == "Add 'overcharged' to the billing rule."
    assert proposal.files == [{"path": PATH, "content": "---\nname: Triage\n---\nNew rules.\n"}]
    assert proposal.cited_lessons == [7]
    assert proposal.author == "agent:engine-model"
    # 1,000 prompt tokens at $2/M and 200 completion tokens at $10/M.
    assert proposal.cost_usd == Decimal("0.004") and isinstance(proposal.cost_usd, Decimal)
    request = agent.requests[0].json
    assert request["response_format"] == {"type": "json_object"}
    assert request["model"] == "engine-model"
    assert request["messages"][0]["role"] == "system" and "proposer" in request["messages"][0]["content"]
    assert request["messages"][1]["role"] == "user"
    assert request["messages"][1]["content"].startswith("Propose a change to scenario triage.\n\n## Your tools\n")
    # The brief says which tools the proposer has, and it is offered exactly those: read-only ones.
    offered = [tool["function"]["name"] for tool in request["tools"]]
    assert offered == ["file_list", "file_read", "db_schema", "db_query", "loop_history"]
    assert all(f"`{name}`" in request["messages"][1]["content"] for name in offered)


def test_the_agent_dispatches_under_the_entitys_model_ref(agent):
    agent.script(answer())
    cycle, rnd = cycle_and_round(looped(loop={"proposer": {"modelRef": "smart"}}))
    proposal = propose(cycle, rnd, brief())
    assert agent.requests[0].json["model"] == "smart"
    assert proposal is not None and proposal.author == "agent:smart"


def test_an_answer_in_a_fenced_block_is_read(agent):
    agent.script(Reply(content="```json\n" + answer().content + "\n```", usage=USAGE))
    cycle, rnd = cycle_and_round(looped())
    assert propose(cycle, rnd, brief()).files[0]["path"] == PATH


def test_an_answer_that_is_not_json_fails_the_round_and_keeps_what_it_cost(agent):
    agent.script(Reply(content="I would add the word overcharged.", usage=USAGE))
    cycle, rnd = cycle_and_round(looped())
    with pytest.raises(ProposalFailed, match="not JSON") as failed:
        propose(cycle, rnd, brief())
    assert failed.value.cost_usd == Decimal("0.004")
    assert failed.value.author == "agent:engine-model"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"files": [{"path": "../outside.md", "content": "x"}]}, r"files\[0\]\.path '\.\./outside\.md' climbs out"),
        ({"files": [{"path": "features/a/../../b.md", "content": "x"}]}, "climbs out"),
        ({"files": [{"path": "/etc/passwd", "content": "x"}]}, "is absolute"),
        ({"files": [{"path": "features/*/x.md", "content": "x"}]}, "is a glob"),
        (
            {"files": [{"path": PATH, "content": "a"}, {"path": PATH, "content": "b"}]},
            r"files\[1\]\.path 'features/triage/triage\.scenario\.md' appears twice",
        ),
        ({"files": [{"path": PATH}]}, r"files\[0\]: expected \{path, content\}"),
        ({"files": [{"path": PATH, "content": 3}]}, "the whole new text, or null"),
        ({"summary": ""}, "summary: required"),
        ({"citedLessons": ["seven"]}, "citedLessons: expected a list of lesson ids"),
        ({"files": "everything"}, "files: expected a list"),
        ({"plan": "x"}, "unknown key 'plan'"),
    ],
)
def test_a_broken_answer_fails_naming_what_is_wrong(agent, override, message):
    agent.script(answer(**override))
    cycle, rnd = cycle_and_round(looped())
    with pytest.raises(ProposalFailed, match=message):
        propose(cycle, rnd, brief())


def test_an_answer_that_is_not_an_object_fails(agent):
    agent.script(Reply(content="[1, 2]", usage=USAGE))
    cycle, rnd = cycle_and_round(looped())
    with pytest.raises(ProposalFailed, match="answered list, not an object"):
        propose(cycle, rnd, brief())


def test_a_file_set_to_null_deletes_it(agent):
    agent.script(answer(files=[{"path": "features/triage/old-notes.md", "content": None}]))
    cycle, rnd = cycle_and_round(looped())
    assert propose(cycle, rnd, brief()).files == [{"path": "features/triage/old-notes.md", "content": None}]


def test_the_agent_declines_with_no_files_and_its_reason(agent):
    agent.script(answer(files=[], hypothesis="", summary="The idea would lower the accuracy floor: declined."))
    cycle, rnd = cycle_and_round(looped())
    proposal = propose(cycle, rnd, brief())
    assert proposal is not None and proposal.declined
    assert proposal.summary == "The idea would lower the accuracy floor: declined."


def test_a_gateway_failure_fails_the_round(agent):
    agent.script(Reply(status=500, error_message="upstream exploded"))
    cycle, rnd = cycle_and_round(looped())
    with pytest.raises(ProposalFailed, match="the gateway failed"):
        propose(cycle, rnd, brief())


def test_the_brains_proposer_role_replaces_the_engines(agent, tmp_path):
    checkout, commit = brain_repo(
        tmp_path / "brain",
        {"constitution/Agents/system/loop/role-proposer.md": "---\nmodel: role-model\n---\nYou write small diffs.\n"},
    )
    agent.script(answer())
    cycle, rnd = cycle_and_round(looped(commit=commit))
    proposal = propose(cycle, rnd, brief(), checkout=checkout)
    request = agent.requests[0].json
    assert request["messages"][0]["content"] == "You write small diffs."
    assert request["model"] == "role-model" and proposal.author == "agent:role-model"


# --- A proposer pipeline ----------------------------------------------------------------------------

WRITER = """
def run(ctx, brief):
    worst = next(r for r in brief["window"]["ranked"] if r["bad"])
    turned_down = [l["id"] for l in brief["lessons"] if (l.get("rejection") or {}).get("kind") == "human"]
    return {
        "summary": f"Fix {worst['runId']} (loop_launched={ctx.loop_launched})",
        "hypothesis": "; ".join(brief["instructions"]["brain"] + brief["instructions"]["entity"]),
        "files": [{"path": brief["definition"]["path"], "content": "new"}],
        "citedLessons": turned_down,
    }
"""


def pipeline_brain(tmp_path, code: str) -> tuple[Any, Entity]:
    """A brain serving ``writer.pipeline.py`` and its pipeline scenario row."""
    checkout, commit = brain_repo(
        tmp_path / "brain",
        {
            "features/writer/writer.scenario.md": "---\nname: Writer\n---\nWrites changes.\n",
            "features/writer/writer.pipeline.py": code,
        },
    )
    writer = make_entity(
        "writer",
        kind="pipeline",
        evaluation={"enabled": False},
        commit=commit,
        pipeline_path="features/writer/writer.pipeline.py",
    )
    return checkout, writer


def test_a_proposer_pipeline_answers_from_the_brief_as_a_loop_launched_run_of_its_own(tmp_path):
    checkout, writer = pipeline_brain(tmp_path, WRITER)
    subject = looped(loop={"proposer": {"pipeline": "writer"}})
    cycle, rnd = cycle_and_round(subject)
    proposal = propose(cycle, rnd, brief(), checkout=checkout)
    assert proposal is not None
    assert proposal.summary == "Fix r1 (loop_launched=True)"
    assert proposal.hypothesis == "Plain words.; Billing first."
    assert proposal.files == [{"path": PATH, "content": "new"}]
    assert proposal.cited_lessons == [7]
    assert proposal.author == "pipeline:writer"
    assert proposal.cost_usd == Decimal(0)  # its spend is its own, on its run
    execution = Execution.objects.get(entity=writer)
    assert execution.loop_launched and execution.source == Execution.Source.LOOP
    assert execution.status == Execution.Status.SUCCEEDED
    assert execution.input == DATA and execution.output["summary"] == proposal.summary
    assert not Execution.objects.filter(entity=subject).exists()


def test_a_pipeline_answering_none_has_nothing_to_propose(tmp_path):
    checkout, writer = pipeline_brain(tmp_path, "def run(ctx, brief):\n    return None\n")
    cycle, rnd = cycle_and_round(looped(loop={"proposer": {"pipeline": "writer"}}))
    assert propose(cycle, rnd, brief(), checkout=checkout) is None
    assert Execution.objects.get(entity=writer).status == Execution.Status.SUCCEEDED


def test_a_pipeline_that_throws_fails_the_round_with_where_it_threw(tmp_path):
    code = "def run(ctx, brief):\n    raise RuntimeError('no layout writer today')\n"
    checkout, writer = pipeline_brain(tmp_path, code)
    cycle, rnd = cycle_and_round(looped(loop={"proposer": {"pipeline": "writer"}}))
    with pytest.raises(ProposalFailed, match="pipeline:writer: RuntimeError: no layout writer today") as failed:
        propose(cycle, rnd, brief(), checkout=checkout)
    assert "features/writer/writer.pipeline.py:2" in str(failed.value)
    execution = Execution.objects.get(entity=writer)
    assert execution.status == Execution.Status.FAILED and "no layout writer today" in execution.error


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("'a change'", "answered str, not an object"),
        ("{'summary': 's', 'hypothesis': 'h', 'files': []}", "files: at least one"),
        ("{'summary': 's', 'hypothesis': 'h', 'files': [{'path': '../x', 'content': ''}]}", "climbs out"),
        ("{'summary': 's', 'hypothesis': 'h', 'files': [{'path': 'a', 'content': object()}]}", "not JSON"),
    ],
)
def test_a_pipelines_broken_answer_fails_the_round(tmp_path, returned, message):
    checkout, _ = pipeline_brain(tmp_path, f"def run(ctx, brief):\n    return {returned}\n")
    cycle, rnd = cycle_and_round(looped(loop={"proposer": {"pipeline": "writer"}}))
    with pytest.raises(ProposalFailed, match=message):
        propose(cycle, rnd, brief(), checkout=checkout)


def test_a_pipeline_the_brain_no_longer_serves_fails_the_round_with_the_sentence(tmp_path):
    checkout, writer = pipeline_brain(tmp_path, WRITER)
    subject = looped(loop={"proposer": {"pipeline": "writer"}})
    assert refusal(subject) is None
    writer.present = False
    writer.save()
    sentence = "loop.proposer.pipeline: writer names no pipeline this brain serves"
    assert refusal(subject) == sentence
    cycle, rnd = cycle_and_round(subject)
    with pytest.raises(ProposalFailed, match=sentence):
        propose(cycle, rnd, brief(), checkout=checkout)
    assert not Execution.objects.exists()


def test_refusal_names_nothing_for_the_agent_and_a_pipeline_only_when_a_pipeline_scenario_serves_it():
    assert refusal(looped("plain")) is None
    ghost = looped("ghost", loop={"proposer": {"pipeline": "ghost-writer"}})
    assert refusal(ghost) == "loop.proposer.pipeline: ghost-writer names no pipeline this brain serves"
    # A workflow scenario of that name serves no pipeline.
    make_entity("ghost-writer", evaluation={"enabled": False})
    assert refusal(ghost) is not None


def test_the_entity_taking_the_agent_back_with_null_is_asked_as_the_agent(agent):
    agent.script(answer())
    subject = looped(manifest={"loop": {"proposer": {"pipeline": "writer"}}}, loop={"proposer": {"pipeline": None}})
    cycle, rnd = cycle_and_round(subject)
    assert propose(cycle, rnd, brief()).author == "agent:engine-model"


@pytest.mark.parametrize(
    ("fields", "frontmatter", "served"),
    [
        ({}, {}, True),
        ({}, {"enabled": False}, False),
        ({}, {"enabled": True}, True),
        ({"load_error": "broken"}, {}, False),
        ({"present": False}, {}, False),
        ({"pipeline_path": "features/writer/other.pipeline.py"}, {}, False),
        ({"pipeline_path": ""}, {}, False),
    ],
)
def test_the_gates_cheap_serves_answers_as_served_pipeline(fields, frontmatter, served):
    # Issue 18: the gates ask whether a pipeline is served every batch of landings, through one written-out read.
    from evolution.loop.pipelines import served_pipeline, serves

    make_entity(
        "writer",
        kind="pipeline",
        evaluation={"enabled": False},
        **{"pipeline_path": "features/writer/writer.pipeline.py", **fields},
    )
    Entity.objects.filter(slug="writer").update(frontmatter={"name": "writer", **frontmatter})
    assert serves("writer") is (served_pipeline("writer") is not None) is served
    assert serves("ghost") is False
