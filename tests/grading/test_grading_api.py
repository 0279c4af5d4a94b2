"""The grading REST API: reads with filters, the rating door over HTTP, grade now, the schema."""

from __future__ import annotations

import importlib.util
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from grading.models import Execution, Grade, Rating, RatingSubmission
from singularity.models import ApiToken
from tests.grading.rating_helpers import JUDGE, make_entity, make_grade, make_run

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


def graded_run(entity, *, hours_ago: float = 1, **metrics) -> Execution:
    run = make_run(entity, completed_at=timezone.now() - timedelta(hours=hours_ago))
    make_grade(run, metrics={"layout_fit": 0.75, "quality": 0.8, "cost_usd": "0.0123", **metrics})
    return run


def rating_body(run: Execution, *ratings: dict, key: str = "k1") -> dict:
    return {"runKind": run.run_kind, "runId": str(run.id), "idempotencyKey": key, "ratings": list(ratings)}


# --- reads --------------------------------------------------------------------------------------


def test_reads_need_authentication() -> None:
    assert APIClient().get("/api/entities/").status_code in (401, 403)


def test_entities_list_filters_by_kind_and_status(agent) -> None:
    make_entity("digest")
    make_entity("pulse", kind="heartbeat", load_error="schedule: required")
    body = agent.get("/api/entities/").json()
    assert [e["id"] for e in body["results"]] == ["heartbeat:pulse", "scenario:digest"]
    assert [e["id"] for e in agent.get("/api/entities/?kind=heartbeat").json()["results"]] == ["heartbeat:pulse"]
    errors = agent.get("/api/entities/?status=error").json()["results"]
    assert [(e["id"], e["status"], e["loadError"]) for e in errors] == [
        ("heartbeat:pulse", "error", "schedule: required")
    ]
    assert [e["id"] for e in agent.get("/api/entities/?status=ok").json()["results"]] == ["scenario:digest"]


def test_a_bad_filter_is_refused_naming_it(person) -> None:
    response = person.get("/api/entities/?kind=robot")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("kind: 'robot' is not one of")
    assert person.get("/api/runs/?graded=maybe").status_code == 400
    assert "entity: 'scenario:nope'" in person.get("/api/runs/?entity=scenario:nope").json()["detail"]


def test_an_entity_reads_with_terms_provenance_and_calibration(person) -> None:
    entity = make_entity(provenance={"evaluation.sample.rate": "manifest"})
    body = person.get("/api/entities/scenario/digest/").json()
    assert body["terms"]["evaluation"]["human"]["agreement"]["minPairs"] == 5
    assert body["provenance"]["evaluation.sample.rate"] == "manifest"
    assert body["calibration"] == [
        {
            "metricId": "layout_fit",
            "status": "low",
            "pairs": 0,
            "agreement": None,
            "reason": "low: 0 of 5 pairs under the current judge",
            "chance": {"statistic": "weighted κ (quadratic)", "value": None, "low": None, "high": None},
            "warning": "",
        }
    ]
    assert person.get(f"/api/entities/{entity.target_kind}/{entity.slug}/calibration/").json() == body["calibration"]
    assert person.get("/api/entities/scenario/nope/").status_code == 404


def test_runs_list_filters_and_pages_with_money_as_text(person) -> None:
    entity, other = make_entity("digest"), make_entity("other")
    graded = [graded_run(entity, hours_ago=n) for n in (3, 2)]
    ungraded = make_run(entity, sampling=Execution.Sampling.SKIPPED_RATE)
    running = make_run(entity, status=Execution.Status.RUNNING)
    graded_run(other)
    rows = person.get("/api/runs/?entity=scenario:digest").json()["results"]
    assert len(rows) == 4
    assert rows[0]["costUsd"] == "0.0123"
    assert {r["id"] for r in person.get("/api/runs/?entity=scenario:digest&graded=true").json()["results"]} == {
        str(run.id) for run in graded
    }
    assert {r["id"] for r in person.get("/api/runs/?entity=scenario:digest&graded=false").json()["results"]} == {
        str(ungraded.id),
        str(running.id),
    }
    assert [r["id"] for r in person.get("/api/runs/?status=running").json()["results"]] == [str(running.id)]
    page = person.get("/api/runs/?limit=2").json()
    assert len(page["results"]) == 2 and page["nextCursor"] and "count" not in page  # a cursor: no count of every run
    seen = [r["id"] for r in page["results"]]
    while page["nextCursor"]:
        page = person.get("/api/runs/", {"limit": 2, "cursor": page["nextCursor"]}).json()
        seen += [r["id"] for r in page["results"]]
    assert len(seen) == len(set(seen)) == 5


def test_a_run_reads_with_its_grade_and_ratings(person, bob) -> None:
    run = graded_run(make_entity())
    Rating.objects.create(execution=run, metric_id="layout_fit", user=bob, value=4, normalized=0.75, note="ok")
    body = person.get(f"/api/runs/{run.id}/").json()
    assert body["grade"]["metrics"]["cost_usd"] == "0.0123"
    assert body["grade"]["judge"] == JUDGE
    assert body["grade"]["costUsd"] == "0.00"
    assert body["ratings"][0] | {"createdAt": None, "updatedAt": None} == {
        "metricId": "layout_fit",
        "user": "bob",
        "value": "4.000000",
        "normalized": 0.75,
        "note": "ok",
        "createdAt": None,
        "updatedAt": None,
    }
    assert person.get(f"/api/runs/{uuid.uuid4()}/").status_code == 404


def test_the_report_puts_people_beside_the_judge(person, alice, bob, charlie) -> None:
    run = graded_run(make_entity())
    Grade.objects.filter(execution=run).update(criteria=[{"criterion": "Names every task", "passed": True}])
    for user, value in ((alice, 0.25), (bob, 0.5), (charlie, 1.0)):
        Rating.objects.create(execution=run, metric_id="layout_fit", user=user, value=1, normalized=value)
    body = person.get(f"/api/runs/{run.id}/report/").json()
    layout = next(m for m in body["metrics"] if m["id"] == "layout_fit")
    assert (layout["judge"], layout["people"], layout["raters"]) == (0.75, 0.5, 3)
    helpful = next(m for m in body["metrics"] if m["id"] == "helpful")
    assert (helpful["judge"], helpful["people"], helpful["raters"]) == (None, None, 0)
    assert body["criteria"] == [{"criterion": "Names every task", "passed": True}]
    assert body["judge"]["model"] == JUDGE["model"] and body["passed"] is True


def test_grades_list_filters_by_entity_and_status(agent) -> None:
    entity = make_entity()
    graded_run(entity)
    booked = make_run(entity)
    make_grade(booked, status=Grade.Status.BOOKED)
    assert len(agent.get("/api/grades/?entity=scenario:digest").json()["results"]) == 2
    rows = agent.get("/api/grades/?status=booked").json()["results"]
    assert [r["runId"] for r in rows] == [str(booked.id)]


# --- the rating door over HTTP -----------------------------------------------------------------


def test_a_person_rates_through_the_api(person) -> None:
    run = graded_run(make_entity())
    response = person.post("/api/ratings/", rating_body(run, {"metricId": "layout_fit", "value": 4}), format="json")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "code": "ok", "detail": f"1 rating(s) recorded on {run}", "written": 1}
    assert Rating.objects.get().normalized == 0.75


def test_a_retry_answers_the_same_and_writes_once(person) -> None:
    run = graded_run(make_entity())
    body = rating_body(run, {"metricId": "layout_fit", "value": 4})
    first = person.post("/api/ratings/", body, format="json").json()
    assert person.post("/api/ratings/", body, format="json").json() == first
    assert Rating.objects.count() == 1 and RatingSubmission.objects.count() == 1


def test_an_agent_tokens_rating_waits_on_a_persons_card(agent) -> None:
    run = graded_run(make_entity())
    response = agent.post("/api/ratings/", rating_body(run, {"metricId": "layout_fit", "value": 4}), format="json")
    assert response.status_code == 202  # R4.8: tests/grading/test_agent_rating.py
    assert response.json()["code"] == "pending" and response.json()["cardId"]
    assert not Rating.objects.exists()


@pytest.mark.parametrize(
    ("make", "rating", "status", "code"),
    [
        (lambda e: make_run(e), {"metricId": "layout_fit", "value": 9}, 400, "invalid"),
        (
            lambda e: make_run(e, status=Execution.Status.RUNNING),
            {"metricId": "layout_fit", "value": 4},
            409,
            "precondition",
        ),
        (lambda e: make_run(e, loop_launched=True), {"metricId": "layout_fit", "value": 4}, 403, "refused"),
    ],
)
def test_each_refusal_has_its_status(person, make, rating, status, code) -> None:
    run = make(make_entity())
    response = person.post("/api/ratings/", rating_body(run, rating), format="json")
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert not Rating.objects.exists()


def test_an_unknown_run_is_404_and_a_missing_key_400(person) -> None:
    missing = {
        "runKind": "workflow",
        "runId": str(uuid.uuid4()),
        "idempotencyKey": "k",
        "ratings": [{"metricId": "x", "value": 1}],
    }
    assert person.post("/api/ratings/", missing, format="json").status_code == 404
    run = graded_run(make_entity())
    no_key = rating_body(run, {"metricId": "layout_fit", "value": 4})
    del no_key["idempotencyKey"]
    response = person.post("/api/ratings/", no_key, format="json")
    assert (response.status_code, response.json()["detail"]) == (400, "idempotencyKey: required")
    assert person.post("/api/ratings/", [1, 2], format="json").status_code == 400


def test_a_rating_through_the_api_and_the_page_store_the_same_row(person, client, alice) -> None:
    run = graded_run(make_entity())
    person.post("/api/ratings/", rating_body(run, {"metricId": "layout_fit", "value": 2, "note": "n"}), format="json")
    api_row = Rating.objects.values("value", "normalized", "note", "user_id").get()
    Rating.objects.all().delete()
    client.force_login(alice)
    client.post("/evolution/rate/", {"run_kind": run.run_kind, "run_id": str(run.id), "metric_id": "layout_fit",
                                     "value": "2", "note": "n", "idempotency_key": "page-1"})  # fmt: skip
    assert Rating.objects.values("value", "normalized", "note", "user_id").get() == api_row


# --- grade now ----------------------------------------------------------------------------------

needs_booking = pytest.mark.skipif(importlib.util.find_spec("grading.booking") is None, reason="engineer C")


@needs_booking
def test_grade_now_refuses_an_entity_whose_grading_is_off(agent) -> None:
    run = make_run(make_entity(enabled=False))
    response = agent.post(f"/api/runs/{run.id}/grade/")
    assert response.status_code == 409
    assert "evaluation.enabled is false" in response.json()["detail"]


@needs_booking
def test_grade_now_refuses_a_running_run(person) -> None:
    run = make_run(make_entity(), status=Execution.Status.RUNNING)
    assert person.post(f"/api/runs/{run.id}/grade/").status_code == 409
    assert person.post(f"/api/runs/{uuid.uuid4()}/grade/").status_code == 404


# --- the schema ---------------------------------------------------------------------------------


def test_every_endpoint_is_in_the_schema(person) -> None:
    schema = person.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path, method in [
        ("/api/entities/", "get"),
        ("/api/entities/{target_kind}/{slug}/", "get"),
        ("/api/entities/{target_kind}/{slug}/calibration/", "get"),
        ("/api/runs/", "get"),
        ("/api/runs/{run_id}/", "get"),
        ("/api/runs/{run_id}/report/", "get"),
        ("/api/runs/{run_id}/grade/", "post"),
        ("/api/grades/", "get"),
        ("/api/ratings/", "post"),
        ("/api/runs/report/", "post"),
    ]:
        assert method in paths[path], path
    run_schema = schema["components"]["schemas"]["Run"]["properties"]
    assert run_schema["costUsd"]["type"] == "string"
    assert set(paths["/api/ratings/"]["post"]["responses"]) == {"200", "202", "400", "401", "403", "404", "409", "429"}
