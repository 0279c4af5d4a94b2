"""The breaker counts a confounded change that merged through merge: auto as blind, whatever its check measured
(seed 003 "A change that shipped on its own and could not be measured", R16.2, R19.12) — through a real settle
on the demo brain, on the local forge and on the fake GitHub (real PyGithub, real git): a checked change the
loop merged on its own, a person's hotfix to the same file during the watch, the watch settling confounded,
the entity paused on the spot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evolution.core.outcomes import strength
from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.models import Cycle
from evolution.steering import autonomy
from grading.demo import TRIAGE_PATH
from hitl.models import Notice
from tests.evolution.demo_helpers import drive_until_card, person_commits, press, run, tickets, triage
from tests.evolution.github_helpers import push
from tests.evolution.test_check_end_to_end import LOOP_MODULE, triage_text, with_verdict

pytestmark = [pytest.mark.django_db(transaction=True)]

VALIDATED = """
def verdict(spec, pairs):
    return {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}
"""


def _confounded_settle(embedded, alice, tmp_path, block: str, *, github=None) -> Cycle:
    """Drive the demo's triage to a checked change the loop merged, then a person's hotfix confounds its watch.

    ``github`` (the fake GitHub) puts the brain there: the person pushes to GitHub and the engine syncs.
    """

    def person(files: dict[str, str], message: str) -> None:
        if github is None:
            person_commits(embedded, files, tmp_path, message)
        else:
            from grading.sync import sync_brain

            push(github, tmp_path, "main", files, message=message)
            sync_brain()

    if github is None:
        embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION]
    else:
        github.protection = [DIFF_GATE, VALIDATION]
    person(
        {LOOP_MODULE: with_verdict(embedded, VALIDATED), TRIAGE_PATH: triage_text(embedded, f"  autonomy: {block}\n")},
        "Merge on its own",
    )
    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert rnd.check_verdict["verdict"] == "validated" and rnd.merge_gate == "auto"
    assert cycle.phase == Cycle.Phase.WATCHING, rnd.gate_note  # merged by the loop: the PR was clean
    if github is not None:
        pull = github.pull(rnd.pr_number)
        assert pull.merged and pull.merged_by == "api"  # the loop merged the clean PR at the checked head
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    person(
        {TRIAGE_PATH: definition.replace("- otherwise -> general", "- password -> technical\n- otherwise -> general")},
        "Hotfix: passwords are technical",
    )
    run(failed[0])  # a grade lands: the watch reads the brain's history and settles confounded
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.confounded_by_edit is not None, cycle.reason
    assert strength(cycle) == "measured"  # the check measured it: on strength alone the breaker would let it pass
    return cycle


def test_a_confounded_auto_merged_checked_change_pauses_the_entity(embedded, alice, tmp_path):
    cycle = _confounded_settle(embedded, alice, tmp_path, "{decide: human, merge: auto}")
    why = autonomy.paused(triage())
    assert why is not None and f"cycle {cycle.pk}" in why and "confounded" in why
    assert autonomy.gates(triage()).merge == autonomy.HUMAN
    assert Notice.objects.filter(kind="paused").exists()


def test_on_unmeasured_continue_keeps_autonomy_after_a_confounded_change(embedded, alice, tmp_path):
    _confounded_settle(embedded, alice, tmp_path, "{decide: human, merge: auto, onUnmeasured: continue}")
    assert autonomy.paused(triage()) is None


def test_on_github_a_confounded_auto_merged_checked_change_pauses_the_entity(on_github, settings, alice, tmp_path):
    cycle = _confounded_settle(settings, alice, tmp_path, "{decide: human, merge: auto}", github=on_github)
    why = autonomy.paused(triage())
    assert why is not None and f"cycle {cycle.pk}" in why and "confounded" in why
    assert autonomy.gates(triage()).merge == autonomy.HUMAN
    assert Notice.objects.filter(kind="paused").exists()
