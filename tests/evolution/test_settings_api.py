"""The loop-settings tools over REST: loop_join, loop_set, loop_widen — targets, dry runs, refusals, agents, the schema."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from evolution.models import ActionLog
from hitl.models import Card
from singularity.models import ApiToken
from tests.evolution.settings_helpers import DIGEST, DIGEST_TEXT, MANIFEST, PULSE, settings_brain

pytestmark = pytest.mark.django_db


def client_for(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings)


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def agent(alice) -> APIClient:
    return client_for(alice, agent=True)


DIGEST_TARGET = {"targetKind": "scenario", "targetId": "digest"}


def test_a_dry_run_answers_the_files_and_writes_nothing(sb, agent) -> None:
    head = sb.head()
    body = {**DIGEST_TARGET, "key": "loop.maxChangedLines", "value": 100, "dryRun": True}
    response = agent.post("/api/loop/set/", body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["ok"] and answer["dryRun"] and answer["changed"] and answer["commit"] is None
    (entry,) = answer["files"]
    assert entry["path"] == DIGEST and "+  maxChangedLines: 100" in entry["diff"]
    assert sb.head() == head and not ActionLog.objects.exists()


def test_an_agents_narrowing_write_is_made_and_logged_against_the_entity(sb, agent) -> None:
    dry = agent.post("/api/loop/set/", {**DIGEST_TARGET, "key": "loop.maxChangedLines", "value": 100,
                                        "dryRun": True}, format="json").json()  # fmt: skip
    expect = {f["path"]: f["base"] for f in dry["files"]}
    body = {**DIGEST_TARGET, "key": "loop.maxChangedLines", "value": 100, "expect": expect}
    answer = agent.post("/api/loop/set/", body, format="json").json()
    assert answer["commit"] == sb.head() and answer["changed"]
    row = ActionLog.objects.get()
    assert (row.actor, row.op, row.subject, row.entity) == ("alice", "loop_set", "scenario:digest", sb.digest)


def test_both_halves_null_name_the_brain_tier(sb, person) -> None:
    body = {"targetKind": None, "targetId": None, "key": "loop.threshold", "value": 0.6}
    answer = person.post("/api/loop/set/", body, format="json").json()
    assert answer["files"][0]["path"] == MANIFEST
    assert ActionLog.objects.get().subject == MANIFEST


def test_naming_only_one_half_is_refused(sb, person) -> None:
    response = person.post("/api/loop/set/", {"targetKind": "scenario", "key": "loop.threshold", "value": 0.6},
                           format="json")  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"] == "invalid" and "targetId" in response.json()["detail"]


def test_an_unknown_entity_is_not_found(sb, person) -> None:
    body = {"targetKind": "scenario", "targetId": "ghost", "key": "loop.threshold", "value": 0.6}
    response = person.post("/api/loop/set/", body, format="json")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_a_write_that_would_break_an_entity_is_refused_naming_it(sb, person) -> None:
    body = {**DIGEST_TARGET, "key": "loop.trigger.minFailures", "value": 9}
    response = person.post("/api/loop/set/", body, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == "refused" and "scenario:digest" in response.json()["detail"]


def test_loop_set_refuses_a_widening_naming_it(sb, person) -> None:
    body = {**DIGEST_TARGET, "key": "loop.autonomy.decide", "value": "auto"}
    response = person.post("/api/loop/set/", body, format="json")
    assert response.status_code == 403
    answer = response.json()
    assert answer["error"] == "refused" and "loop_widen" in answer["detail"]
    assert answer["widened"] == [
        {"subject": "scenario:digest", "knob": "loop.autonomy.decide", "from": "human", "to": "auto"}
    ]


def test_an_agent_cannot_widen_directly_its_loop_widen_waits_on_a_card(sb, agent) -> None:
    head = sb.head()
    body = {**DIGEST_TARGET, "key": "loop.autonomy.decide", "value": "auto"}
    response = agent.post("/api/loop/widen/", body, format="json")
    assert response.status_code == 202
    answer = response.json()
    assert answer["pending"] and answer["cardId"] and answer["commit"] is None
    assert answer["widened"][0]["knob"] == "loop.autonomy.decide"
    assert sb.head() == head and not ActionLog.objects.exists()
    card = Card.objects.get(pk=answer["cardId"])
    assert (card.kind, card.producer) == ("widen", "loop-settings")
    # The agent cannot answer its own card either.
    refused = agent.post(f"/api/cards/{card.pk}/answer/", {"choice": "approve"}, format="json")
    assert refused.status_code == 403
    card.refresh_from_db()
    assert card.status == "pending"


def test_a_persons_loop_widen_is_made(sb, person) -> None:
    body = {**DIGEST_TARGET, "key": "loop.autonomy.decide", "value": "auto"}
    response = person.post("/api/loop/widen/", body, format="json")
    assert response.status_code == 200
    answer = response.json()
    assert answer["commit"] == sb.head() and not answer["pending"]
    assert yaml.safe_load(sb.show(DIGEST).split("---\n")[1])["loop"]["autonomy"] == {"decide": "auto"}
    assert ActionLog.objects.get().op == "loop_widen"


def test_loop_widen_dry_run_answers_widened_and_writes_nothing(sb, agent) -> None:
    body = {**DIGEST_TARGET, "key": "loop.autonomy.merge", "value": "auto", "dryRun": True}
    answer = agent.post("/api/loop/widen/", body, format="json").json()
    assert answer["dryRun"] and not answer["pending"] and answer["widened"][0]["knob"] == "loop.autonomy.merge"
    assert not Card.objects.exists() and sb.show(DIGEST) == DIGEST_TEXT


def test_the_kill_switch_asks_nobody_and_turning_it_back_on_is_refused_to_loop_set(sb, agent) -> None:
    off = agent.post("/api/loop/set/", {"key": "loop.enabled", "value": False}, format="json")
    assert off.status_code == 200 and off.json()["commit"]
    assert not sb.digest.loop_enabled
    back = agent.post("/api/loop/set/", {"key": "loop.enabled", "value": True}, format="json")
    assert back.status_code == 403 and back.json()["widened"][0] == {
        "subject": MANIFEST, "knob": "loop.enabled", "from": False, "to": True
    }  # fmt: skip


def test_join_needs_a_daily_cap_for_an_unattended_entity_and_resumes_it(sb, agent) -> None:
    target = {"targetKind": "heartbeat", "targetId": "pulse"}
    refused = agent.post("/api/loop/join/", target, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "precondition"
    assert "dailyCap" in refused.json()["detail"]
    joined = agent.post("/api/loop/join/", {**target, "dailyCap": 10}, format="json")
    assert joined.status_code == 200
    assert joined.json()["resumed"] is True and joined.json()["commit"] == sb.head()
    written = yaml.safe_load(sb.show(PULSE).split("---\n")[1])
    assert written["evaluation"]["sample"]["maxPerDay"] == 10 and written["loop"]["enabled"] is True


def test_join_refuses_the_brain_tier(sb, person) -> None:
    response = person.post("/api/loop/join/", {}, format="json")
    assert response.status_code == 400 and response.json()["error"] == "invalid"


def test_writes_need_staff(sb, charlie) -> None:
    response = client_for(charlie).post("/api/loop/set/", {"key": "loop.threshold", "value": 0.6}, format="json")
    assert response.status_code == 403 and "staff" in response.json()["detail"]


def test_writes_need_authentication(sb) -> None:
    for path in ("/api/loop/join/", "/api/loop/set/", "/api/loop/widen/"):
        assert APIClient().post(path, {}, format="json").status_code in (401, 403)


def test_the_schema_carries_the_three_tools(person) -> None:
    schema = person.get("/api/schema/?format=json").json()
    operations = {op["operationId"]: path for path, item in schema["paths"].items() for op in item.values()}
    assert operations["loop_join"] == "/api/loop/join/"
    assert operations["loop_set"] == "/api/loop/set/"
    assert operations["loop_widen"] == "/api/loop/widen/"
