"""An agent withdrawing someone else's queued idea waits on a person's approval card (R18.4, R18.13; issue 29):
the idea stays queued until a person approves; an agent's own idea, and a person's withdraw, need nobody."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.models import Idea
from evolution.steering import supervision
from hitl.actions import answer_card, run_handler
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


def queued_by_a_person(alice) -> Idea:
    entity = looped("triage")
    supervision.hold(entity, actor="carol", reason="quiet week")  # the idea waits in the queue
    body = client_for(alice, "me", agent=False).post(
        "/api/loop/ideas/", {**ENTITY, "text": "Lead with the numbers."}, format="json"
    )
    assert body.status_code == 201, body.json()
    idea = Idea.objects.get(pk=body.json()["ideaId"])
    assert idea.status == Idea.Status.QUEUED
    return idea


def test_an_agent_withdrawing_a_persons_idea_waits_on_a_card_and_the_approve_withdraws_it(alice, bob) -> None:
    idea = queued_by_a_person(alice)
    bot = client_for(alice, "bot")
    asked = bot.post(f"/api/loop/ideas/{idea.pk}/withdraw/", format="json")
    assert asked.status_code == 202, asked.json()
    body = asked.json()
    assert body["withdrawn"] is False and body["cardId"] and body["reason"].startswith("waiting on a person's approval")
    idea.refresh_from_db()
    assert idea.status == Idea.Status.QUEUED
    card = Card.objects.get(pk=body["cardId"])
    assert card.is_pending and card.payload["asker"] == "agent:bot of alice" and f"idea {idea.pk}" in card.text
    again = bot.post(f"/api/loop/ideas/{idea.pk}/withdraw/", format="json")
    assert again.status_code == 202 and again.json()["cardId"] == body["cardId"]
    result = answer_card(card.pk, user=bob, is_agent=False, choice="approve", via="dashboard")
    assert result.ok
    run_handler(card.pk)
    idea.refresh_from_db()
    assert idea.status == Idea.Status.WITHDRAWN


def test_a_declined_withdraw_leaves_the_idea_queued(alice, bob) -> None:
    idea = queued_by_a_person(alice)
    card_id = client_for(alice, "bot").post(f"/api/loop/ideas/{idea.pk}/withdraw/", format="json").json()["cardId"]
    assert answer_card(card_id, user=bob, is_agent=False, choice="decline", via="dashboard").ok
    run_handler(card_id)
    idea.refresh_from_db()
    assert idea.status == Idea.Status.QUEUED


def test_an_agent_withdraws_its_own_idea_and_a_person_anyones_at_once(alice) -> None:
    idea = queued_by_a_person(alice)
    bot = client_for(alice, "bot")
    own = bot.post("/api/loop/ideas/", {**ENTITY, "text": "Shorter subject lines."}, format="json").json()["ideaId"]
    mine = bot.post(f"/api/loop/ideas/{own}/withdraw/", format="json")
    assert mine.status_code == 200 and mine.json()["withdrawn"] is True and mine.json()["cardId"] is None
    person = client_for(alice, "me2", agent=False).post(f"/api/loop/ideas/{idea.pk}/withdraw/", format="json")
    assert person.status_code == 200 and person.json()["withdrawn"] is True


# --- A withdrawal that beats the cycle's take (R18.14) ----------------------------------------------------------


def test_a_withdrawal_that_beats_the_cycles_take_leaves_a_skipped_row_and_spends_nothing(alice) -> None:
    from django.utils import timezone

    from evolution.loop import machine, opening
    from evolution.models import Cycle
    from evolution.steering import ideas

    idea = queued_by_a_person(alice)
    supervision.release(idea.entity, actor="carol", reason="back")
    head = ideas.next_idea(idea.entity)  # the sweep read the head of the queue ...
    ideas.withdraw(idea, "alice")  # ... and the withdrawal landed before its cycle took it
    made = machine.open_cycle(idea.entity, origin=Cycle.Origin.IDEA, idea=head)
    assert not made.opened and made.reason == "the idea was withdrawn before its cycle started"
    [row] = Cycle.objects.filter(entity=idea.entity)
    assert row.status == Cycle.Status.SKIPPED and row.reason == "the idea was withdrawn before its cycle started"
    assert row.claim is None and not row.analysed and not row.rounds.exists()  # no proposer was asked
    assert row.origin == Cycle.Origin.IDEA
    # No rest and no daily slot: the next grade may open a cycle at once.
    assert opening.refusal(idea.entity, origin=Cycle.Origin.GRADE, now=timezone.now()) is None
    idea.refresh_from_db()
    assert idea.status == Idea.Status.WITHDRAWN and idea.cycle_id is None
