"""The supervision tools over REST (loop_hold, loop_release, loop_rearm, loop_ack_failure, the rows) and the entity
page's Supervision section (CONFORMANCE R20.1–R20.3, R20.18–R20.20).
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from evolution.models import ActionLog, Cycle, Supervision
from evolution.steering import supervision
from hitl.actions import answer_card, run_handler
from hitl.models import Card
from singularity.models import ApiToken
from tests.evolution.loop_helpers import looped, settled_cycle
from tests.evolution.watch_helpers import HOUR, T0

pytestmark = pytest.mark.django_db

GROUPS = {"loop": {"groups": {"audience": {}}}}


def client_for(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "watcher" if agent else "script", is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def agent(alice) -> APIClient:
    return client_for(alice, agent=True)


@pytest.fixture
def triage():
    return looped("triage", loop={"group": ["audience"]}, manifest=GROUPS)


ENTITY = {"targetKind": "scenario", "targetId": "triage"}


# --- loop_hold / loop_release ---------------------------------------------------------------


def test_a_person_holds_and_releases_an_entity(person, triage):
    held = person.post("/api/loop/hold/", {**ENTITY, "reason": "migrating billing"}, format="json")
    assert held.status_code == 200, held.json()
    body = held.json()
    assert body["applied"] is True and body["card"] is None
    row = body["row"]
    assert (row["kind"], row["targetKind"], row["targetId"], row["group"]) == ("hold", "scenario", "triage", None)
    assert row["actor"] == "alice" and row["reason"] == "migrating billing"
    assert supervision.hold_refusal(triage) == "held by alice: migrating billing"
    released = person.post("/api/loop/release/", {**ENTITY, "reason": "done"}, format="json")
    assert released.status_code == 200 and released.json()["row"]["kind"] == "release"
    assert supervision.hold_refusal(triage) is None
    assert list(ActionLog.objects.order_by("id").values_list("op", "actor")) == [
        ("hold", "alice"),
        ("release", "alice"),
    ]


def test_a_group_hold_over_the_api(person, triage):
    answer = person.post("/api/loop/hold/", {"group": "audience", "reason": "meetings down"}, format="json")
    assert answer.status_code == 200
    assert answer.json()["row"]["group"] == "audience" and answer.json()["row"]["targetKind"] is None
    assert supervision.hold_refusal(triage) == "held by alice (lock group audience): meetings down"
    assert ActionLog.objects.get().subject == "constitution/MANIFEST.yaml"


@pytest.mark.parametrize(
    ("body", "status", "error", "detail"),
    [
        ({**ENTITY, "reason": ""}, 409, "precondition", "a hold needs a reason"),
        ({"targetKind": "scenario", "reason": "x"}, 400, "invalid", "targetId: name both targetKind and targetId"),
        ({"targetId": "triage", "reason": "x"}, 400, "invalid", "targetKind: name both targetKind and targetId"),
        ({"reason": "x"}, 400, "invalid", "targetKind, targetId: name the entity"),
        ({**ENTITY, "group": "audience", "reason": "x"}, 400, "invalid", "group: name a lock group or an entity"),
        ({"targetKind": "scenario", "targetId": "nope", "reason": "x"}, 404, "not_found", "scenario:nope names no"),
        ({"group": "ghost", "reason": "x"}, 403, "refused", "lock group 'ghost' is not declared under loop.groups"),
    ],
)
def test_hold_refusals(person, triage, body, status, error, detail):
    answer = person.post("/api/loop/hold/", body, format="json")
    assert answer.status_code == status
    assert answer.json()["error"] == error and answer.json()["detail"].startswith(detail), answer.json()
    assert not Supervision.objects.exists()


def test_a_release_with_nothing_held_is_a_precondition(person, triage):
    answer = person.post("/api/loop/release/", {**ENTITY, "reason": "x"}, format="json")
    assert answer.status_code == 409
    assert answer.json() == {"error": "precondition", "detail": "nothing to release: no hold stands on scenario:triage"}


def test_only_staff_supervise(charlie, triage):
    answer = client_for(charlie).post("/api/loop/hold/", {**ENTITY, "reason": "x"}, format="json")
    assert answer.status_code == 403 and answer.json()["error"] == "refused"
    assert not Supervision.objects.exists()


def test_every_endpoint_needs_authentication():
    anonymous = APIClient()
    for path in ("/api/loop/hold/", "/api/loop/release/", "/api/loop/rearm/", "/api/loop/dismiss/"):
        assert anonymous.post(path, {}, format="json").status_code in (401, 403)
    assert anonymous.get("/api/loop/supervision/").status_code in (401, 403)


# --- Agents -----------------------------------------------------------------------------------


def test_an_agent_holds_at_once_and_is_named_as_the_agent(agent, triage):
    answer = agent.post("/api/loop/hold/", {**ENTITY, "reason": "error rate 40%"}, format="json")
    assert answer.status_code == 200 and answer.json()["applied"] is True
    assert answer.json()["row"]["actor"] == "agent:watcher of alice"
    assert supervision.hold_refusal(triage) == "held by agent:watcher of alice: error rate 40%"


def test_an_agents_release_answers_202_with_the_card_and_applies_when_a_person_approves(agent, triage, bob):
    supervision.hold(triage, actor="bob", reason="looking")
    answer = agent.post("/api/loop/release/", {**ENTITY, "reason": "recovered"}, format="json")
    assert answer.status_code == 202
    body = answer.json()
    assert body["applied"] is False and body["row"] is None
    card = Card.objects.get(pk=body["card"]["id"])
    assert body["card"]["url"].endswith(card.get_absolute_url())
    assert body["detail"] == f"waits on a person's approval: {card.title}"
    assert supervision.hold_refusal(triage) == "held by bob: looking"
    # The agent cannot approve its own request over the cards API.
    refused = agent.post(f"/api/cards/{card.pk}/answer/", {"choice": "approve"}, format="json")
    assert refused.status_code == 403
    assert answer_card(card.pk, user=bob, is_agent=False, choice="approve", via="dashboard").ok
    run_handler(card.pk)
    assert supervision.hold_refusal(triage) is None
    assert Supervision.objects.get(kind="release").actor == "agent:watcher of alice (approved by bob)"


def test_an_agents_rearm_and_dismissal_wait_on_cards(agent, triage):
    failed = settled_cycle(triage, Cycle.Status.FAILED, at=T0)
    rearm = agent.post("/api/loop/rearm/", {**ENTITY, "reason": "seen"}, format="json")
    dismiss = agent.post("/api/loop/dismiss/", {"cycleId": failed.pk, "reason": "outage"}, format="json")
    assert rearm.status_code == dismiss.status_code == 202
    assert Card.objects.filter(producer="loop-supervise", kind=Card.Kind.GRANT).count() == 2
    assert not Supervision.objects.exists()


# --- loop_rearm / loop_ack_failure ----------------------------------------------------------


def test_a_person_rearms_and_dismisses(person, triage):
    failed = settled_cycle(triage, Cycle.Status.FAILED, at=T0)
    rearm = person.post("/api/loop/rearm/", {**ENTITY, "reason": "read the regressions"}, format="json")
    assert rearm.status_code == 200 and rearm.json()["row"]["kind"] == "rearm"
    assert supervision.last_rearm(triage) is not None
    dismiss = person.post("/api/loop/dismiss/", {"cycleId": failed.pk, "reason": "outage"}, format="json")
    assert dismiss.status_code == 200 and dismiss.json()["row"]["cycleId"] == failed.pk
    assert not supervision.failures_unread(triage).exists()
    again = person.post("/api/loop/dismiss/", {"cycleId": failed.pk}, format="json")
    assert again.status_code == 409 and again.json()["error"] == "precondition"
    missing = person.post("/api/loop/dismiss/", {"cycleId": 99999}, format="json")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    no_group = person.post("/api/loop/rearm/", {"group": "audience"}, format="json")
    assert no_group.status_code == 400 and no_group.json()["detail"].startswith("targetKind:")


# --- The rows --------------------------------------------------------------------------------


def test_the_rows_of_an_entity_include_its_groups_and_say_what_holds_it(agent, triage, time_machine):
    other = looped("billing")
    time_machine.move_to(T0, tick=False)
    supervision.hold({"group": "audience"}, actor="kpi", reason="numbers down")
    time_machine.move_to(T0 + HOUR, tick=False)
    supervision.rearm(triage, actor="alice", reason="ack")
    supervision.hold(other, actor="bob", reason="not triage's")
    failed = settled_cycle(triage, Cycle.Status.FAILED, at=T0 + 2 * HOUR)
    body = agent.get("/api/loop/supervision/", {"targetKind": "scenario", "targetId": "triage"}).json()
    assert body["held"] == "held by kpi (lock group audience): numbers down"
    assert body["lastRearm"].startswith("2026-03-02T10:00:00")
    assert body["groups"] == [{"group": "audience", "held": True}]
    assert [(r["kind"], r["group"], r["targetId"], r["actor"]) for r in body["rows"]] == [
        ("rearm", None, "triage", "alice"),
        ("hold", "audience", None, "kpi"),
    ]
    assert [f["cycleId"] for f in body["unreadFailures"]] == [failed.pk]
    group = agent.get("/api/loop/supervision/", {"group": "audience"}).json()
    assert group["held"] == "held by kpi (lock group audience): numbers down" and len(group["rows"]) == 1
    fleet = agent.get("/api/loop/supervision/").json()
    assert fleet["held"] is None and len(fleet["rows"]) == 3
    assert agent.get("/api/loop/supervision/", {"targetKind": "scenario"}).status_code == 400
    assert agent.get("/api/loop/supervision/", {"group": "ghost"}).json()["error"] == "refused"
    assert agent.get("/api/loop/supervision/", {"limit": "0"}).status_code == 400


def test_the_schema_documents_the_tools(person):
    schema = person.get("/api/schema/", {"format": "json"}).json()
    operations = {
        op["operationId"] for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)
    }
    assert {"loop_hold", "loop_release", "loop_rearm", "loop_ack_failure", "loop_supervision"} <= operations
    release = schema["paths"]["/api/loop/release/"]["post"]["responses"]
    assert {"200", "202", "403", "404", "409"} <= set(release)


# --- The entity page's section ---------------------------------------------------------------


@pytest.fixture
def staff(client: Client, bob) -> Client:
    client.force_login(bob)
    return client


BASE = "/evolution/entities/scenario/triage/supervision/"


def test_the_entity_page_loads_the_section(staff, triage):
    page = staff.get("/evolution/entities/scenario/triage/").content.decode()
    assert f'hx-get="{BASE}"' in page


def test_the_section_lists_rows_with_who_and_why_and_holds_from_its_form(staff, triage):
    answer = staff.post(f"{BASE}hold/", {"target": "entity", "reason": "quiet week please"}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert 'id="entity-supervision"' in html and "Held scenario:triage." in html
    assert "No new cycle opens: held by bob: quiet week please" in html
    assert "<td>bob</td>" in html and "quiet week please" in html
    assert supervision.hold_refusal(triage) == "held by bob: quiet week please"
    released = staff.post(f"{BASE}release/", {"target": "entity", "reason": "ok"}, HTTP_HX_REQUEST="true")
    assert "Released scenario:triage." in released.content.decode()
    assert supervision.hold_refusal(triage) is None


def test_the_section_holds_a_group_and_refuses_without_a_reason(staff, triage):
    no_reason = staff.post(f"{BASE}hold/", {"target": "entity", "reason": ""}, HTTP_HX_REQUEST="true")
    assert "a hold needs a reason" in no_reason.content.decode()
    assert not Supervision.objects.exists()
    staff.post(f"{BASE}hold/", {"target": "group:audience", "reason": "kpi"}, HTTP_HX_REQUEST="true")
    assert Supervision.objects.get().group == "audience"


def test_without_htmx_a_move_redirects_to_the_entity_page(staff, triage):
    answer = staff.post(f"{BASE}rearm/", {"reason": "ack"})
    assert answer.status_code == 302 and answer["Location"] == "/evolution/entities/scenario/triage/"
    assert Supervision.objects.get().kind == "rearm"


def test_the_section_dismisses_a_failure(staff, triage):
    failed = settled_cycle(triage, Cycle.Status.FAILED, at=T0)
    section = staff.get(BASE, HTTP_HX_REQUEST="true").content.decode()
    assert f'id="failure-{failed.pk}"' in section
    answer = staff.post(f"{BASE}dismiss/", {"cycle": failed.pk, "reason": "outage"}, HTTP_HX_REQUEST="true")
    assert f'id="failure-{failed.pk}"' not in answer.content.decode()
    assert not supervision.failures_unread(triage).exists()


def test_a_person_who_is_not_staff_reads_but_cannot_move(client, charlie, triage):
    client.force_login(charlie)
    section = client.get(BASE, HTTP_HX_REQUEST="true")
    assert section.status_code == 200 and "<form" not in section.content.decode()
    assert client.post(f"{BASE}hold/", {"reason": "x"}).status_code == 403
    assert not Supervision.objects.exists()


def test_the_section_needs_a_login(client, triage):
    assert client.get(BASE).status_code == 302
