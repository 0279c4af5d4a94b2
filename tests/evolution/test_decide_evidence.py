"""A decide card's page shows the runs its proposal was drawn from, and a cycle's check its pairs' runs, each as
Rate runs shows a run (issue 28)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from evolution.models import Round
from tests.evolution.page_helpers import make_card, make_cycle, make_round
from tests.grading.rating_helpers import LAYOUT_FIT, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db

TICKET = "I was charged twice for my March subscription, please fix it."


def test_a_decide_cards_page_shows_the_runs_its_proposal_was_drawn_from(client: Client, alice) -> None:
    entity = make_entity("triage", metrics={"layout_fit": LAYOUT_FIT})
    shown = make_run(entity)
    shown.input = {"text": TICKET, "_expected": "billing"}
    shown.output = {"result": "technical"}
    shown.save()
    make_grade(shown, criteria=[{"criterion": "Fits", "passed": False, "reasoning": "A billing matter"}], passed=False)
    cycle = make_cycle(entity)
    rnd = make_round(cycle, brief={"runs.json": json.dumps([{"id": str(shown.pk), "status": "succeeded"}])})
    card = make_card(rnd, text="Accept or Skip")
    client.force_login(alice)
    html = client.get(f"/inbox/cards/{card.pk}/").content.decode()
    section = html[html.index('id="evidence-runs"') :]
    assert "The runs it was drawn from (1)" in section
    assert TICKET in section and "A billing matter" in section and "judged failed" in section
    assert 'class="card-text"' in html  # the proposal's text stays, the runs after it
    assert Round.objects.get(pk=rnd.pk).card_id == card.pk


def test_a_round_without_its_briefs_runs_shows_the_cycles_frozen_evidence(client: Client, alice) -> None:
    entity = make_entity("triage", metrics={"layout_fit": LAYOUT_FIT})
    shown = make_run(entity)
    cycle = make_cycle(entity, frozen={"evidenceRunIds": [str(shown.pk)]})
    card = make_card(make_round(cycle), text="Accept or Skip")
    client.force_login(alice)
    html = client.get(f"/inbox/cards/{card.pk}/").content.decode()
    assert "The runs it was drawn from (1)" in html and "weekly" in html  # make_run's input


def test_a_cycles_check_shows_both_runs_of_each_pair(client: Client, alice) -> None:
    entity = make_entity("triage", metrics={"layout_fit": LAYOUT_FIT})
    sides = {}
    for side, label in (("baseline", "technical"), ("challenger", "billing")):
        run = make_run(entity, loop_launched=True)
        run.input, run.output = {"text": TICKET, "_expected": "billing"}, {"result": label, "tasks": {}}
        run.save()
        make_grade(run, criteria=[{"criterion": "Fits", "passed": label == "billing", "reasoning": f"{side} reason"}])
        sides[side] = run
    cycle = make_cycle(entity)
    record = {
        "verdict": "validated",
        "pairs": [
            {"slot": 0, "trial": 1, "label": "ticket 1", "source": "history",
             **{side: {"runId": str(run.pk), "state": "graded", "vector": {}} for side, run in sides.items()}},
            {"slot": 1, "trial": 1, "label": "ticket 2", "source": "history",
             "baseline": {"runId": "00000000-0000-0000-0000-000000000001", "state": "graded"}, "challenger": {"runId": None, "state": "lost"}},
        ],
    }  # fmt: skip
    make_round(cycle, checked_sha="c" * 40, check_verdict=record)
    client.force_login(alice)
    html = client.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    pairs = html[html.index('id="check-pairs-r1"') :]
    pairs = pairs[: pairs.index("</table>")]
    assert pairs.count('class="run-view"') == 2
    assert pairs.count(TICKET) == 2 and "baseline reason" in pairs and "challenger reason" in pairs
    assert "<h4>Expected</h4>" in pairs
