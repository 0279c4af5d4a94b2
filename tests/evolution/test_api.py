"""The loop's REST API and the reads behind it: loop_status, loop_history (filters, cursor, limit), loop_get_cycle,
loop_analyze (an agent's ask waits on a person's card), and the OpenAPI schema.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import Cycle, Round
from evolution.reads import history
from singularity.models import ApiToken
from tests.evolution.page_helpers import (
    every_phase,
    graded_run,
    in_loop,
    make_cycle,
    make_lesson,
    make_round,
    recall,
)
from tests.grading.grading_helpers import make_entity

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


def cycles_over(entity, count: int, *, start=None) -> list[Cycle]:
    """``count`` settled cycles of ``entity`` opened an hour apart, oldest first."""
    start = start or timezone.now() - timedelta(days=30)
    made = []
    for index in range(count):
        cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED,
                           at=start + timedelta(hours=index))  # fmt: skip
        make_round(cycle, status=Round.Status.SKIPPED, decided_by="alice")
        made.append(cycle)
    return made


# --- Authentication -----------------------------------------------------------------


def test_every_endpoint_needs_authentication() -> None:
    anonymous = APIClient()
    for path in ("/api/loop/status/", "/api/loop/history/", "/api/loop/cycles/1/"):
        assert anonymous.get(path).status_code in (401, 403)
    assert anonymous.post("/api/loop/analyze/", {}, format="json").status_code in (401, 403)


def test_a_session_reads_too(client, alice) -> None:
    client.force_login(alice)
    assert client.get("/api/loop/status/").status_code == 200


# --- loop_status ------------------------------------------------------------------------


def test_status_answers_the_fleet_and_one_entity(agent) -> None:
    made = every_phase()
    body = agent.get("/api/loop/status/").json()
    # One entity per phase; needs you: the decide card, the merge, the revert, and two steps due for days (stuck).
    assert len(body["entities"]) == len(Cycle.Phase.values) and body["needsYou"] == 5
    deciding = made["deciding"]
    one = agent.get("/api/loop/status/", {"targetKind": "scenario", "targetId": deciding.entity.slug}).json()
    (row,) = one["entities"]
    assert row["state"] == "waiting_on_you" and row["live"]["id"] == deciding.pk
    (item,) = row["needsYou"]
    assert item["gate"] == "decide" and item["round"] == 1 and item["card"]["url"].endswith("/")
    assert item["until"].endswith("Z") or "+" in item["until"]  # an ISO instant


def test_status_refuses_half_a_target_and_names_it(agent) -> None:
    response = agent.get("/api/loop/status/", {"targetKind": "scenario"})
    assert response.status_code == 400
    assert response.json() == {
        "error": "invalid",
        "detail": "targetId: name both targetKind and targetId, or neither (the whole fleet)",
    }
    assert agent.get("/api/loop/status/", {"targetId": "digest"}).json()["detail"].startswith("targetKind:")


def test_status_of_an_unknown_entity_is_not_found(agent) -> None:
    response = agent.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "nope"})
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# --- loop_history -----------------------------------------------------------------------


def test_history_pages_newest_first_with_a_cursor(agent) -> None:
    entity = in_loop()
    made = cycles_over(entity, 5)
    first = agent.get("/api/loop/history/", {"limit": 2}).json()
    assert [row["id"] for row in first["cycles"]] == [made[4].pk, made[3].pk]
    assert first["count"] == 2 and first["nextCursor"]
    second = agent.get("/api/loop/history/", {"limit": 2, "cursor": first["nextCursor"]}).json()
    assert [row["id"] for row in second["cycles"]] == [made[2].pk, made[1].pk]
    last = agent.get("/api/loop/history/", {"limit": 2, "cursor": second["nextCursor"]}).json()
    assert [row["id"] for row in last["cycles"]] == [made[0].pk] and last["nextCursor"] is None


def test_history_breaks_ties_of_the_same_opening_by_id() -> None:
    entity = in_loop()
    at = timezone.now() - timedelta(days=1)
    twins = [make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED, at=at) for _ in range(3)]
    page = history.history(limit=1)
    seen = [page["cycles"][0]["id"]]
    while page["nextCursor"]:
        page = history.history(limit=1, cursor=page["nextCursor"])
        seen += [row["id"] for row in page["cycles"]]
    assert seen == sorted((c.pk for c in twins), reverse=True)


def test_history_row_carries_the_seed_columns(agent) -> None:
    entity = in_loop()
    now = timezone.now()
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED, at=now - timedelta(hours=5),
                       proposed_at=now - timedelta(hours=4), applied_at=now - timedelta(hours=3), completed_at=now,
                       spent_usd=Decimal("0.0123"),
                       watch_verdict={"verdict": "validated", "comparator": "count", "n": 5})  # fmt: skip
    rnd = make_round(cycle, status=Round.Status.MERGED, decided_by="alice", pr_number=7,
                     pr_url="http://forge/pulls/7", merge_sha="m" * 40)  # fmt: skip
    lesson = make_lesson(rnd)
    (row,) = agent.get("/api/loop/history/").json()["cycles"]
    assert row["id"] == cycle.pk and row["targetKind"] == "scenario" and row["targetId"] == "digest"
    assert row["origin"] == "grade" and row["status"] == "validated" and row["phase"] == "settled"
    assert row["rounds"] == 1 and row["pr"] == {"number": 7, "url": "http://forge/pulls/7", "status": "merged"}
    assert row["decidedBy"] == "alice" and row["lessonId"] == lesson.pk
    assert row["strength"] == "measured" and row["grade"] == {"label": "Improvement", "n": 5}
    assert row["spentUsd"] == "0.0123"
    for key in ("startedAt", "proposedAt", "appliedAt", "completedAt"):
        assert isinstance(row[key], str) and row[key][:4].isdigit()


def test_a_live_or_skipped_cycle_has_no_strength_and_no_grade() -> None:
    entity = in_loop()
    cycles_over(entity, 1)
    make_cycle(entity, phase=Cycle.Phase.ANALYSING)
    rows = history.history()["cycles"]
    assert [(r["strength"], r["grade"]) for r in rows] == [(None, None), (None, None)]


def test_history_filters_by_entity_and_by_movement(agent) -> None:
    digest, other = in_loop("digest"), in_loop("other")
    old = cycles_over(digest, 1, start=timezone.now() - timedelta(days=14))[0]
    moved = make_cycle(digest, phase=Cycle.Phase.WATCHING, at=timezone.now() - timedelta(days=14),
                       moved_at=timezone.now() - timedelta(hours=2))  # fmt: skip
    cycles_over(other, 1, start=timezone.now() - timedelta(hours=1))
    mine = agent.get("/api/loop/history/", {"targetKind": "scenario", "targetId": "digest"}).json()["cycles"]
    assert {row["id"] for row in mine} == {old.pk, moved.pk}
    since = (timezone.now() - timedelta(days=3)).isoformat()
    recent = agent.get("/api/loop/history/", {"targetKind": "scenario", "targetId": "digest", "since": since})
    assert [row["id"] for row in recent.json()["cycles"]] == [moved.pk]  # opened two weeks ago, moved today


@pytest.mark.parametrize("limit", ["0", "101", "ten", "2.5"])
def test_history_refuses_a_limit_outside_one_to_a_hundred(agent, limit) -> None:
    response = agent.get("/api/loop/history/", {"limit": limit})
    assert response.status_code == 400 and response.json()["detail"].startswith("limit:")


def test_history_limit_bounds_are_allowed() -> None:
    entity = in_loop()
    cycles_over(entity, 3)
    assert history.history(limit=1)["count"] == 1 and history.history(limit=100)["count"] == 3
    with pytest.raises(ValueError, match="limit: '101' is not a whole number from 1 to 100"):
        history.history(limit=101)


def test_history_refuses_a_bad_cursor_a_bad_instant_and_half_a_target(agent) -> None:
    assert agent.get("/api/loop/history/", {"cursor": "garbage!"}).json()["detail"].startswith("cursor:")
    assert agent.get("/api/loop/history/", {"since": "last tuesday"}).json()["detail"].startswith("since:")
    assert agent.get("/api/loop/history/", {"targetId": "digest"}).status_code == 400
    response = agent.get("/api/loop/history/", {"targetKind": "scenario", "targetId": "nope"})
    assert response.status_code == 404


def test_history_reads_in_a_fixed_number_of_queries(django_assert_max_num_queries, monkeypatch) -> None:
    """status's own reads: strength and grade are evolution.verdicts' (see the next test)."""
    monkeypatch.setattr(history, "strength_of", lambda cycle: None)
    monkeypatch.setattr(history, "grade_of", lambda cycle: None)
    entity = in_loop()
    cycles_over(entity, 1)
    with django_assert_max_num_queries(3) as one:
        history.history()
    cycles_over(entity, 19, start=timezone.now() - timedelta(days=20))
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert history.history()["count"] == 20


def test_history_with_strength_and_grade_reads_in_a_fixed_number_of_queries(django_assert_max_num_queries) -> None:
    entity = in_loop()
    cycles_over(entity, 1)
    with django_assert_max_num_queries(10) as one:
        history.history()
    cycles_over(entity, 19, start=timezone.now() - timedelta(days=20))
    with django_assert_max_num_queries(len(one.captured_queries)):
        history.history()


# --- loop_get_cycle -------------------------------------------------------------------------


def test_get_cycle_answers_rounds_pairs_and_lessons(agent) -> None:
    entity = in_loop()
    runs = [graded_run(entity, passed=False) for _ in range(2)]
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED,
                       window={"runIds": [str(r.pk) for r in runs], "reason": "2 of 2 bad", "ready": True})  # fmt: skip
    first = make_round(cycle, 1, status=Round.Status.REFINED, decided_by="bob")
    second = make_round(cycle, 2, parent=first, status=Round.Status.MERGED, decided_by="alice", merge_sha="m" * 40,
                        check_run_ids=["c1", "c2", "c3"], baseline_run_ids=["b1", "b2", "b3"],
                        check_verdict={"verdict": "validated", "pairs": [1, 2, 3]}, cost_usd=Decimal("0.5"))  # fmt: skip
    lesson = make_lesson(second)
    earlier = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED,
                         at=cycle.started_at - timedelta(days=1))  # fmt: skip
    recall(make_lesson(make_round(earlier, status=Round.Status.SKIPPED), outcome="skipped"), first)
    body = agent.get(f"/api/loop/cycles/{cycle.pk}/").json()
    assert [r["number"] for r in body["rounds"]] == [1, 2] and body["rounds"][1]["parent"] == 1
    # A record without the check's own pairs (hand-built here) pairs the ids in order.
    assert body["rounds"][1]["pairs"] == [
        {"slot": 0, "trial": 1, "input": "", "baseline": "b1", "candidate": "c1"},
        {"slot": 1, "trial": 1, "input": "", "baseline": "b2", "candidate": "c2"},
        {"slot": 2, "trial": 1, "input": "", "baseline": "b3", "candidate": "c3"},
    ]
    assert body["rounds"][1]["costUsd"] == "0.50" and body["rounds"][1]["files"] == [
        "features/digest/digest.scenario.md"
    ]
    assert [run["id"] for run in body["windowRuns"]] == [str(r.pk) for r in runs]
    assert body["windowRuns"][0]["bad"] is True
    assert [lesson_row["id"] for lesson_row in body["lessons"]] == [lesson.pk]
    assert body["remembered"][0]["label"] == f"cycle {earlier.pk} · r1 · skipped"
    assert body["strength"] == "measured"  # the check measured; the watch left no record


def test_get_cycle_of_nothing_is_not_found(agent) -> None:
    response = agent.get("/api/loop/cycles/999/")
    assert response.status_code == 404 and response.json() == {
        "error": "not_found",
        "detail": "cycle 999 names no cycle",
    }


# --- loop_analyze ----------------------------------------------------------------------------


def test_analyze_opens_a_cycle_for_a_person(person, alice) -> None:
    entity = in_loop()
    graded_run(entity, passed=False)
    response = person.post("/api/loop/analyze/", {"targetKind": "scenario", "targetId": "digest"}, format="json")
    assert response.status_code == 200
    cycle = Cycle.objects.get(entity=entity)
    assert response.json() == {"cycleId": cycle.pk, "opened": True, "reason": "opened", "cardId": None}
    assert cycle.origin == "request" and cycle.requested_by == alice


def test_analyze_answers_why_not(person) -> None:
    entity = make_entity("quiet")
    response = person.post("/api/loop/analyze/", {"targetKind": "scenario", "targetId": "quiet"}, format="json")
    body = response.json()
    assert response.status_code == 200 and body["opened"] is False
    assert body["reason"] == f"the loop is off for {entity}"


def test_analyze_by_an_agent_token_waits_on_a_persons_card(agent) -> None:
    in_loop()
    response = agent.post("/api/loop/analyze/", {"targetKind": "scenario", "targetId": "digest"}, format="json")
    assert response.status_code == 202 and response.json()["cardId"]  # tests/evolution/test_agent_analyze.py
    assert not Cycle.objects.exists()


def test_analyze_refuses_a_missing_field_and_an_unknown_entity(person) -> None:
    response = person.post("/api/loop/analyze/", {"targetKind": "scenario"}, format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("targetId:")
    response = person.post("/api/loop/analyze/", {"targetKind": "scenario", "targetId": "nope"}, format="json")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# --- The schema ---------------------------------------------------------------------------------


def test_the_loop_endpoints_are_in_the_schema(person) -> None:
    schema = person.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert paths["/api/loop/status/"]["get"]["operationId"] == "loop_status"
    assert paths["/api/loop/history/"]["get"]["operationId"] == "loop_history"
    assert paths["/api/loop/cycles/{id}/"]["get"]["operationId"] == "loop_get_cycle"
    analyze = paths["/api/loop/analyze/"]["post"]
    assert analyze["operationId"] == "loop_analyze" and {"200", "202", "400", "404", "409", "429"} <= set(
        analyze["responses"]
    )
    history = {p["name"] for p in paths["/api/loop/history/"]["get"]["parameters"]}
    assert {"targetKind", "targetId", "since", "limit", "cursor"} <= history
