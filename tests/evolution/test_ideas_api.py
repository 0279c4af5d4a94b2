"""The ideas API (loop_create_idea, loop_list_ideas, loop_cancel_idea) and the Ideas section of the entity page."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.loop import intake, machine
from evolution.models import Cycle, Idea
from hitl.models import Card
from singularity.models import ApiToken
from tests.evolution.loop_helpers import graded, looped

pytestmark = pytest.mark.django_db


def client_for(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def agent(alice) -> APIClient:
    return client_for(alice, agent=True)


def busy(entity) -> Cycle:
    landed = graded(entity, bad=True)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution, window={"runIds": []}).cycle


def create(api: APIClient, text: str = "Lead with the numbers.", slug: str = "triage", kind: str = "scenario"):
    return api.post("/api/loop/ideas/", {"targetKind": kind, "targetId": slug, "text": text}, format="json")


# --- loop_create_idea -----------------------------------------------------------------------


def test_a_persons_post_opens_the_cycle(person) -> None:
    looped()
    answer = create(person)
    assert answer.status_code == 201
    body = answer.json()
    idea = Idea.objects.get()
    assert body == {
        "ideaId": idea.pk,
        "opened": True,
        "reason": f"cycle {idea.cycle_id} opened on it",
        "cycleId": idea.cycle_id,
    }
    assert idea.author == "alice (token script)" and idea.approved


def test_a_post_behind_a_live_cycle_is_a_success_with_opened_false(person) -> None:
    live = busy(looped())
    first, second = create(person).json(), create(person).json()
    assert (first["opened"], first["reason"], first["cycleId"]) == (False, f"cycle {live.pk} is live (Analysing)", None)
    assert second["ideaId"] != first["ideaId"], "posting again queues a second copy"
    assert Idea.objects.filter(status=Idea.Status.QUEUED).count() == 2


def test_an_agents_post_waits_on_an_approval_card(agent) -> None:
    looped()
    body = create(agent).json()
    assert body["opened"] is False and body["reason"] == "waiting on a person's approval"
    idea = Idea.objects.get(pk=body["ideaId"])
    assert not idea.approved and idea.card.kind == Card.Kind.GRANT and idea.author == "alice (agent token bot)"
    assert not Cycle.objects.exists()


@pytest.mark.parametrize(
    ("text", "status", "error", "detail"),
    [
        ("", 409, "precondition", "the idea is empty: write the hypothesis to try"),
        ("x" * 4001, 409, "precondition", "the idea is 4001 characters long; at most 4000"),
    ],
)
def test_a_refused_post_writes_nothing(person, text, status, error, detail) -> None:
    looped()
    answer = create(person, text)
    assert answer.status_code == status and answer.json() == {"error": error, "detail": detail}
    assert not Idea.objects.exists()


def test_an_entity_off_the_loop_is_a_precondition_and_a_missing_one_not_found(person) -> None:
    looped(loop={"enabled": False})
    off = create(person)
    assert off.status_code == 409 and off.json() == {  # as the other loop writes answer a failed precondition
        "error": "precondition",
        "detail": "the loop is off for scenario:triage",
    }
    missing = create(person, slug="ghost")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    bad = person.post("/api/loop/ideas/", {"targetKind": "scenario"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"] == "invalid"
    assert not Idea.objects.exists()


# --- loop_list_ideas and loop_cancel_idea ------------------------------------------------------


def test_the_list_answers_places_statuses_and_what_the_queue_waits_on(agent, person) -> None:
    entity = looped()
    live = busy(entity)
    first, second = create(person).json(), create(person).json()
    body = agent.get("/api/loop/ideas/", {"targetKind": "scenario", "targetId": "triage"}).json()
    assert [(i["id"], i["status"], i["place"]) for i in body["ideas"]] == [
        (first["ideaId"], "queued", "next"),
        (second["ideaId"], "queued", "#2 in queue"),
    ]
    assert body["waitsOn"] == f"Idea {first['ideaId']} waits on cycle {live.pk}, analysing."
    assert agent.get("/api/loop/ideas/", {"targetKind": "scenario"}).status_code == 400
    assert agent.get("/api/loop/ideas/", {"targetKind": "scenario", "targetId": "ghost"}).status_code == 404
    assert len(agent.get("/api/loop/ideas/").json()["ideas"]) == 2


def test_withdraw_answers_the_state_after_the_call(agent, person) -> None:
    entity = looped()
    busy(entity)
    idea_id = create(person).json()["ideaId"]
    # The person who posted it withdraws it (an agent withdrawing a person's idea asks a person first:
    # tests/evolution/test_idea_withdraw_asks.py).
    once = person.post(f"/api/loop/ideas/{idea_id}/withdraw/").json()
    twice = person.post(f"/api/loop/ideas/{idea_id}/withdraw/").json()
    thrice = agent.post(f"/api/loop/ideas/{idea_id}/withdraw/").json()  # withdrawn already: nothing to ask
    assert (
        once
        == twice
        == thrice
        == {
            "withdrawn": True,
            "reason": f"idea {idea_id} is withdrawn: no cycle will take it",
            "targetKind": "scenario",
            "targetId": "triage",
            "cardId": None,
        }
    )
    assert agent.post("/api/loop/ideas/999999/withdraw/").status_code == 404


def test_withdrawing_a_taken_idea_answers_false(person) -> None:
    looped()
    made = create(person).json()
    answer = person.post(f"/api/loop/ideas/{made['ideaId']}/withdraw/").json()
    assert answer["withdrawn"] is False and answer["reason"].startswith(
        f"idea {made['ideaId']} was already taken by cycle"
    )


def test_the_idea_endpoints_are_in_the_schema(person) -> None:
    paths = person.get("/api/schema/?format=json").json()["paths"]
    assert paths["/api/loop/ideas/"]["post"]["operationId"] == "loop_create_idea"
    assert {"201", "400", "404", "409"} <= set(paths["/api/loop/ideas/"]["post"]["responses"])
    assert paths["/api/loop/ideas/"]["get"]["operationId"] == "loop_list_ideas"
    assert paths["/api/loop/ideas/{id}/withdraw/"]["post"]["operationId"] == "loop_cancel_idea"


def test_every_idea_endpoint_needs_authentication() -> None:
    anonymous = APIClient()
    assert anonymous.get("/api/loop/ideas/").status_code in (401, 403)
    assert anonymous.post("/api/loop/ideas/", {}, format="json").status_code in (401, 403)
    assert anonymous.post("/api/loop/ideas/1/withdraw/").status_code in (401, 403)


# --- The Ideas section of the entity page ----------------------------------------------------------


def test_the_entity_page_loads_the_ideas_section(client, alice) -> None:
    entity = looped()
    client.force_login(alice)
    page = client.get(entity.get_absolute_url()).content.decode()
    assert "/evolution/entities/scenario/triage/ideas/" in page
    fragment = client.get("/evolution/entities/scenario/triage/ideas/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="entity-ideas"' in fragment and "<html" not in fragment and "Post idea" in fragment
    whole = client.get("/evolution/entities/scenario/triage/ideas/").content.decode()
    assert "<html" in whole and 'id="entity-ideas"' in whole


def test_posting_from_the_page_queues_behind_the_live_cycle_and_lists_the_queue(client, alice) -> None:
    entity = looped()
    live = busy(entity)
    client.force_login(alice)
    url = "/evolution/entities/scenario/triage/ideas/post/"
    client.post(url, {"text": "First"}, HTTP_HX_REQUEST="true")
    answer = client.post(url, {"text": "Second"}, HTTP_HX_REQUEST="true").content.decode()
    second = Idea.objects.get(text="Second")
    assert f"Idea {second.pk} is queued (#2 in queue)" in answer
    assert "#2 in queue" in answer and "next" in answer and "Withdraw" in answer
    assert f"waits on cycle {live.pk}, analysing." in answer
    assert second.author == "alice"


def test_the_page_withdraws_and_lists_taken_and_withdrawn_ideas(client, alice) -> None:
    entity = looped()
    client.force_login(alice)
    taken = intake.post(entity, "Taken one", author="alice")
    queued = intake.post(entity, "Queued one", author="alice").idea
    answer = client.post(f"/evolution/ideas/{queued.pk}/withdraw/", HTTP_HX_REQUEST="true").content.decode()
    assert f"Idea {queued.pk} is withdrawn: no cycle will take it." in answer
    assert f'href="/evolution/cycles/{taken.cycle.pk}/"' in answer and "Analysing" in answer
    assert 'id="ideas-withdrawn"' in answer and "Queued one" in answer


def test_a_refused_post_from_the_page_says_why_without_javascript(client, alice) -> None:
    entity = looped()
    client.force_login(alice)
    answer = client.post("/evolution/entities/scenario/triage/ideas/post/", {"text": " "}, follow=True)
    assert "Not posted: the idea is empty: write the hypothesis to try." in answer.content.decode()
    assert answer.redirect_chain[-1][0] == entity.get_absolute_url()
    assert not Idea.objects.exists()


def test_an_entity_off_the_loop_shows_no_post_form(client, alice) -> None:
    looped(loop={"enabled": False})
    client.force_login(alice)
    fragment = client.get("/evolution/entities/scenario/triage/ideas/", HTTP_HX_REQUEST="true").content.decode()
    assert "No idea can be posted now: the loop is off for scenario:triage." in fragment
    assert "Post idea" not in fragment
