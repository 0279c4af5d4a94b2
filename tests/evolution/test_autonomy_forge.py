"""Autonomy on the local forge with the demo brain: full autonomy improving itself with no card answered, the arm
held until every required status is green and dropped when the head moves, refused arms demoting to a person,
and a revert under merge: auto landing on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from evolution.forges.base import VALIDATION
from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle, PullRequest, Round
from grading.demo import TRIAGE_PATH
from hitl.models import Card, Notice
from singularity.brain.git import clone, git
from tests.evolution.demo_helpers import SABOTEUR, SABOTEUR_SCENARIO, person_commits, run, tickets, triage, wrong

# The watch and the merge gate alone: the pre-merge check has its own tests (test_check_*.py).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_check]

#: A status the brain's own CI posts (not the loop).
CI = "ci/tests"


def autonomy_block(block: str) -> str:
    path = Path(django_settings.BRAIN_CHECKOUT) / TRIAGE_PATH
    return path.read_text().replace("loop:\n  enabled: true\n", f"loop:\n  enabled: true\n  autonomy: {block}\n", 1)


def go_autonomous(embedded, tmp_path, block: str = "{decide: auto, merge: auto}") -> None:
    text = autonomy_block(block)
    assert "autonomy:" in text
    person_commits(embedded, {TRIAGE_PATH: text}, tmp_path, "Full autonomy")


def drive_until_cycle(pool) -> tuple[Cycle, list[dict]]:
    failed = []
    for ticket in pool:
        if wrong(run(ticket)):
            failed.append(ticket)
        cycle = Cycle.objects.filter(entity=triage(), analysed=True).first()
        if cycle is not None:
            return cycle, failed
    raise AssertionError("no cycle opened")


def test_full_autonomy_improves_the_entity_with_no_card_answered(embedded, tmp_path):
    go_autonomous(embedded, tmp_path)
    cycle, failed = drive_until_cycle(tickets())
    cycle.refresh_from_db()
    rnd = cycle.rounds.get(number=1)
    assert rnd.acceptance == "auto" and rnd.merge_gate == "auto"
    assert cycle.phase == Cycle.Phase.WATCHING and rnd.status == Round.Status.MERGED
    # No check and only the diff gate required: the PR is clean at once, the forge refuses the arm as GitHub does,
    # and the loop merges it at the head it vouched for (issue 32).
    merged = PullRequest.objects.get(number=rnd.pr_number)
    assert merged.merged_by == f"clean-status merge ({cycle.actor})" and merged.head_sha == rnd.head_sha
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED
    assert not Card.objects.filter(producer="loop").exists()
    assert Notice.objects.filter(kind="accepted").exists()


def test_an_arm_with_nothing_required_is_refused_and_the_round_waits_on_a_person(embedded, tmp_path):
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = []
    go_autonomous(embedded, tmp_path)
    cycle, _ = drive_until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and rnd.merge_gate == "human"
    assert rnd.gate_note == "auto-merge unavailable: the base branch requires no status check"
    assert Notice.objects.filter(kind="merge-demoted", text__contains="auto-merge unavailable").exists()


def test_a_forbidden_merge_method_is_refused(embedded, tmp_path):
    go_autonomous(embedded, tmp_path, "{decide: auto, merge: auto, mergeMethod: squash}")
    cycle, _ = drive_until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    assert rnd.merge_gate == "human" and "merge method 'squash' is not allowed" in rnd.gate_note


def test_an_arm_lands_only_once_every_required_status_is_green_and_drops_when_the_head_moves(embedded, tmp_path):
    # The brain's own CI is required too (the loop posts its own two statuses itself).
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = ["singularity/diff-gate", VALIDATION, CI]
    go_autonomous(embedded, tmp_path)
    cycle, _ = drive_until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    pull = PullRequest.objects.get(number=rnd.pr_number)
    assert rnd.merge_gate == "auto" and pull.state == "open" and pull.auto_merge["sha"] == rnd.head_sha
    # Someone pushes to the PR's branch: the arm no longer stands, and the wait demotes to a person.
    work = clone(LocalForge().remote_url(), tmp_path / "pusher", branch=rnd.branch)
    (work.path / "NOTE.md").write_text("pushed after the loop vouched\n")
    git("add", "NOTE.md", cwd=work.path)
    git("commit", "--quiet", "-m", "push", cwd=work.path)
    git("push", "--quiet", "origin", rnd.branch, cwd=work.path)
    forge = LocalForge()
    info = forge.get_pull(pull.number)
    assert info.auto_merge is None
    forge.set_status(info.head_sha, CI, "success", "tests passed")
    assert forge.get_pull(pull.number).state == "open"  # nothing armed: green alone merges nothing
    machine.on_pull_event(pull.number)
    rnd.refresh_from_db()
    assert rnd.merge_gate == "human" and "no longer stands" in rnd.gate_note


def test_an_armed_head_merges_when_its_last_required_status_turns_green(embedded, tmp_path):
    # The brain's own CI is required too (the loop posts its own two statuses itself).
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = ["singularity/diff-gate", VALIDATION, CI]
    go_autonomous(embedded, tmp_path)
    cycle, _ = drive_until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    forge = LocalForge()
    assert forge.get_pull(rnd.pr_number).state == "open"
    forge.set_status(rnd.head_sha, CI, "success", "tests passed")
    assert forge.get_pull(rnd.pr_number).state == "merged"
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING


def test_a_regressed_change_under_merge_auto_is_reverted_on_its_own(embedded, tmp_path):
    text = autonomy_block("{decide: auto, merge: auto}").replace("pipeline: fixer", "pipeline: saboteur")
    person_commits(
        embedded,
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: text,
        },
        tmp_path,
        "Autonomous saboteur",
    )
    cycle, _ = drive_until_cycle(tickets())
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    for ticket in [t for t in tickets() if t["_expected"] == "billing"][:7]:  # the watch regresses at 7 bad
        assert wrong(run(ticket))
    cycle.refresh_from_db()
    rnd = cycle.rounds.get(number=1)
    assert cycle.status == Cycle.Status.REGRESSED
    assert rnd.revert_merge_gate == "auto" and rnd.revert_outcome == "merged" and rnd.revert_merged_at
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None
    assert not Card.objects.filter(producer="loop").exists()
