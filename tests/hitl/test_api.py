"""The cards API: list and filter, read, answer as a person, agents refused, cancel, notices, the schema."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from hitl.actions import post_notice
from singularity.models import ApiToken
from tests.hitl.helpers import RATING_FORM, make_card

pytestmark = pytest.mark.django_db


def client_for(user, *, is_agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "agent" if is_agent else "script", is_agent=is_agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def test_cards_are_listed_newest_first_and_filtered(alice):
    make_card(key="decide:a")
    make_card(key="rating:b", kind="rating", options=RATING_FORM)
    api = client_for(alice)
    keys = [c["key"] for c in api.get("/api/cards/").json()["results"]]
    assert keys == ["rating:b", "decide:a"]
    assert [c["key"] for c in api.get("/api/cards/?kind=rating").json()["results"]] == ["rating:b"]
    assert api.get("/api/cards/?status=answered").json()["results"] == []


def test_a_person_answers_through_the_api(alice, handler, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).post(
            f"/api/cards/{card.pk}/answer/", {"choice": "skip", "note": "off-brand"}, format="json"
        )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["status"], body["respondedBy"], body["answeredVia"]) == ("answered", "alice", "api")
    assert body["answer"]["note"] == "off-brand"
    assert len(handler.calls) == 1
    again = client_for(alice).post(f"/api/cards/{card.pk}/answer/", {"choice": "accept"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "already_closed"


def test_an_agent_token_is_refused_and_the_card_stays_pending(alice, handler):
    card = make_card()
    agent = client_for(alice, is_agent=True)
    response = agent.post(f"/api/cards/{card.pk}/answer/", {"choice": "accept"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "unauthorized_responder"
    assert agent.post(f"/api/cards/{card.pk}/cancel/", {}, format="json").json()["code"] == "unauthorized_responder"
    assert agent.get(f"/api/cards/{card.pk}/").json()["status"] == "pending", "agents may read"
    assert handler.calls == []


def test_a_form_card_takes_values_and_refuses_a_bad_one(alice, handler, django_capture_on_commit_callbacks):
    card = make_card(kind="rating", key="rating:form", options=RATING_FORM)
    api = client_for(alice)
    bad = api.post(
        f"/api/cards/{card.pk}/answer/", {"choice": "rate", "values": {"clarity": 0, "pacing": 50}}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    with django_capture_on_commit_callbacks(execute=True):
        ok = api.post(
            f"/api/cards/{card.pk}/answer/", {"choice": "rate", "values": {"clarity": 9, "pacing": 50}}, format="json"
        )
    assert ok.status_code == 200 and ok.json()["answer"]["values"] == {"clarity": 9, "pacing": 50}


def test_a_person_cancels_through_the_api(bob, handler, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(bob).post(f"/api/cards/{card.pk}/cancel/", {"note": "obsolete"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert handler.calls[0][1] == "cancelled"


def test_notices_are_listed(alice):
    post_notice(producer="loop", kind="skipped", title="Cycle 3 skipped")
    assert [n["title"] for n in client_for(alice).get("/api/notices/").json()["results"]] == ["Cycle 3 skipped"]


def test_the_schema_documents_the_answer_and_its_refusals(alice):
    client = APIClient()
    client.force_login(alice)
    schema = client.get("/api/schema/?format=json").json()
    answer = schema["paths"]["/api/cards/{id}/answer/"]["post"]
    assert {"200", "400", "403", "409"} <= set(answer["responses"])
    assert "/api/notices/" in schema["paths"]
