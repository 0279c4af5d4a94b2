"""Issue 27: an agent's approval cards waiting on people are capped across producers — an idea's approval, a
supervision move and a loop-settings widening count together; the next ask is refused 429 naming the cap and
how many wait, with nothing written."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.models import Idea
from hitl.models import Card
from singularity.models import ApiToken
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db

ENTITY = {"targetKind": "scenario", "targetId": "triage"}


def client_for(user, name: str, *, agent: bool = True) -> APIClient:
    _, key = ApiToken.issue(user, name, is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def post_idea(api: APIClient, text: str):
    return api.post("/api/loop/ideas/", {**ENTITY, "text": text}, format="json")


def test_ideas_and_supervision_asks_count_toward_one_cap_per_agent(alice, settings) -> None:
    settings.LOOP_AGENT_MAX_PENDING_CARDS = 2
    looped("triage")
    bot, other, person = client_for(alice, "bot"), client_for(alice, "other"), client_for(alice, "me", agent=False)
    assert person.post("/api/loop/hold/", {**ENTITY, "reason": "audit"}, format="json").status_code == 200
    assert post_idea(bot, "Lead with the numbers.").status_code == 201  # one card waits
    assert bot.post("/api/loop/release/", {**ENTITY, "reason": "done"}, format="json").status_code == 202  # two
    ideas_before = Idea.objects.count()
    refused = post_idea(bot, "Shorter subject lines.")
    assert refused.status_code == 429, refused.json()
    body = refused.json()
    assert body["error"] == "too_many_pending"
    assert body["detail"].startswith("agent:bot of alice has 2 asks waiting on a person (the cap is 2,")
    assert Idea.objects.count() == ideas_before  # nothing written
    release = bot.post("/api/loop/release/", {**ENTITY, "reason": "again"}, format="json")
    assert release.status_code == 429 and "the cap is 2" in release.json()["detail"]
    assert Card.objects.filter(status="pending").count() == 2
    # Another agent has its own count; a person is never capped.
    assert post_idea(other, "Shorter subject lines.").status_code == 201
    assert post_idea(person, "Shorter subject lines.").status_code == 201


def test_an_answered_card_makes_room(alice, bob, settings) -> None:
    from hitl.actions import answer_card

    settings.LOOP_AGENT_MAX_PENDING_CARDS = 1
    looped("triage")
    bot = client_for(alice, "bot")
    assert post_idea(bot, "Lead with the numbers.").status_code == 201
    assert post_idea(bot, "Shorter subject lines.").status_code == 429
    card = Card.objects.get(status="pending")
    assert answer_card(card.pk, user=bob, is_agent=False, choice="decline", via="dashboard").ok
    assert post_idea(bot, "Shorter subject lines.").status_code == 201
