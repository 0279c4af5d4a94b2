"""The episodes API: eval_list_episodes, eval_get_episode, a person's close by id (R22.6, R22.7, R22.21)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from rest_framework.test import APIClient

from grading.models import Episode
from singularity.models import ApiToken
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import make_role, prices, said

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def client_for(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture(autouse=True)
def _prices(settings):
    prices(settings)


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def agent(alice) -> APIClient:
    return client_for(alice, agent=True)


def three_episodes(fake_gateway, role, people) -> list[Episode]:
    for hour, person in enumerate(people):
        with time_machine.travel(T0 + timedelta(hours=hour), tick=False):
            said(fake_gateway, role, person, f"Hello from hour {hour}")
    return list(Episode.objects.order_by("opened_at"))


def test_episodes_are_listed_newest_first_with_their_shape_and_never_their_words(fake_gateway, agent, alice, bob):
    role = make_role()
    first, second = three_episodes(fake_gateway, role, [alice, bob])
    body = agent.get("/api/episodes/?role=helpdesk").json()
    assert [e["runId"] for e in body["results"]] == [str(second.pk), str(first.pk)]
    row = body["results"][1]
    assert row["role"] == "helpdesk" and row["status"] == "open" and row["ending"] == "still open"
    assert row["turns"] == 2 and row["mixedVersions"] is False and row["grade"] is None
    assert isinstance(row["costUsd"], str)
    assert "Hello from hour" not in str(body)


def test_the_list_pages_with_a_cursor_and_a_limit(fake_gateway, agent, alice, bob, charlie):
    role = make_role()
    episodes = three_episodes(fake_gateway, role, [alice, bob, charlie])
    page = agent.get("/api/episodes/?role=helpdesk&limit=2").json()
    assert [e["runId"] for e in page["results"]] == [str(episodes[2].pk), str(episodes[1].pk)]
    rest = agent.get(f"/api/episodes/?role=helpdesk&limit=2&cursor={page['nextCursor']}").json()
    assert [e["runId"] for e in rest["results"]] == [str(episodes[0].pk)] and rest["nextCursor"] is None


def test_the_list_needs_a_role_that_exists(agent):
    assert agent.get("/api/episodes/").json() == {"error": "invalid", "detail": "role: required (the role's id)"}
    response = agent.get("/api/episodes/?role=nobody")
    assert response.status_code == 404 and "'nobody' names no chat role" in response.json()["detail"]


def test_one_episode_is_read_with_its_dialog(fake_gateway, agent, alice):
    role = make_role()
    fake_gateway.script(Reply(content="Hello Alice"))
    said(fake_gateway, role, alice, "Hi")
    episode = Episode.objects.get()
    body = agent.get(f"/api/episodes/{episode.pk}/").json()
    assert body["runId"] == str(episode.pk)
    assert [(t["seq"], t["role"], t["text"]) for t in body["dialog"]] == [
        (1, "person", "Hi"),
        (2, "role", "Hello Alice"),
    ]
    assert body["dialog"][1]["versionHash"] == episode.role_versions[0]
    assert agent.get("/api/episodes/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_a_person_closes_an_episode_by_id_and_a_second_close_answers_null(fake_gateway, person, alice):
    said(fake_gateway, make_role(), alice, "Hi")
    episode = Episode.objects.get()
    first = person.post(f"/api/episodes/{episode.pk}/close/").json()
    assert first["closed"] is True and first["episode"]["closedBy"] == "person"
    assert person.post(f"/api/episodes/{episode.pk}/close/").json() == {"closed": False, "episode": None}


def test_an_agent_token_may_not_close_an_episode_by_id(fake_gateway, agent, alice):
    said(fake_gateway, make_role(), alice, "Hi")
    episode = Episode.objects.get()
    response = agent.post(f"/api/episodes/{episode.pk}/close/")
    assert response.status_code == 403 and response.json()["error"] == "refused"
    assert Episode.objects.get().status == "open"


def test_the_episode_endpoints_are_in_the_schema(person):
    paths = person.get("/api/schema/?format=json").json()["paths"]
    assert "get" in paths["/api/episodes/"]
    assert "get" in paths["/api/episodes/{run_id}/"]
    assert "post" in paths["/api/episodes/{run_id}/close/"]
