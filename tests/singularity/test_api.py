"""The REST API for beings: reads, create, start and stop, agent refusals, the schema and docs."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client
from rest_framework.test import APIClient

from singularity.being.actions import create_being, start_on_workers
from singularity.models import ApiToken, Being, Cycle, Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(alice) -> APIClient:
    _, key = ApiToken.issue(alice, "script")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def agent(alice) -> APIClient:
    _, key = ApiToken.issue(alice, "bot", is_agent=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def add_events(being: Being, kinds: list[str]) -> None:
    for kind in kinds:
        being.event_seq += 1
        Event.objects.create(being=being, seq=being.event_seq, cycle=1, kind=kind, data={"n": being.event_seq})
    being.save(update_fields=["event_seq"])


def test_it_requires_authentication() -> None:
    assert APIClient().get("/api/beings/").status_code in (401, 403)
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer sg_not-a-key")
    response = bad.get("/api/beings/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_revoked_token_is_refused(alice) -> None:
    token, key = ApiToken.issue(alice, "old")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at="2026-01-01T00:00:00Z")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/beings/").status_code == 401


def test_a_session_works_too(client: Client, alice) -> None:
    create_being("nova")
    client.force_login(alice)
    assert client.get("/api/beings/").json()["results"][0]["name"] == "nova"


def test_the_list_has_money_as_decimal_strings(person: APIClient) -> None:
    parent = create_being("mother", starting="20")
    being = create_being("kid", starting="9.9843", parent=parent)
    Being.objects.filter(pk=being.pk).update(earned=Decimal("0.1"), api_spent=Decimal("0.0000001"))
    body = person.get("/api/beings/").json()
    assert len(body["results"]) == 2 and body["nextCursor"] is None
    kid = body["results"][0]
    assert kid == {
        "name": "kid",
        "url": "http://testserver/api/beings/kid/",
        "status": "created",
        "host": "",
        "cycle": 0,
        "remainingUsd": "9.9843",
        "earnedUsd": "0.10",
        "netProfitUsd": "0.0999999",
        "parent": "mother",
    }


def test_detail_has_budget_net_profit_and_mind(person: APIClient) -> None:
    parent = create_being("mother")
    being = create_being("nova.v2", starting="10", parent=parent, system_prompt="Earn.")
    create_being("kid", parent=being)
    Being.objects.filter(pk=being.pk).update(
        remaining=Decimal("9.5"), api_spent=Decimal("0.4"), instance_spent=Decimal("0.1"), total_tokens=1234
    )
    body = person.get("/api/beings/nova.v2/").json()
    assert body["budget"] == {
        "starting": "10.00",
        "remaining": "9.50",
        "apiSpent": "0.40",
        "instanceSpent": "0.10",
        "totalTokens": 1234,
        "earned": "0.00",
    }
    assert body["netProfitUsd"] == "-0.50"
    assert body["mind"]["systemPrompt"] == "Earn."
    assert body["mind"]["children"] == ["kid"]
    assert body["mind"]["parent"] == "mother"
    assert (body["status"], body["cycle"]) == ("created", 0)


def test_an_unknown_being_is_404(person: APIClient) -> None:
    assert person.get("/api/beings/nobody/").status_code == 404
    assert person.post("/api/beings/nobody/stop/").status_code == 404
    assert person.get("/api/beings/nobody/events/").status_code == 404


def test_create_makes_a_being(person: APIClient) -> None:
    response = person.post("/api/beings/", {"name": "nova", "startingUsd": "2.50", "stimulus": "go"}, format="json")
    assert response.status_code == 201
    assert response.json()["budget"]["starting"] == "2.50"
    assert Being.objects.get(name="nova").remaining == Decimal("2.50")


def test_create_uses_the_default_starting_balance(person: APIClient, settings) -> None:
    settings.SINGULARITY_STARTING_BALANCE_USD = Decimal("7")
    response = person.post("/api/beings/", {"name": "nova"}, format="json")
    assert response.json()["budget"]["remaining"] == "7.00"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "bad name", "startingUsd": "1"}, "name"),
        ({"name": "ok", "startingUsd": "-1"}, "startingUsd"),
        ({"name": "ok", "startingUsd": "1e400000"}, "startingUsd"),
        ({"name": "ok", "startingUsd": "0.0000000000001"}, "startingUsd"),
        ({"startingUsd": "1"}, "name"),
    ],
)
def test_create_names_the_bad_field(person: APIClient, data: dict, field: str) -> None:
    response = person.post("/api/beings/", data, format="json")
    assert response.status_code == 400
    body = response.json()
    assert (body["error"], body["detail"].split(":")[0]) == ("invalid", field)
    assert [key for key in body if key not in ("error", "detail")] == [field]
    assert not Being.objects.exists()


def test_create_refuses_a_taken_name(person: APIClient) -> None:
    create_being("nova")
    response = person.post("/api/beings/", {"name": "nova"}, format="json")
    assert response.status_code == 400
    assert "already exists" in response.json()["name"][0]


def test_an_agent_may_not_create(agent: APIClient) -> None:
    response = agent.post("/api/beings/", {"name": "nova"}, format="json")
    assert response.status_code == 403
    assert response.json() == {"error": "refused", "detail": "agents may not create beings; a person must"}
    assert not Being.objects.exists()


def test_an_agent_may_not_start(agent: APIClient) -> None:
    create_being("nova")
    response = agent.post("/api/beings/nova/start/")
    assert response.status_code == 403
    assert response.json() == {"error": "refused", "detail": "agents may not start beings; a person must"}
    assert Being.objects.get(name="nova").status == "created"


def test_an_agent_may_read_and_stop(agent: APIClient) -> None:
    start_on_workers(create_being("nova"), by="alice")
    assert agent.get("/api/beings/nova/").status_code == 200
    response = agent.post("/api/beings/nova/stop/")
    assert response.status_code == 200
    assert response.json()["status"] == "stopped"
    stopped = Event.objects.get(being__name="nova", kind="stopped")
    assert stopped.data["by"] == "alice (agent token bot)"


def test_a_person_starts_and_the_journal_names_them(person: APIClient) -> None:
    create_being("nova")
    response = person.post("/api/beings/nova/start/")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["host"]) == ("running", "worker")
    assert Event.objects.get(being__name="nova", kind="started").data["by"] == "alice (token script)"


def test_starting_a_running_being_is_a_conflict(person: APIClient) -> None:
    start_on_workers(create_being("nova"), by="alice")
    response = person.post("/api/beings/nova/start/")
    assert response.status_code == 409
    assert response.json() == {"error": "conflict", "detail": "being nova is already running (on Celery workers)"}


def test_stopping_a_created_being_is_a_conflict(person: APIClient) -> None:
    create_being("nova")
    response = person.post("/api/beings/nova/stop/")
    assert response.status_code == 409
    assert response.json()["detail"] == "being nova is not running (status created)"


def test_cycles_are_newest_first_paginated_with_money_strings(person: APIClient) -> None:
    being = create_being("nova")
    for number in range(1, 4):
        Cycle.objects.create(being=being, number=number, spent=Decimal("0.0001"), balance_after=Decimal("9.9999"))
    body = person.get("/api/beings/nova/cycles/?limit=2").json()
    assert body["nextCursor"] and "count" not in body
    assert [c["number"] for c in body["results"]] == [3, 2]
    assert body["results"][0]["spentUsd"] == "0.0001"
    assert body["results"][0]["balanceAfterUsd"] == "9.9999"
    rest = person.get(f"/api/beings/nova/cycles/?limit=2&cursor={body['nextCursor']}").json()
    assert [c["number"] for c in rest["results"]] == [1] and rest["nextCursor"] is None


def test_events_filter_by_kind_and_tail_after_seq(person: APIClient) -> None:
    being = create_being("nova")
    add_events(being, ["started", "warning", "cycle_started", "warning", "warning"])
    every = person.get("/api/beings/nova/events/").json()
    assert [e["seq"] for e in every["results"]] == [1, 2, 3, 4, 5]
    warnings = person.get("/api/beings/nova/events/?kind=warning").json()
    assert [e["seq"] for e in warnings["results"]] == [2, 4, 5]
    tail = person.get("/api/beings/nova/events/?kind=warning&afterSeq=2").json()
    assert [e["seq"] for e in tail["results"]] == [4, 5]
    assert tail["results"][0]["data"] == {"n": 4}


@pytest.mark.parametrize(("query", "named"), [("kind=bogus", "kind:"), ("afterSeq=-1", "afterSeq:")])
def test_events_refuse_bad_filters(person: APIClient, query: str, named: str) -> None:
    create_being("nova")
    response = person.get(f"/api/beings/nova/events/?{query}")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert response.json()["detail"].startswith(named)


def test_the_schema_documents_every_endpoint(person: APIClient) -> None:
    schema = person.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path, method in [
        ("/api/beings/", "get"),
        ("/api/beings/", "post"),
        ("/api/beings/{name}/", "get"),
        ("/api/beings/{name}/cycles/", "get"),
        ("/api/beings/{name}/events/", "get"),
        ("/api/beings/{name}/start/", "post"),
        ("/api/beings/{name}/stop/", "post"),
    ]:
        assert method in paths[path], (path, method)
    start = paths["/api/beings/{name}/start/"]["post"]["responses"]
    assert set(start) >= {"200", "403", "409"}
    assert start["403"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/Error"
    money = schema["components"]["schemas"]["Budget"]["properties"]["remaining"]
    assert (money["type"], money["format"]) == ("string", "decimal")
    kinds = {p["name"]: p for p in paths["/api/beings/{name}/events/"]["get"]["parameters"]}
    assert "warning" in kinds["kind"]["schema"]["enum"] and "afterSeq" in kinds
    assert schema["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"


def test_swagger_ui_is_served_without_a_cdn(client: Client, alice) -> None:
    client.force_login(alice)
    page = client.get("/api/docs/").content.decode()
    assert "cdn.jsdelivr" not in page and "unpkg.com" not in page
    bundle = re.search(r'src="([^"]*swagger-ui-bundle\.js)"', page)
    assert bundle is not None
    assert client.get(bundle.group(1)).status_code == 200
    assert 'url: "/api/schema/"' in page
