"""POST /api/runs/report/: scripts report runs already finished, one or a batch."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from grading.models import Entity, Execution
from singularity.models import ApiToken
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db

URL = "/api/runs/report/"


def client(user, *, is_agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "agent" if is_agent else "script", is_agent=is_agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def run(entity: str = "scenario:triage", **over: Any) -> dict[str, Any]:
    data = {
        "entity": entity,
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05+00:00",
        "costUsd": "0.0042",
        "input": {"ticket": "t", "_label": "billing"},
        "output": {"label": "billing"},
    }
    data.update(over)
    return data


@pytest.fixture(autouse=True)
def now():
    with time_machine.travel("2026-03-01T12:00:00Z", tick=False):
        yield


@pytest.fixture
def entities() -> dict[str, Entity]:
    return {"triage": make_entity("triage"), "ops": make_entity("ops", kind=Entity.Kind.HEARTBEAT)}


def test_a_single_run_is_recorded_and_its_id_answered(entities, alice):
    response = client(alice).post(URL, run(), format="json")
    assert response.status_code == 201, response.json()
    (run_id,) = response.json()["ids"]
    execution = Execution.objects.get(pk=run_id)
    assert (execution.entity, execution.source, execution.status) == (entities["triage"], "api", "succeeded")
    assert execution.cost_usd == Decimal("0.0042")
    assert execution.duration_ms == 5000
    assert execution.started_by == alice


def test_an_agent_token_may_report_runs(entities, alice):
    response = client(alice, is_agent=True).post(URL, run(), format="json")
    assert response.status_code == 201


def test_a_list_is_recorded_in_order_across_entities(entities, bob):
    body = [run(), run("heartbeat:ops", status="failed", error="queue down"), run(costUsd=0.1)]
    response = client(bob).post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    ids = response.json()["ids"]
    executions = [Execution.objects.get(pk=run_id) for run_id in ids]
    assert [(e.entity.slug, e.run_kind, e.status) for e in executions] == [
        ("triage", "workflow", "succeeded"),
        ("ops", "heartbeat", "failed"),
        ("triage", "workflow", "succeeded"),
    ]
    assert executions[2].cost_usd == Decimal("0.1")


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (run(costUsd="-1"), "costUsd: must not be negative"),
        (run(status="done"), "status: expected 'succeeded' or 'failed'"),
        (run(startedAt="2026-03-01T11:00:00"), "startedAt: "),
        (run(entity="triage"), "entity: expected '<target_kind>:<slug>'"),
        (run(entity="scenario:nope"), "entity: 'scenario:nope' names no entity"),
        (run(grade=1), "grade: unknown field"),
        ([run(), run(toolFailures=-1)], "runs[1].toolFailures: expected an integer"),
        ([run(), run(entity="role:x")], "runs[1].entity: 'role:x' names no entity"),
        ([run(), "x"], "runs[1]: expected a JSON object"),
        ([], "runs: the list is empty"),
    ],
)
def test_a_refusal_names_the_row_and_the_field_and_records_nothing(entities, alice, body, detail):
    response = client(alice).post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert response.json()["detail"].startswith(detail), response.json()
    assert Execution.objects.count() == 0


def test_more_than_a_thousand_runs_are_refused(entities, alice):
    response = client(alice).post(URL, [run()] * 1001, format="json")
    assert response.status_code == 400
    assert "at most 1000" in response.json()["detail"]


def test_it_requires_authentication(entities):
    assert APIClient().post(URL, run(), format="json").status_code in (401, 403)


def test_the_queries_do_not_grow_with_the_batch(entities, alice, django_assert_max_num_queries):
    api = client(alice)
    api.post(URL, [run()], format="json")
    # Auth (token, last used), the entities, a savepoint pair and the inserts (SQLite splits big inserts).
    with django_assert_max_num_queries(8):
        assert api.post(URL, [run() for _ in range(40)], format="json").status_code == 201


def test_the_endpoint_is_in_the_api_schema(alice):
    api = APIClient()
    api.force_login(alice)
    schema = api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/runs/report/"]["post"]
    assert operation["operationId"] == "runs_report"
    assert "201" in operation["responses"]


def test_runs_can_also_be_reported_by_posting_to_the_runs_collection(entities, alice):
    response = client(alice).post("/api/runs/", [run(), run(entity="heartbeat:ops")], format="json")
    assert response.status_code == 201, response.json()
    ids = response.json()["ids"]
    assert [Execution.objects.get(pk=i).entity.slug for i in ids] == ["triage", "ops"]
    listed = client(alice).get("/api/runs/").json()
    assert {row["id"] for row in listed["results"]} >= set(ids)


def nul_span(span_id: str, parent: str | None, **over: Any) -> dict[str, Any]:
    span = {
        "spanId": span_id,
        "parentSpanId": parent,
        "name": "execute_tool crm\x00lookup",
        "kind": "tool",
        "startTime": "2026-03-01T11:00:01Z",
        "endTime": "2026-03-01T11:00:02Z",
        "status": "error",
        "statusMessage": "not\x00found",
        "attributes": {"gen_ai.tool.call.result": "found\x00it", "odd\x00key": ["a\x00", {"b\x00": "c\x00"}]},
    }
    span.update(over)
    return span


def test_a_nul_in_a_reported_run_is_kept_as_the_replacement_character_on_every_database(entities, alice):
    # PostgreSQL refuses U+0000 in text and jsonb; the run's evidence is kept, with U+FFFD in its place.
    body = run(
        status="failed",
        error="crashed\x00here",
        input={"ticket": "a\x00b", "nested": {"k\x00": ["x\x00"]}},
        output={"label": "bill\x00ing"},
        trace=[nul_span("root", None), nul_span("child", "root")],
    )
    response = client(alice).post(URL, [body, run()], format="json")
    assert response.status_code == 201, response.json()
    execution = Execution.objects.get(pk=response.json()["ids"][0])
    assert execution.error == "crashed\ufffdhere"
    assert execution.input == {"ticket": "a\ufffdb", "nested": {"k\ufffd": ["x\ufffd"]}}
    assert execution.output == {"label": "bill\ufffding"}
    span = execution.trace[1]
    assert (span["name"], span["statusMessage"]) == ("execute_tool crm\ufffdlookup", "not\ufffdfound")
    assert span["attributes"] == {
        "gen_ai.tool.call.result": "found\ufffdit",
        "odd\ufffdkey": ["a\ufffd", {"b\ufffd": "c\ufffd"}],
    }
    assert "\x00" not in str(Execution.objects.values_list("input", "output", "error", "trace").get(pk=execution.pk))


def test_a_single_reported_run_with_a_nul_is_kept_too(entities, alice):
    response = client(alice).post(URL, run(output="bill\x00ing"), format="json")
    assert response.status_code == 201, response.json()
    assert Execution.objects.get(pk=response.json()["ids"][0]).output == "bill\ufffding"
