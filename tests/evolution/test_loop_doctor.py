"""The loop's doctor sections: ceilings, the watch's time against a schedule, prompt paths."""

from __future__ import annotations

import pytest

from evolution.doctor import cadence
from grading.doctor import run_doctor
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db


def lines(only: str) -> list[str]:
    return [f.line() for f in run_doctor(only=[only]) if f.level != "pass"]


def test_an_unattended_entity_with_no_daily_analysis_ceiling_is_named():
    looped("pulse", kind="heartbeat", schedule="*/5 * * * *", loop={"maxAnalysesPerDay": None})
    looped("digest", loop={"maxAnalysesPerDay": None})  # attended: a person launches it
    found = lines("Loop ceilings")
    assert len(found) == 1 and "heartbeat:pulse" in found[0] and "maxAnalysesPerDay: null" in found[0]


def test_a_watch_the_schedule_cannot_fill_before_its_deadline_is_named():
    looped("weekly", schedule="0 9 * * 1", loop={"watch": {"deadlineHours": 336}})
    looped("often", schedule="*/5 * * * *")
    found = lines("Loop watch")
    assert len(found) == 1 and "scenario:weekly" in found[0] and "every 168 h" in found[0]


def test_cadence_reads_cron_gaps():
    assert cadence("0 */2 * * *").total_seconds() == 7200
    assert cadence("not a cron") is None


def test_a_group_the_manifest_does_not_declare_fails_and_a_group_of_one_warns():
    manifest = {"loop": {"groups": {"audience": {}}}}
    looped("layout", loop={"group": ["audience", "ghosts"]}, manifest=manifest)
    found = lines("Loop groups")
    assert any("[fail]" in line and "'ghosts'" in line and "joins nothing" in line for line in found), found
    assert any("[warn]" in line and "lock group audience has fewer than two members" in line for line in found)


def test_a_group_of_two_loop_members_is_healthy():
    manifest = {"loop": {"groups": {"audience": {}}}}
    looped("layout", loop={"group": ["audience"]}, manifest=manifest)
    looped("publish", loop={"group": ["audience"]}, manifest=manifest)
    assert lines("Loop groups") == []


def test_a_role_evaluator_copy_that_declares_memory_fails(tmp_path):
    from tests.grading.brain_helpers import Brain

    role = "---\nname: evaluator\nmemory:\n  sources: [MEMORY.md]\n---\nGrade the run.\n"
    brain = Brain(tmp_path, {"constitution/Agents/system/role-evaluator.md": role})
    found = [f.line() for f in run_doctor(checkout=brain.checkout, only=["Loop role memory"]) if f.level != "pass"]
    assert len(found) == 1 and "declares memory" in found[0] and "[fail]" in found[0]
    healthy = Brain(
        tmp_path / "healthy", {"constitution/Agents/system/role-evaluator.md": "---\nname: e\n---\nGrade.\n"}
    )
    assert [f for f in run_doctor(checkout=healthy.checkout, only=["Loop role memory"]) if f.level != "pass"] == []


def test_loop_evolve_hints_quality_as_a_guard_and_warns_when_quality_alone_is_compared():
    views = {"views": {"kind": "computed", "direction": "max", "role": "objective"}}
    looped("shorts", evaluation={"method": "default", "metrics": views}, loop={"preset": "evolve"})
    looped(
        "tuned",
        evaluation={"method": "default", "metrics": {**views, "quality": {"role": "observe"}}},
        loop={"preset": "evolve"},
    )
    looped("judged", evaluation={"method": "default"}, loop={"preset": "evolve"})
    looped("repaired", evaluation={"method": "default", "metrics": views})
    found = sorted(lines("Loop evolve"), key=lambda line: "scenario:judged" in line)
    assert len(found) == 2
    assert "scenario:shorts" in found[0] and "quality: {role: observe}" in found[0]
    assert "scenario:judged" in found[1] and "the only metric its watch compares" in found[1]


# --- Loop power (issue 31): what a verdict could see, warned before it happens --------------------------------------


def test_a_repair_watch_that_reverts_the_unchanged_entity_by_chance_is_named():
    from tests.evolution.loop_helpers import history

    noisy = looped("noisy")  # the trigger's pair, 2 bad of 5, at a failure rate of 0.4: P = 0.66304
    history(noisy, "bbggg" * 4)
    patient = looped("patient", loop={"watch": {"windowRuns": 10, "minFailures": 7}})  # P(X ≥ 7 | 10, 0.4) = 0.055
    history(patient, "bbggg" * 4)
    found = lines("Loop power")
    assert len(found) == 1, found
    assert "scenario:noisy" in found[0] and "2 bad of 5" in found[0] and "66%" in found[0] and "0.4" in found[0]


def test_a_check_whose_tolerance_leaves_no_gain_that_can_validate_is_named():
    accuracy = {"kind": "computed", "direction": "max", "role": "objective", "aggregate": "mean"}
    metrics = {"accuracy": {**accuracy, "tolerance": 1.5}}
    looped("wide", evaluation={"method": "none", "metrics": metrics}, loop={"check": {"inputs": 2}})
    looped("fine", evaluation={"method": "none", "metrics": {"accuracy": {**metrics["accuracy"], "tolerance": 0.05}}})
    found = lines("Loop power")
    assert len(found) == 1, found
    assert "scenario:wide" in found[0] and "no gain can validate" in found[0] and "check.inputs 2" in found[0]
