"""loop_widen's approved card mints a loop:autonomy grant scoped to the agent that asked (R12.22, issue 29): for
24 hours every further widening by that agent goes through unasked, with no call limit; another agent, a
widening past the lifetime, an "Approve once" and a loosening of spend or checks still ask a person."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import ActionLog, WidenGrant
from hitl.actions import answer_card, run_handler
from hitl.models import Card
from singularity.models import ApiToken
from tests.evolution.settings_helpers import settings_brain

pytestmark = pytest.mark.django_db

DIGEST = {"targetKind": "scenario", "targetId": "digest"}
PRICING = {"targetKind": "scenario", "targetId": "pricing"}


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings)


def client_for(user, name: str = "bot") -> APIClient:
    _, key = ApiToken.issue(user, name, is_agent=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def widen(api: APIClient, target: dict, key: str, value: object) -> dict:
    response = api.post("/api/loop/widen/", {**target, "key": key, "value": value}, format="json")
    assert response.status_code in (200, 202), response.json()
    return {**response.json(), "status": response.status_code}


def answer(card_id: str, person, choice: str = "approve") -> None:
    result = answer_card(card_id, user=person, is_agent=False, choice=choice, via="dashboard")
    assert result.ok, result.detail
    run_handler(card_id)


def test_an_approved_widen_mints_a_grant_and_the_agents_next_widening_goes_through_unasked(sb, alice, bob) -> None:
    bot = client_for(alice)
    asked = widen(bot, DIGEST, "loop.autonomy.decide", "auto")
    assert asked["status"] == 202 and asked["pending"]
    answer(asked["cardId"], bob)
    grant = WidenGrant.objects.get()
    assert grant.asker == "agent:bot of alice" and grant.granted_by == bob and grant.max_calls is None
    assert timedelta(hours=23, minutes=59) < grant.expires_at - timezone.now() <= timedelta(hours=24)
    # Inside the scope and the lifetime: another entity, another knob, no card.
    later = widen(bot, PRICING, "loop.autonomy.merge", "auto")
    assert later["status"] == 200 and not later["pending"] and later["commit"] == sb.head()
    assert sb.pricing.terms["loop"]["autonomy"]["merge"] == "auto"
    assert Card.objects.count() == 1
    row = ActionLog.objects.filter(subject="scenario:pricing").get()
    assert row.op == "loop_widen" and row.actor == f"agent:bot of alice (grant {grant.pk} approved by bob)"
    grant.refresh_from_db()
    assert grant.calls == 1


def test_the_grant_is_the_asking_agents_alone_and_lasts_24_hours(sb, alice, bob) -> None:
    bot = client_for(alice)
    answer(widen(bot, DIGEST, "loop.autonomy.decide", "auto")["cardId"], bob)
    other = widen(client_for(alice, "helper"), PRICING, "loop.autonomy.decide", "auto")
    assert other["status"] == 202 and other["pending"]
    with time_machine.travel(timezone.now() + timedelta(hours=24, minutes=1)):
        late = widen(bot, PRICING, "loop.autonomy.merge", "auto")
    assert late["status"] == 202 and late["pending"]


def test_approve_once_makes_the_write_and_mints_no_grant(sb, alice, bob) -> None:
    bot = client_for(alice)
    card_id = widen(bot, DIGEST, "loop.autonomy.decide", "auto")["cardId"]
    assert [o["value"] for o in Card.objects.get(pk=card_id).options] == ["approve", "approve_once", "decline"]
    answer(card_id, bob, "approve_once")
    assert sb.digest.terms["loop"]["autonomy"]["decide"] == "auto"
    assert not WidenGrant.objects.exists()
    assert widen(bot, PRICING, "loop.autonomy.merge", "auto")["status"] == 202


def test_a_declined_card_mints_nothing(sb, alice, bob) -> None:
    bot = client_for(alice)
    answer(widen(bot, DIGEST, "loop.autonomy.decide", "auto")["cardId"], bob, "decline")
    assert not WidenGrant.objects.exists()


def test_a_loosening_of_spend_still_asks_under_a_grant(sb, alice, bob) -> None:
    bot = client_for(alice)
    answer(widen(bot, DIGEST, "loop.autonomy.decide", "auto")["cardId"], bob)
    loosened = widen(bot, PRICING, "loop.maxAnalysesPerDay", 50)
    assert loosened["status"] == 202 and loosened["pending"] and loosened["loosened"]


def test_a_person_revokes_a_grant_in_the_admin_and_the_agent_asks_again(sb, alice, bob, client) -> None:
    bot = client_for(alice)
    answer(widen(bot, DIGEST, "loop.autonomy.decide", "auto")["cardId"], bob)
    grant = WidenGrant.objects.get()
    client.force_login(alice)
    response = client.post(
        "/admin/evolution/widengrant/", {"action": "revoke", "_selected_action": [grant.pk]}, follow=True
    )
    assert response.status_code == 200 and b"Revoked 1 grant(s)." in response.content
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    assert ActionLog.objects.get(op="widen_grant_revoke").actor == "alice"
    assert widen(bot, PRICING, "loop.autonomy.merge", "auto")["status"] == 202
