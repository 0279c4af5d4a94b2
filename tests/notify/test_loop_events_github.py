"""On the fake GitHub: a regressed change under merge: auto sends its PR, its merge, its settle and its revert to
Slack, one message each."""

from __future__ import annotations

import pytest
from django.test import Client

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.models import Cycle
from grading.demo import TRIAGE_PATH
from singularity.notify import deliver
from tests.evolution.demo_helpers import SABOTEUR, SABOTEUR_SCENARIO, run, tickets, wrong
from tests.evolution.test_loop_github import CI, autonomy, person_pushes, until_cycle
from tests.notify.helpers import slack_destination

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_check]


def test_a_reverted_change_on_github_is_told_to_slack_step_by_step(on_github, tmp_path, fake_slack):
    slack_destination(fake_slack.url, events=["pr.opened", "pr.merged", "watch.settled", "reverted"])
    on_github.protection = [DIFF_GATE, VALIDATION, CI]
    text = autonomy("{decide: auto, merge: auto}").replace("pipeline: fixer", "pipeline: saboteur")
    files = {
        "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
        "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
        TRIAGE_PATH: text,
    }
    person_pushes(on_github, tmp_path, files, "Autonomous saboteur")
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    on_github.post_status(rnd.head_sha, CI, "success")
    on_github.deliver(Client())
    for ticket in [t for t in tickets() if t["_expected"] == "billing"][:7]:  # the demo watch regresses at 7 bad
        assert wrong(run(ticket))
    rnd.refresh_from_db()
    on_github.post_status(on_github.pull(rnd.revert_pr_number).head_sha, CI, "success")
    on_github.deliver(Client())
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.status == Cycle.Status.REGRESSED
    deliver.sweep()
    titles = [m["blocks"][0]["text"]["text"] for m in fake_slack.messages()]
    assert len(titles) == 4, titles
    opened, merged, settled, reverted = titles
    assert f"PR #{rnd.pr_number} opened" in opened and f"PR #{rnd.pr_number} merged" in merged
    assert f"cycle {cycle.pk} regressed: revert opened" in settled
    assert f"PR #{rnd.revert_pr_number} merged" in reverted and "reverted" in reverted
