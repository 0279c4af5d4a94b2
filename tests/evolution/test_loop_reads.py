"""The loop's reads as the seed names them (issue 29, section B "Reads"): loop_history's filters (R20.23, R20.24),
old target names (R5.21), loop_status's machine and story phases, stuck and next.waits (R21.4, R21.11), and the
/go/run: short link (R4.23). Rows are real; the API is called through a real token.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import Cycle, Round
from grading.models import Entity
from singularity.models import ApiToken
from tests.evolution.page_helpers import in_loop, make_cycle, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(alice) -> APIClient:
    _, key = ApiToken.issue(alice, "bot", is_agent=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def settled(entity: Entity, *, days_ago: int = 1) -> Cycle:
    cycle = make_cycle(
        entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED, at=timezone.now() - timedelta(days=days_ago)
    )
    make_round(cycle, status=Round.Status.SKIPPED, decided_by="alice")
    return cycle


def moved_to(entity: Entity, feature: str) -> None:
    """The entity's file moved to another feature's folder (as the sync records a move)."""
    Entity.objects.filter(pk=entity.pk).update(path=f"features/{feature}/{entity.slug}.scenario.md")


# --- loop_history's filters (R20.23, R20.24) ------------------------------------------------------------------


def test_feature_narrows_the_history_to_the_entities_the_feature_ships_now(agent) -> None:
    layout, publish = in_loop("layout"), in_loop("publish")
    moved_to(layout, "publishing")
    moved_to(publish, "site")
    mine, theirs = settled(layout), settled(publish)
    answer = agent.get("/api/loop/history/", {"feature": "publishing"})
    assert answer.status_code == 200
    assert [row["id"] for row in answer.json()["cycles"]] == [mine.pk]
    moved_to(publish, "publishing")  # an entity moved between features takes its cycles with it
    rows = agent.get("/api/loop/history/", {"feature": "publishing"}).json()["cycles"]
    assert sorted(row["id"] for row in rows) == sorted([mine.pk, theirs.pk])
    assert agent.get("/api/loop/history/", {"feature": "nowhere"}).json() == {
        "cycles": [],
        "count": 0,
        "nextCursor": None,
    }


def test_an_unknown_history_filter_is_refused_naming_it(agent) -> None:
    settled(in_loop())
    answer = agent.get("/api/loop/history/", {"featur": "publishing", "limit": 5})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid"
    detail = answer.json()["detail"]
    assert (
        detail.startswith("featur: not a parameter of GET /api/loop/history/")
        and "feature" in detail
        and "since" in detail
    )


def test_target_kind_alone_narrows_the_history_to_that_kind(agent) -> None:
    from tests.grading.grading_helpers import make_entity

    scenario = settled(in_loop())
    beat = settled(make_entity("pulse", kind="heartbeat", schedule="*/5 * * * *", loop={"enabled": True}))
    rows = agent.get("/api/loop/history/", {"targetKind": "heartbeat"}).json()["cycles"]
    assert [row["id"] for row in rows] == [beat.pk]
    rows = agent.get("/api/loop/history/", {"targetKind": "scenario"}).json()["cycles"]
    assert [row["id"] for row in rows] == [scenario.pk]
    answer = agent.get("/api/loop/history/", {"targetId": "digest"})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("targetKind:")


# --- Old target names (R5.21) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("old", ["workflow", "pipeline"])
def test_a_name_one_deploy_back_reads_as_the_scenario_it_named(agent, old) -> None:
    cycle = settled(in_loop())
    status = agent.get("/api/loop/status/", {"targetKind": old, "targetId": "digest"})
    assert status.status_code == 200
    assert [(e["targetKind"], e["targetId"]) for e in status.json()["entities"]] == [("scenario", "digest")]
    rows = agent.get("/api/loop/history/", {"targetKind": old, "targetId": "digest"}).json()["cycles"]
    assert [row["id"] for row in rows] == [cycle.pk]


def test_chat_reads_as_the_role_and_an_unknown_kind_is_refused_naming_the_kinds(agent) -> None:
    from tests.grading.grading_helpers import make_entity

    make_entity("helpdesk", kind="role", evaluation={"method": "none", "sample": {"maxPerDay": 5}})
    status = agent.get("/api/loop/status/", {"targetKind": "chat", "targetId": "helpdesk"})
    assert status.status_code == 200 and status.json()["entities"][0]["targetKind"] == "role"
    refused = agent.get("/api/loop/status/", {"targetKind": "robot", "targetId": "helpdesk"})
    assert refused.status_code == 400
    assert refused.json()["detail"].startswith("targetKind: 'robot' is not scenario, heartbeat or role")


# --- loop_status: the machine phase, the story phase, stuck, next.waits (R21.11, R21.4) -----------------------

STORY = {
    "analysing": "hypothesize",
    "deciding": "hypothesize",
    "applying": "change",
    "merge_wait": "change",
    "checking": "prove",
    "watching": "prove",
    "reverting": "learn",
    "settled": "learn",
}


def test_live_carries_the_story_phase_and_the_machine_phase_under_machine(agent) -> None:
    from tests.evolution.page_helpers import every_phase

    made = every_phase()
    stuck_seen = 0
    for phase, cycle in made.items():
        if phase == Cycle.Phase.SETTLED:
            continue
        (row,) = agent.get("/api/loop/status/", {"targetKind": "scenario", "targetId": cycle.entity.slug}).json()[
            "entities"
        ]
        assert row["live"]["id"] == cycle.pk
        assert row["live"]["machine"]["phase"] == phase and row["live"]["phase"] == STORY[phase], phase
        stuck = [item for item in row["needsYou"] if item["gate"] == "stuck"]
        if stuck:
            stuck_seen += 1
            assert row["stuck"]["machine"]["phase"] == phase and row["stuck"]["cycleId"] == cycle.pk
            assert row["stuck"]["since"] == stuck[0]["since"] and row["stuck"]["clause"] == stuck[0]["clause"]
        else:
            assert row["stuck"] is None
    assert stuck_seen == 2  # every_phase leaves two steps due for days


def test_one_entitys_awaiting_person_is_under_next_waits(agent) -> None:
    from evolution.steering import cadence

    entity = in_loop()
    person = {"what": "score PR #16", "url": "https://example.org/pr/16"}
    window = {"ready": False, "runIds": [], "reason": "2 of 3 series PRs scored",
              "progress": {"have": 2, "need": 3, "unit": "scored series PRs"}, "awaitingPerson": person}  # fmt: skip
    cadence.record_window(entity, window, timezone.now())
    (row,) = agent.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "digest"}).json()["entities"]
    assert row["next"]["waits"]["awaitingPerson"] == person
    assert row["next"]["meter"] == {"have": 2, "need": 3, "unit": "scored series PRs"}
    assert row["next"]["text"] == "2 of 3 scored series PRs · waiting on you: score PR #16."
    (idle,) = agent.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "digest"}).json()["entities"]
    assert idle["waits"] == row["next"]["waits"]  # the old place still answers, the same record


# --- loop_get: one entity whole (its status and its cycles, each with its grade) ------------------------------


def test_loop_get_answers_one_entitys_status_and_its_cycles_with_their_grades(agent) -> None:
    entity = in_loop()
    older, newer = settled(entity, days_ago=3), settled(entity, days_ago=1)
    settled(in_loop("other"))
    answer = agent.get("/api/loop/get/", {"targetKind": "workflow", "targetId": "digest", "limit": 1})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["entity"]["targetKind"], body["entity"]["targetId"]) == ("scenario", "digest")
    assert body["entity"]["state"] and "next" in body["entity"]
    assert [row["id"] for row in body["cycles"]] == [newer.pk] and "grade" in body["cycles"][0]
    rest = agent.get("/api/loop/get/", {"targetKind": "scenario", "targetId": "digest", "cursor": body["nextCursor"]})
    assert [row["id"] for row in rest.json()["cycles"]] == [older.pk] and rest.json()["nextCursor"] is None


def test_loop_get_needs_one_entity_and_refuses_what_is_no_parameter(agent) -> None:
    in_loop()
    assert agent.get("/api/loop/get/").json()["detail"].startswith("targetKind:")
    missing = agent.get("/api/loop/get/", {"targetKind": "scenario", "targetId": "nope"})
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    odd = agent.get("/api/loop/get/", {"targetKind": "scenario", "targetId": "digest", "since": "2026-01-01"})
    assert odd.status_code == 400 and odd.json()["detail"].startswith("since: not a parameter of GET /api/loop/get/")
