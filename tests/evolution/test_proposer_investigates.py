"""The proposer agent investigates (issue 33): read-only tools over the brain and the views, turns bounded by the
budget and the kill switch, what it read on the round. A loopback gateway scripted to call tools, the real client."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest

from evolution.investigate import files, toolbox
from evolution.loop import machine, proposer
from evolution.loop.brief import Brief
from evolution.models import Cycle, Round
from grading.models import Entity
from hitl.models import Card
from tests.evolution.loop_helpers import graded, history, looped
from tests.fakes.gateway import Reply
from tests.grading.grading_helpers import brain_repo

pytestmark = pytest.mark.django_db

PATH = "features/triage/triage.scenario.md"
RULES = "---\nname: Triage\n---\n## Rules\n\n- refund -> billing\n- otherwise -> general\n"
BRAIN = {
    PATH: RULES,
    "features/triage/triage.loop.py": "def measure(run):\n    return {}\n",
    "features/triage/.env": "TOKEN=hush\n",
    "constitution/Evaluation/Methods/x.md": "# Run Evaluation\nScore 1 when the label is right.\n",
}
#: 1,000 prompt tokens at $2/M and 200 completion tokens at $10/M: $0.004 a turn.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
TURN = Decimal("0.004")
ANSWER = {
    "summary": "Add 'overcharged' to the billing rule.",
    "hypothesis": "Overcharge tickets fell through to general.",
    "files": [{"path": PATH, "content": RULES.replace("- refund", "- refund, overcharged")}],
    "citedLessons": [],
}


@pytest.fixture
def agent(fake_gateway, settings, tmp_path):
    """The fake gateway as the engine's, priced; the engine's brain is a small repository whose working tree moved on."""
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.BRAMA_MODEL = "engine-model"
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("2")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("10")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    checkout, commit = brain_repo(tmp_path / "brain", BRAIN)
    (checkout.path / PATH).write_text("uncommitted edits in the working tree\n")
    settings.BRAIN_CHECKOUT = checkout.path
    fake_gateway.commit = commit
    return fake_gateway


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=list(pairs), usage=USAGE)


def final(**overrides: Any) -> Reply:
    return Reply(content=json.dumps({**ANSWER, **overrides}), usage=USAGE)


def tool_answers(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def brief() -> Brief:
    return Brief(
        documents={"runs.json": "[]"}, prompt="Propose a change.", data={}, evidence_run_ids=[], recalled=[], tokens=1
    )


def a_round(entity: Entity) -> tuple[Cycle, Round]:
    cycle = Cycle.objects.create(entity=entity, key=f"test:{uuid.uuid4()}", origin=Cycle.Origin.REQUEST)
    return cycle, Round.objects.create(cycle=cycle, number=1)


# --- Files: the brain at the base commit, confined --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("constitution/Evaluation/Methods/x.md", "read ban"),
        ("Constitution/evaluation/x.md", "read ban"),
        ("features/triage/triage.loop.py", "loop modules"),
        ("features/triage/.env", "secrets"),
        ("deploy/server.pem", "secrets"),
        ("features/a/credentials.json", "secrets"),
        ("../outside.md", "climbs out"),
        ("/etc/passwd", "absolute"),
        (".git/config", "git's own"),
        ("features/*/x.md", "glob"),
    ],
)
def test_the_read_ban_and_the_brains_edge_refuse_with_the_reason(path, why):
    assert why in files.refusal(path)


def test_an_entitys_own_files_may_be_read():
    assert files.refusal(PATH) is None


def test_the_agent_lists_and_reads_at_the_base_commit_and_a_read_of_the_judges_file_is_refused(agent):
    agent.script(
        calls(("file_list", {"path": "features/triage"}), ("file_read", {"path": PATH})),
        calls(("file_read", {"path": "constitution/Evaluation/Methods/x.md"})),
        final(),
    )
    cycle, rnd = a_round(looped(commit=agent.commit))

    proposal = proposer.propose(cycle, rnd, brief())

    # The proposal still comes, in the shape it always had.
    assert proposal is not None and proposal.files == ANSWER["files"] and proposal.author == "agent:engine-model"
    listed, read = tool_answers(agent.requests[1].json)
    assert [f["path"] for f in listed["files"]] == [PATH]  # the loop module and the secret are hidden, not named
    assert "2 file(s)" in listed["hidden"]
    assert read["content"] == RULES  # the commit, not the working tree's edits
    [refused] = tool_answers(agent.requests[2].json)[2:]
    assert "read ban" in refused["refused"] and "content" not in refused
    # Three turns, each priced and counted; every call is on the record with what came back.
    assert proposal.cost_usd == 3 * TURN
    assert [(r["turn"], r["tool"], r["arguments"]) for r in proposal.reads] == [
        (1, "file_list", {"path": "features/triage"}),
        (1, "file_read", {"path": PATH}),
        (2, "file_read", {"path": "constitution/Evaluation/Methods/x.md"}),
    ]
    assert proposal.reads[1]["chars"] > len(RULES) and not proposal.reads[1]["refused"]
    assert "read ban" in proposal.reads[2]["refused"]
    assert Decimal(proposal.reads[0]["turnCostUsd"]) == TURN


def test_a_write_or_a_shell_is_no_tool_of_the_proposer(agent):
    agent.script(
        calls(("file_write", {"path": PATH, "content": "x"}), ("shell", {"command": "cat /etc/passwd"})), final()
    )
    cycle, rnd = a_round(looped(commit=agent.commit))
    proposer.propose(cycle, rnd, brief())
    offered = {tool["function"]["name"] for tool in agent.requests[0].json["tools"]}
    assert offered == {"file_list", "file_read", "db_schema", "db_query", "loop_history"}
    answers = tool_answers(agent.requests[1].json)
    assert len(answers) == 2
    assert all("no such tool" in a["refused"] and "only reads" in a["refused"] for a in answers)


@pytest.mark.django_db(transaction=True)  # db_query reads through a connection of its own: committed rows
def test_the_agents_query_outside_the_views_and_its_writes_are_refused_and_the_proposal_still_comes(agent):
    from django.contrib.auth.models import User
    from django.db import connection

    User.objects.create_user("alice", password="secret-pass")
    entity = looped(commit=agent.commit)
    graded(entity, bad=True)
    agent.script(
        calls(("db_query", {"sql": "SELECT run_id, passed FROM ro_grades"})),
        calls(
            ("db_query", {"sql": "SELECT username, password FROM auth_user"}),
            ("db_query", {"sql": "INSERT INTO evolution_lesson (summary) VALUES ('x')"}),
            ("db_query", {"sql": "UPDATE grading_entity SET loop_enabled = false"}),
            ("db_query", {"sql": "CREATE TABLE loot AS SELECT * FROM auth_user"}),
        ),
        final(),
    )
    cycle, rnd = a_round(entity)

    proposal = proposer.propose(cycle, rnd, brief())

    assert proposal is not None and proposal.files == ANSWER["files"]  # the proposal still comes
    [rows] = tool_answers(agent.requests[1].json)
    assert [row["passed"] for row in rows["rows"]] in ([False], [0])  # the views read
    outside, insert, update, create = tool_answers(agent.requests[2].json)[1:]
    assert "only the ro_* views" in outside["refused"] and "secret" not in json.dumps(outside)
    assert all("only SELECT" in answer["refused"] for answer in (insert, update, create))
    assert [bool(r["refused"]) for r in proposal.reads] == [False, True, True, True, True]
    entity.refresh_from_db()
    assert entity.loop_enabled and "loot" not in connection.introspection.table_names()


def test_the_last_turn_is_offered_no_tools_and_asked_to_answer(agent, settings):
    settings.LOOP_PROPOSER_MAX_TURNS = 2
    agent.script(calls(("file_read", {"path": PATH})), final())
    cycle, rnd = a_round(looped(commit=agent.commit))
    assert proposer.propose(cycle, rnd, brief()) is not None
    last = agent.requests[1].json
    assert "tools" not in last and last["messages"][-1] == {"role": "user", "content": proposer.ANSWER_NOW}


def test_loop_history_is_the_seeds_read_of_this_entity(agent):
    entity = looped(commit=agent.commit)
    a_round(looped("urgency"))  # another entity's cycle is not this proposer's business
    agent.script(calls(("loop_history", {"limit": 5}), ("loop_history", {"limit": 500})), final())
    cycle, rnd = a_round(entity)
    proposer.propose(cycle, rnd, brief())
    answer, refused = tool_answers(agent.requests[1].json)
    assert [(row["id"], row["targetId"]) for row in answer["cycles"]] == [(cycle.pk, "triage")]
    assert refused == {"error": "limit: '500' is not a whole number from 1 to 100"}


# --- The budget and the kill switch, through the machine --------------------------------------------------


def open_analysis(agent, **loop: Any) -> Cycle:
    entity = looped(commit=agent.commit, loop={"autonomy": {"decide": "auto"}, **loop})
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution).cycle


@pytest.fixture
def analysing(agent):
    return open_analysis(agent)


def test_a_budget_running_out_mid_investigation_fails_the_round_over_budget_with_the_spend(agent):
    analysing = open_analysis(agent, budget={"maxUsdPerRun": "0.006"})
    agent.script(calls(("file_read", {"path": PATH})), calls(("db_schema", {})), final())

    rnd = machine.analyse(analysing.rounds.get(number=1).pk)

    rnd.refresh_from_db()
    analysing.refresh_from_db()
    assert len(agent.requests) == 2  # turn 1 left $0.002; turn 2 overshot it (recorded whole); no turn 3
    assert rnd.status == Round.Status.FAILED
    assert "over budget: spent $0.008 of $0.006 (budget.maxUsdPerRun)" in rnd.error
    assert analysing.spent_usd == 2 * TURN and rnd.cost_usd == 2 * TURN
    assert [r["tool"] for r in rnd.reads] == ["file_read", "db_schema"]


def test_a_kill_switch_mid_investigation_stops_the_next_turn_and_nothing_more_is_paid(agent, analysing):
    made = proposer.TOOLBOX[0]

    def a_person_flips_the_switch_while_it_reads(cycle, rnd, checkout):
        box = made(cycle, rnd, checkout)
        real = box.call

        def call(name, arguments):
            Entity.objects.filter(pk=cycle.entity_id).update(loop_enabled=False)
            return real(name, arguments)

        box.call = call
        return box

    proposer.use_toolbox(a_person_flips_the_switch_while_it_reads)
    try:
        agent.script(calls(("file_read", {"path": PATH})), final())
        rnd = machine.analyse(analysing.rounds.get(number=1).pk)
    finally:
        proposer.use_toolbox(made)

    rnd.refresh_from_db()
    analysing.refresh_from_db()
    assert len(agent.requests) == 1 and agent.remaining == 1  # the answer was never asked for
    assert rnd.status == Round.Status.SKIPPED and rnd.card is None and not rnd.files
    assert analysing.status == Cycle.Status.SKIPPED
    assert analysing.reason == "the loop was switched off during the analysis"
    assert analysing.spent_usd == TURN and [r["tool"] for r in rnd.reads] == ["file_read"]
    assert not Card.objects.filter(producer="loop").exists() and not analysing.lessons.exists()


def test_a_hold_placed_mid_investigation_sets_it_aside_before_the_next_turn(agent, analysing):
    from evolution.steering.supervision import hold

    made = proposer.TOOLBOX[0]

    def a_person_holds_while_it_reads(cycle, rnd, checkout):
        box = made(cycle, rnd, checkout)
        real = box.call

        def call(name, arguments):
            hold(cycle.entity, actor="alice", reason="audit")
            return real(name, arguments)

        box.call = call
        return box

    proposer.use_toolbox(a_person_holds_while_it_reads)
    try:
        agent.script(calls(("file_read", {"path": PATH})), final())
        machine.analyse(analysing.rounds.get(number=1).pk)
    finally:
        proposer.use_toolbox(made)
    analysing.refresh_from_db()
    assert len(agent.requests) == 1
    assert analysing.status == Cycle.Status.SKIPPED and "placed while the proposer worked" in analysing.reason


def throw_when_asked(agent, requests: int, throw) -> dict[str, Any]:
    """A person who, once the gateway holds its ``requests``-th call, throws the switch or a hold (on a connection of
    their own) and notes when."""
    from django.db import connection

    def person() -> None:
        try:
            while len(agent.requests) < requests:
                time.sleep(0.01)
            throw()
            seen["at"] = time.monotonic()
        finally:
            connection.close()

    seen: dict[str, Any] = {"thread": threading.Thread(target=person, daemon=True)}
    seen["thread"].start()
    return seen


@pytest.mark.django_db(transaction=True)  # the person throws it from a thread of their own: committed rows
@pytest.mark.parametrize("throw", ["switch", "hold"])
def test_a_switch_or_hold_thrown_during_a_slow_model_call_cuts_it_within_seconds_and_nothing_more_is_paid(agent, throw):
    from evolution.steering.supervision import hold

    analysing = open_analysis(agent)
    entity = analysing.entity
    agent.script(
        calls(("file_read", {"path": PATH})),
        Reply(content=json.dumps(ANSWER), usage=USAGE, delay_s=30),  # a slow turn: 30 s before it would answer
        final(),
    )
    if throw == "switch":
        person = throw_when_asked(agent, 2, lambda: Entity.objects.filter(pk=entity.pk).update(loop_enabled=False))
    else:
        person = throw_when_asked(
            agent, 2, lambda: hold(Entity.objects.get(pk=entity.pk), actor="alice", reason="audit")
        )

    rnd = machine.analyse(analysing.rounds.get(number=1).pk)
    ended = time.monotonic()

    person["thread"].join(timeout=5)
    assert ended - person["at"] < 10  # not the 30 s the slow turn would have taken
    rnd.refresh_from_db()
    analysing.refresh_from_db()
    # Cut within a couple of seconds of its start (so of the throw, which came after it): the switch is read every
    # LOOP_PROPOSER_POLL_SECS (1 s).
    cut = float(re.search(r"abandoned after ([0-9.]+) s", analysing.reason)[1])
    assert cut < 2.5, analysing.reason
    assert len(agent.requests) == 2 and agent.remaining == 1  # no retry, no further turn
    assert rnd.status == Round.Status.SKIPPED and rnd.card is None and not rnd.files
    assert analysing.status == Cycle.Status.SKIPPED
    assert "turn 2's model call was abandoned after" in analysing.reason and "unpaid" in analysing.reason
    assert analysing.spent_usd == TURN and rnd.cost_usd == TURN  # turn 1 only: the cut call is never paid
    assert [r["tool"] for r in rnd.reads] == ["file_read"]
    assert not Card.objects.filter(producer="loop").exists() and not analysing.lessons.exists()


def test_the_toolbox_is_the_investigations_registered_one():
    assert [toolbox.for_round] == proposer.TOOLBOX


# --- On the record: the story and loop_get_cycle -----------------------------------------------------------


def test_what_the_proposer_read_is_in_the_story_before_its_proposal_and_in_loop_get_cycle(agent, alice, client):
    from tests.evolution.test_api import client_for

    entity = looped(commit=agent.commit)
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    cycle = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution).cycle
    agent.script(
        calls(("file_list", {"path": "features/triage"}), ("file_read", {"path": PATH})),
        calls(("db_query", {"sql": "SELECT run_id FROM ro_grades WHERE passed = false"})),
        calls(("file_read", {"path": "constitution/Evaluation/Methods/x.md"})),
        final(),
    )
    rnd = machine.analyse(cycle.rounds.get(number=1).pk)
    assert rnd.status == Round.Status.PROPOSED and len(rnd.reads) == 4

    client.force_login(alice)
    page = client.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    story = page[page.index('id="chapter-hypothesize"') :]
    read = story.index("What it read")
    assert read < story.index("Summary")
    for words in (
        "Listed the files under features/triage",
        f"Read {PATH}",
        "Queried the database",
        "SELECT run_id FROM ro_grades WHERE passed = false",
        "refused: constitution/Evaluation/** is the judge",
    ):
        assert words in story[read:], words
    assert "file_read" not in story and "turnCostUsd" not in story  # people's words, no internal names

    body = client_for(alice, agent=True).get(f"/api/loop/cycles/{cycle.pk}/").json()
    reads = body["rounds"][0]["reads"]
    assert [r["tool"] for r in reads] == ["file_list", "file_read", "db_query", "file_read"]
    assert reads[2]["arguments"] == {"sql": "SELECT run_id FROM ro_grades WHERE passed = false"}
    assert all(isinstance(r["turnCostUsd"], str) and isinstance(r["chars"], int) for r in reads)
    assert "read ban" in reads[3]["refused"]


def test_a_proposer_copy_that_drops_db_read_is_offered_no_query(agent, tmp_path):
    copy = "---\nname: proposer\ncapabilities: [file:read, loop:read]\n---\nYou are careful.\n"
    checkout, commit = brain_repo(tmp_path / "own", {**BRAIN, "constitution/Agents/system/loop/role-proposer.md": copy})
    agent.script(calls(("db_query", {"sql": "SELECT 1"})), final())
    cycle, rnd = a_round(looped(commit=commit))
    proposer.propose(cycle, rnd, brief(), checkout=checkout)
    request = agent.requests[0].json
    assert [t["function"]["name"] for t in request["tools"]] == ["file_list", "file_read", "loop_history"]
    assert "`db_query`" not in request["messages"][1]["content"]
    [answer] = tool_answers(agent.requests[1].json)
    assert "no such tool 'db_query'" in answer["refused"]


def test_a_chat_role_proposer_may_read_its_own_episodes_and_no_other_roles(agent):
    from grading.models import Episode
    from tests.grading.grading_helpers import make_run

    role = looped("helpdesk", kind="role", commit=agent.commit)
    other = looped("sales", kind="role")
    mine = Episode.objects.create(execution=make_run(role), role=role, surface="dashboard", counterpart_name="Ann")
    theirs = Episode.objects.create(execution=make_run(other), role=other, surface="dashboard")
    mine.turns.create(seq=1, role="person", text="my invoice is wrong")
    agent.script(
        calls(
            ("eval_list_episodes", {"limit": 5}),
            ("eval_get_episode", {"runId": str(mine.pk)}),
            ("eval_get_episode", {"runId": str(theirs.pk)}),
        ),
        final(),
    )
    cycle, rnd = a_round(role)
    proposer.propose(cycle, rnd, brief())
    offered = [t["function"]["name"] for t in agent.requests[0].json["tools"]]
    assert offered[-2:] == ["eval_list_episodes", "eval_get_episode"]
    listed, dialog, refused = tool_answers(agent.requests[1].json)
    assert [e["run_id"] for e in listed["episodes"]] == [str(mine.pk)]
    assert dialog["dialog"][0]["text"] == "my invoice is wrong" and "Ann" not in json.dumps(dialog)
    assert "is no episode of helpdesk" in refused["error"]


def test_a_tool_answer_past_the_bound_is_cut_and_says_so(agent, monkeypatch):
    monkeypatch.setattr(proposer, "MAX_TOOL_ANSWER_CHARS", 50)
    agent.script(calls(("file_read", {"path": PATH})), final())
    cycle, rnd = a_round(looped(commit=agent.commit))
    proposal = proposer.propose(cycle, rnd, brief())
    [answer] = tool_answers(agent.requests[1].json)
    assert "only the first 50 are shown" in answer["cut"] and len(answer["partial"]) == 50
    assert proposal.reads[0]["chars"] < 200
