"""Doctor sections of issue 29: Loop kind support (R22.13, R22.17), Loop prompt placeholders (R8.32), Loop proposer
models (R8.36), Loop autonomy's hitl: true capabilities under decide: auto (R12.21), the grade lag (R14.20).

Each on a small brain where it speaks and one where it is quiet.
"""

from __future__ import annotations

import pytest

from grading.doctor import run_doctor
from tests.evolution.loop_helpers import looped
from tests.grading.brain_helpers import Brain

pytestmark = pytest.mark.django_db

PROPOSER_ROLE = "constitution/Agents/system/loop/role-proposer.md"


def said(section: str, brain: Brain | None = None) -> list[str]:
    checkout = brain.checkout if brain is not None else None
    return [f.line() for f in run_doctor(checkout=checkout, only=[section]) if f.level != "pass"]


# --- Loop kind support -------------------------------------------------------------------------------------------


def test_a_loop_block_in_an_engine_system_role_fails_loop_kind_support(tmp_path):
    role = "---\nname: chief\nloop:\n  enabled: true\n---\nYou run the company.\n"
    brain = Brain(tmp_path, {"constitution/Agents/system/role-chief.md": role})
    (line,) = said("Loop kind support", brain)
    assert "[fail]" in line and "constitution/Agents/system/role-chief.md" in line and "loop:" in line
    assert "features/" in line  # where to move it


def test_a_system_role_without_blocks_and_a_chat_roles_context_are_quiet(tmp_path):
    brain = Brain(tmp_path, {"constitution/Agents/system/role-chief.md": "---\nname: chief\n---\nRun it.\n"})
    looped("helpdesk", kind="role", evaluation={"method": "none", "context": {"priorEpisodes": 2}})
    assert said("Loop kind support", brain) == []


def test_evaluation_context_on_a_scenario_or_heartbeat_warns_that_only_a_chat_judge_reads_it(tmp_path):
    brain = Brain(tmp_path, {})
    looped("triage", evaluation={"method": "none", "context": {"priorEpisodes": 2}})
    looped("pulse", kind="heartbeat", schedule="0 * * * *", evaluation={"method": "none"})
    (line,) = said("Loop kind support", brain)
    assert "[warn]" in line and "scenario:triage" in line and "evaluation.context" in line


# --- Loop prompt placeholders ------------------------------------------------------------------------------------


def test_a_brain_copy_with_a_placeholder_the_loop_does_not_fill_fails(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "constitution/Loop/proposer/workflow.md": "Brief for {{entity}}.\nFollow {{plan}}.\n",
            "constitution/Loop/proposer/evolve.md": "{{entity}}: {{idea}}\n",
            "constitution/Loop/proposer/idea.md": "{{entity}}: {{idea}}\n",
        },
    )
    lines = said("Loop prompt placeholders", brain)
    assert len(lines) == 2 and all("[fail]" in line for line in lines)
    assert any("proposer/workflow.md" in line and "{{plan}}" in line for line in lines)
    assert any("proposer/evolve.md" in line and "{{idea}}" in line for line in lines)


def test_copies_that_name_only_what_the_loop_fills_are_quiet(tmp_path):
    brain = Brain(tmp_path, {"constitution/Loop/proposer/workflow.md": "Brief for {{ entity }}.\n{{runs}}\n"})
    assert said("Loop prompt placeholders", brain) == []


# --- Loop proposer models ----------------------------------------------------------------------------------------


@pytest.fixture
def served(fake_gateway, settings):
    fake_gateway.models = ["claude-sonnet", "gpt-large"]
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MODEL = "gpt-large"
    return fake_gateway


def test_a_misspelt_proposer_model_fails_naming_the_nearest_served_model(served):
    looped("triage", loop={"proposer": {"modelRef": "claude-sonet"}})
    (line,) = said("Loop proposer models")
    assert "[fail]" in line and "scenario:triage" in line and "'claude-sonet'" in line
    assert "did you mean 'claude-sonnet'" in line


def test_a_served_proposer_model_is_quiet(served):
    looped("triage", loop={"proposer": {"modelRef": "claude-sonnet"}})
    looped("digest")  # no modelRef: the role's or the engine's model
    assert said("Loop proposer models") == []


# --- Loop autonomy: hitl: true capabilities the loop's roles reach under decide: auto ----------------------------


def _role(capabilities: str) -> str:
    return f"---\nname: proposer\ncapabilities: {capabilities}\n---\nPropose.\n"


def test_a_hitl_capability_the_proposer_reaches_under_decide_auto_is_named(tmp_path):
    brain = Brain(tmp_path, {PROPOSER_ROLE: _role("[file:read, eval:rate]")})
    looped("triage", loop={"autonomy": {"decide": "auto"}})
    lines = [line for line in said("Loop autonomy", brain) if "eval:rate" in line]
    assert len(lines) == 1 and "[warn]" in lines[0] and "proposer" in lines[0]
    assert "engine-capabilities.json" in lines[0]


def test_a_star_grant_reaches_every_hitl_capability(tmp_path):
    brain = Brain(tmp_path, {PROPOSER_ROLE: _role("['*']")})
    looped("triage", loop={"autonomy": {"decide": "auto"}})
    found = " ".join(said("Loop autonomy", brain))
    assert "eval:rate" in found and "loop:analyze" in found


def test_hitl_capabilities_are_quiet_under_decide_human_or_once_relaxed(tmp_path):
    brain = Brain(tmp_path / "a", {PROPOSER_ROLE: _role("[eval:rate]")})
    looped("triage")
    assert [line for line in said("Loop autonomy", brain) if "eval:rate" in line] == []
    relaxed = Brain(
        tmp_path / "b",
        {
            PROPOSER_ROLE: _role("[eval:rate]"),
            "constitution/engine-capabilities.json": '{"eval:rate": {"hitl": false}}',
        },
    )
    looped("digest", loop={"autonomy": {"decide": "auto"}})
    assert [line for line in said("Loop autonomy", relaxed) if "eval:rate" in line] == []


# --- The grade lag (R14.20) --------------------------------------------------------------------------------------


def test_a_weekly_entity_whose_watch_cannot_fill_before_its_deadline_warns():
    looped("weekly", schedule="0 9 * * 1", loop={"watch": {"windowRuns": 10, "deadlineHours": 336}})
    (line,) = said("Loop watch")
    assert "[warn]" in line and "scenario:weekly" in line and "10 graded runs" in line


def test_a_lag_past_the_watch_deadline_warns_under_eval_ceilings_and_a_short_one_is_quiet():
    looped("late", evaluation={"method": "default", "gradeAfterHours": 400})
    looped("soon", evaluation={"method": "default", "gradeAfterHours": 72})
    (line,) = said("Eval ceilings")
    assert "scenario:late" in line and "gradeAfterHours 400" in line


def test_a_capabilities_file_that_does_not_read_fails_naming_it(tmp_path):
    brain = Brain(tmp_path, {"constitution/engine-capabilities.json": '{"eval:rate": {"hitl": "no"}}'})
    looped("triage", loop={"autonomy": {"decide": "auto"}})
    (line,) = [line for line in said("Loop autonomy", brain) if "engine-capabilities.json" in line]
    assert "[fail]" in line and "eval:rate" in line
