"""The pre-merge check with LOOP_FORGE=github: the demo brain on the fake GitHub, real PyGithub, real git.

``singularity/validation`` is posted on the PR's checked head through GitHub's commit-status API: pending while
the replays run (the candidate fetched from the PR's branch on GitHub), then the check's answer. With the
status required by branch protection GitHub refuses a merge until the check has spoken, and a harmful change's
PR is closed on GitHub by the check (seed 003 "What the check does", R11.15, R11.28, R12.13).
"""

from __future__ import annotations

import pytest

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.loop import machine
from evolution.models import Cycle, Replay
from grading.demo import TRIAGE_PATH
from grading.models import Execution
from tests.evolution.demo_helpers import SABOTEUR, SABOTEUR_SCENARIO, drive_until_card, press, tickets, triage
from tests.evolution.github_helpers import push
from tests.fakes.github import Refused

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_check_speaks_on_github_and_its_required_status_holds_the_merge(on_github, alice, monkeypatch):
    on_github.protection = [DIFF_GATE, VALIDATION]
    held: list[int] = []
    monkeypatch.setitem(machine.STEPS, "replay", held.append)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert cycle.phase == Cycle.Phase.CHECKING
    assert on_github.statuses(rnd.head_sha) == {DIFF_GATE: "success", VALIDATION: "pending"}
    with pytest.raises(Refused):
        on_github.merge(rnd.pr_number, by="alice")  # required and pending: GitHub will not merge it
    for replay_id in held:
        machine.replay(replay_id)
    candidates = Execution.objects.filter(pk__in=rnd.check_run_ids)
    assert {e.status for e in candidates} == {Execution.Status.SUCCEEDED}  # the head was fetched from GitHub
    rnd.refresh_from_db()
    cycle.refresh_from_db()
    answer = "success" if rnd.check_verdict["verdict"] == "validated" else "error"
    assert on_github.statuses(rnd.checked_sha)[VALIDATION] == answer
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    assert Replay.objects.filter(round=rnd, finished_at=None).count() == 0


def test_a_harmful_change_is_closed_on_github_by_the_check(on_github, alice, tmp_path):
    from pathlib import Path

    from django.conf import settings

    from grading.sync import sync_brain

    text = (Path(settings.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text().replace("pipeline: fixer", "pipeline: saboteur")
    push(
        on_github,
        tmp_path,
        "main",
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: text,
        },
        message="Try the saboteur",
    )
    sync_brain()
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert cycle.status == Cycle.Status.REGRESSED and not rnd.merge_sha and rnd.revert_pr_number is None
    assert on_github.pull(rnd.pr_number).state == "closed"
    assert on_github.statuses(rnd.checked_sha)[VALIDATION] == "failure"
    (comment,) = on_github.pull(rnd.pr_number).comments  # R25.4: the check's record on the closed PR
    assert comment["body"].startswith("**The pre-merge check regressed**")
