"""The whole loop on the embedded default: the demo brain, the demo model, the local forge, real Celery tasks (eager).

A run of bad triage grades opens a cycle; the demo brain's fixer pipeline
proposes a change; a person accepts; the PR opens with the diff gate's
status; a person merges; the watch counts the next graded runs and
validates; the lesson is kept. Then a second change, written by a saboteur
pipeline, regresses: its revert PR opens, lands, and the entity is free again.
Then a person's Skip with a note is the first lesson the next brief reads.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle, Lesson, PullRequest, Round
from grading.demo import TRIAGE_PATH
from grading.sync import sync_brain
from hitl.models import Card
from tests.evolution.demo_helpers import (
    SABOTEUR,
    SABOTEUR_SCENARIO,
    drive_until_card,
    pending_card,
    person_commits,
    press,
    run,
    tickets,
    triage,
    wrong,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.no_check  # the watch's story; the checked path is tests/evolution/test_check_end_to_end.py
def test_bad_grades_to_a_merged_change_validated_then_a_regression_reverted_then_a_skip_remembered(
    embedded, alice, tmp_path
):
    everything = tickets()
    start = timezone.now()

    # --- 1. Bad grades open a cycle; the fixer proposes; a person accepts. -----------------------
    with time_machine.travel(start, tick=True):
        card, failed = drive_until_card(everything)
    assert card.kind == Card.Kind.DECIDE and failed
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    assert cycle.origin == Cycle.Origin.GRADE and cycle.phase == Cycle.Phase.DECIDING
    proposal = cycle.rounds.get(number=1)
    assert proposal.status == Round.Status.PROPOSED and proposal.author == "pipeline:fixer"
    assert [f["path"] for f in proposal.files] == [TRIAGE_PATH]
    assert "http://dash.example/evolution/go/cycle:" in card.text  # the Full proposal link
    press(card, alice, "accept")

    proposal.refresh_from_db()
    cycle.refresh_from_db()
    assert proposal.status == Round.Status.APPLIED and proposal.decided_by == "alice"
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and proposal.branch.startswith("loop/triage-")
    pull = PullRequest.objects.get(number=proposal.pr_number)
    forge = LocalForge()
    # No pre-merge check here: singularity/validation says so, so a brain may require it on every PR.
    assert {s.context: s.state for s in forge.statuses(pull.head_sha)} == {
        "singularity/diff-gate": "success",
        "singularity/validation": "success",
    }

    # --- 2. A person merges; the watch counts the next graded runs; validated; lesson kept. -------
    merged = forge.merge_pull(pull.number, by="alice")
    machine.on_pull_event(pull.number)
    sync_brain()
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    assert triage().commit == merged.merge_sha
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))  # the inputs that failed now pass: the fix holds on them
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None
    assert cycle.watch_verdict["verdict"] == "validated"
    lesson = Lesson.objects.get(cycle=cycle)
    assert lesson.outcome == "validated" and lesson.hypothesis == proposal.hypothesis

    # --- 3. A saboteur's change regresses; its revert PR lands. ---------------------------------
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    person_commits(
        embedded,
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: definition.replace("pipeline: fixer", "pipeline: saboteur"),
        },
        tmp_path,
        "Try the saboteur",
    )
    later = start + timedelta(hours=7)  # past the 6 h rest of the validated settle
    billing = [t for t in everything if t["_expected"] == "billing"]
    with time_machine.travel(later, tick=True):
        second = None
        for ticket in everything:
            run(ticket)
            second = Cycle.objects.filter(entity=triage(), analysed=True).exclude(pk=cycle.pk).first()
            if second is not None:
                break
        assert second is not None
        card = pending_card(Card.Kind.DECIDE)
        press(card, alice, "accept")
        second.refresh_from_db()
        sabotage = second.rounds.get(number=1)
        assert sabotage.author == "pipeline:saboteur" and sabotage.pr_number
        forge.merge_pull(sabotage.pr_number, by="alice")
        machine.on_pull_event(sabotage.pr_number)
        sync_brain()
        for ticket in billing[:7]:  # the demo triage's watch regresses at seven bad of ten
            assert wrong(run(ticket))  # billing tickets now fall to "general"
    second.refresh_from_db()
    assert second.status == Cycle.Status.REGRESSED and second.phase == Cycle.Phase.REVERTING
    sabotage.refresh_from_db()
    revert = PullRequest.objects.get(number=sabotage.revert_pr_number)
    states = {s.context: s.state for s in forge.statuses(revert.head_sha)}
    assert states == {"singularity/diff-gate": "success", "singularity/validation": "success"}
    with time_machine.travel(later + timedelta(minutes=5), tick=True):
        refused = run(billing[2])
        assert refused.pk  # a grade while the revert is awaited opens nothing
        assert not Cycle.objects.filter(entity=triage(), analysed=True).exclude(pk__in=[cycle.pk, second.pk]).exists()
        forge.merge_pull(revert.number, by="alice")
        machine.on_pull_event(revert.number)
    second.refresh_from_db()
    sabotage.refresh_from_db()
    assert sabotage.revert_outcome == "merged" and sabotage.revert_merged_at is not None
    assert second.phase == Cycle.Phase.SETTLED and second.claim is None
    # R25.5: completed_at is rewritten by whichever transition finished last — here the revert's end
    assert second.completed_at >= later + timedelta(minutes=5) > second.merged_at
    sync_brain()
    assert (
        "- otherwise -> general\n" in triage().body
        and "pipeline: saboteur" in (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    )
    assert Lesson.objects.get(cycle=second).outcome == "regressed"

    # --- 4. A person's Skip with a note is the first lesson the next brief reads. -----------------
    person_commits(
        embedded,
        {TRIAGE_PATH: (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text().replace("saboteur", "fixer")},
        tmp_path,
        "Back to the fixer",
    )
    third_time = later + timedelta(hours=25)  # a regressed settle rests the entity a day
    with time_machine.travel(third_time, tick=True):
        card, _ = drive_until_card(everything)
        press(card, alice, "skip", note="too broad")
        skipped = Cycle.objects.filter(entity=triage(), analysed=True).order_by("-started_at").first()
        skipped.refresh_from_db()
        assert skipped.status == Cycle.Status.SKIPPED and "too broad" in skipped.reason
    with time_machine.travel(third_time + timedelta(hours=7), tick=True):
        card, _ = drive_until_card(everything)
    fourth = Cycle.objects.filter(entity=triage(), analysed=True).order_by("-started_at").first()
    remembered = json.loads(fourth.rounds.get(number=1).brief["lessons.json"])
    assert remembered[0]["note"] == "too broad" and remembered[0]["rejection"]["kind"] == "human"
