"""A decide card's page shows the runs its proposal was drawn from, each as Rate runs shows a run (issue 28)."""

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
