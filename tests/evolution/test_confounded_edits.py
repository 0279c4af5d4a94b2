"""Edits nobody's loop made confound a watch (seed 003, "Lock groups": R19.14–R19.16), on the demo brain.

A person's commit to the watched entity's file, pushed to the brain while the
watch runs, closes the watch unvalidated and confounded, naming the commit, and
nothing is reverted; a commit that changes only the entity's ``loop:`` block
steers the loop and confounds nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle
from grading.demo import TRIAGE_PATH
from grading.sync import sync_brain
from tests.evolution.demo_helpers import drive_until_card, person_commits, press, run, tickets, triage

pytestmark = [pytest.mark.django_db(transaction=True)]


def _watching(embedded, alice) -> tuple[Cycle, list[dict]]:
    """Drive the demo to a merged triage change whose watch is open; return the cycle and the tickets that failed."""
    with time_machine.travel(timezone.now(), tick=True):
        card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    proposal = cycle.rounds.get(number=1)
    LocalForge().merge_pull(proposal.pr_number, by="alice")
    machine.on_pull_event(proposal.pr_number)
    sync_brain()
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    return cycle, failed


def test_a_hand_commit_to_the_watched_entitys_file_confounds_the_watch_and_reverts_nothing(embedded, alice, tmp_path):
    cycle, failed = _watching(embedded, alice)
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    person_commits(
        embedded,
        {TRIAGE_PATH: definition.replace("- otherwise -> general", "- password -> technical\n- otherwise -> general")},
        tmp_path,
        "Hotfix: passwords are technical",
    )
    run(failed[0])  # a grade lands: the watch reads the brain's history at every tick
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.UNVALIDATED, cycle.reason
    edit = cycle.confounded_by_edit
    assert edit["subject"] == "Hotfix: passwords are technical" and edit["files"] == [TRIAGE_PATH]
    assert len(edit["sha"]) == 40 and edit["author"]
    assert cycle.reason.startswith(f"confounded: commit {edit['sha'][:12]}")
    assert not cycle.rounds.exclude(revert_pr_number=None).exists()  # nothing undone on a guess
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None


def test_a_commit_that_changes_only_the_loop_block_does_not_confound(embedded, alice, tmp_path):
    cycle, failed = _watching(embedded, alice)
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    assert "loop:\n  enabled: true\n" in definition
    person_commits(
        embedded,
        {TRIAGE_PATH: definition.replace("loop:\n  enabled: true\n", "loop:\n  enabled: true\n  cooldownHours: 2\n")},
        tmp_path,
        "loop_set loop.cooldownHours",
    )
    run(failed[0])
    cycle.refresh_from_db()
    assert cycle.confounded_by_edit is None, cycle.reason
    assert cycle.status in ("", Cycle.Status.VALIDATED)


def test_an_evaluation_edit_confounds(embedded, alice, tmp_path):
    cycle, failed = _watching(embedded, alice)
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    person_commits(
        embedded,
        {TRIAGE_PATH: definition.replace("floor: 0.5, target: 0.9", "floor: 0.4, target: 0.9")},
        tmp_path,
        "Lower the accuracy floor",
    )
    run(failed[0])
    cycle.refresh_from_db()
    assert cycle.confounded_by_edit is not None and cycle.status == Cycle.Status.UNVALIDATED


def test_a_backdated_commit_merged_during_the_watch_confounds(embedded, alice, tmp_path):
    """Landed is reachability, not dates: a commit written last week and pushed now counts."""
    import os

    from singularity.brain.git import clone, git

    cycle, failed = _watching(embedded, alice)
    work = clone(str(Path(embedded.VAR_DIR) / "brain.git"), tmp_path / "backdated")
    target = work.path / TRIAGE_PATH
    target.write_text(
        target.read_text().replace("- otherwise -> general", "- login -> technical\n- otherwise -> general")
    )
    week_ago = "2026-01-01T09:00:00+00:00"
    env = {**os.environ, "GIT_AUTHOR_DATE": week_ago, "GIT_COMMITTER_DATE": week_ago}
    import subprocess

    subprocess.run(["git", "commit", "--quiet", "-am", "An old branch's fix"], cwd=work.path, env=env, check=True)
    git("push", "--quiet", "origin", "main", cwd=work.path)
    sync_brain()
    run(failed[0])
    cycle.refresh_from_db()
    assert cycle.confounded_by_edit is not None and cycle.confounded_by_edit["subject"] == "An old branch's fix"
