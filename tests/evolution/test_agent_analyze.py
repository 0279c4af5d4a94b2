"""An agent's loop_analyze becomes a person's approval card, not a 403 (R20.25, issue 29): the card waits, the
person's Approve opens the cycle on request (exempt from the cooldown and the daily cap, not from a hold), a
Decline opens nothing; a request the gates refuse now is answered 409 with the reason and no card."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.models import Cycle
from hitl.actions import answer_card, run_handler
from hitl.models import Card, Notice
from singularity.models import ApiToken
from tests.evolution.loop_helpers import history, looped

pytestmark = pytest.mark.django_db

ENTITY = {"targetKind": "scenario", "targetId": "triage"}


def client_for(user, name: str = "bot", *, agent: bool = True) -> APIClient:
    _, key = ApiToken.issue(user, name, is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def answer(card: Card, person, choice: str) -> None:
    result = answer_card(card.pk, user=person, is_agent=False, choice=choice, via="dashboard")
    assert result.ok, result.detail
    run_handler(card.pk)


def test_an_agents_analyze_waits_on_a_persons_card_and_asking_again_finds_it(alice) -> None:
    history(looped("triage"), "bggb")
    bot = client_for(alice)
    first = bot.post("/api/loop/analyze/", ENTITY, format="json")
    assert first.status_code == 202, first.json()
    body = first.json()
    assert body["opened"] is False and body["cycleId"] is None and body["cardId"]
    assert body["reason"].startswith("waiting on a person's approval")
    card = Card.objects.get(pk=body["cardId"])
    assert card.is_pending and card.kind == Card.Kind.GRANT and card.payload["asker"] == "agent:bot of alice"
    assert "agent:bot of alice asks to analyze scenario:triage now" in card.text
    assert not Cycle.objects.exists()
    again = bot.post("/api/loop/analyze/", ENTITY, format="json")
    assert again.status_code == 202 and again.json()["cardId"] == body["cardId"]
    assert Card.objects.filter(status=Card.Status.PENDING).count() == 1


def test_a_persons_approve_opens_the_cycle_on_request_and_a_decline_opens_nothing(alice, bob) -> None:
    entity = looped("triage")
    history(entity, "bggb")
    bot = client_for(alice)
    declined = Card.objects.get(pk=bot.post("/api/loop/analyze/", ENTITY, format="json").json()["cardId"])
    answer(declined, bob, "decline")
    assert not Cycle.objects.exists()
    card = Card.objects.get(pk=bot.post("/api/loop/analyze/", ENTITY, format="json").json()["cardId"])
    answer(card, bob, "approve")
    [cycle] = Cycle.objects.filter(entity=entity)
    assert cycle.origin == Cycle.Origin.REQUEST and cycle.requested_by == bob and cycle.claim == entity.pk
    notice = Notice.objects.get(kind="analyzed")
    assert f"cycle {cycle.pk}" in notice.text and "agent:bot of alice" in notice.text


def test_an_agents_analyze_the_gates_refuse_now_is_409_with_the_reason_and_no_card(alice) -> None:
    from evolution.steering import supervision

    entity = looped("triage")
    supervision.hold(entity, actor="carol", reason="freeze for the audit")
    refused = client_for(alice).post("/api/loop/analyze/", ENTITY, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "precondition"
    assert "freeze for the audit" in refused.json()["detail"]
    assert not Card.objects.exists() and not Cycle.objects.exists()


def test_an_approved_analyze_the_gates_refuse_by_then_says_so(alice, bob) -> None:
    from evolution.steering import supervision

    entity = looped("triage")
    card = Card.objects.get(pk=client_for(alice).post("/api/loop/analyze/", ENTITY, format="json").json()["cardId"])
    supervision.hold(entity, actor="carol", reason="freeze for the audit")
    answer(card, bob, "approve")
    assert not Cycle.objects.filter(analysed=True).exists()
    notice = Notice.objects.get(kind="not_applied")
    assert "freeze for the audit" in notice.text
