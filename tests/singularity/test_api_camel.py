"""One spelling across /api/ (issue 36): camelCase in and out, data keys verbatim, snake_case deprecated.

The seed's tool contracts are camelCase, so every endpoint answers camelCase and reads it; a body or a query
parameter still spelled snake_case is read until the sunset, answered with ``Deprecation``, ``Sunset`` and a
``Warning`` naming the right spelling. Metric names, span attributes and free-form JSON are data: their keys
keep the spelling they were sent with, both ways.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.settings import patched_settings
from rest_framework.test import APIClient

from grading.models import Execution
from singularity.apikit.camel import DATA_FIELDS, SUNSET, camel, old_spellings
from tests.evolution.settings_helpers import client_for
from tests.grading.rating_helpers import make_grade, make_run
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db

SPAN = {
    "spanId": "llm-1",
    "parentSpanId": None,
    "name": "chat gpt-4o",
    "kind": "llm",
    "startTime": "2026-03-01T11:00:00.000000Z",
    "endTime": "2026-03-01T11:00:01.250000Z",
    "status": "ok",
    "statusMessage": "",
    "attributes": {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 3,
        "singularity.cost_usd": "0.000420",
    },
}


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def triage(db):
    with time_machine.travel("2026-03-01T12:00:00Z", tick=False):
        yield make_entity("triage")


def report(**over) -> dict:
    return {
        "entity": "scenario:triage",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05Z",
        "costUsd": "0.0042",
        "toolFailures": 1,
        "input": {"ticket_id": "T-1", "resolution_rate": 0.5, "_label": "billing"},
        "output": {"first_reply": "ok"},
        "trace": [SPAN],
        **over,
    }


def deprecated(response) -> bool:
    return any(name in response for name in ("Deprecation", "Sunset", "Warning"))


# --- camelCase in and out -------------------------------------------------------------------------------------


def test_a_run_reported_in_camel_case_reads_back_in_camel_case_with_its_data_verbatim(triage, person):
    response = person.post("/api/runs/report/", report(), format="json")
    assert response.status_code == 201, response.json()
    assert not deprecated(response)
    (run_id,) = response.json()["ids"]
    execution = Execution.objects.get(pk=run_id)
    assert (execution.cost_usd, execution.tool_failures, execution.duration_ms) == (Decimal("0.0042"), 1, 5000)
    body = person.get(f"/api/runs/{run_id}/").json()
    assert {"costUsd", "toolFailures", "durationMs", "startedAt", "completedAt", "gradeStatus"} <= set(body)
    assert not [key for key in body if "_" in key]
    # data: the input's keys, the output's and the span's attributes keep their spelling
    assert body["input"] == {"ticket_id": "T-1", "resolution_rate": 0.5, "_label": "billing"}
    assert body["output"] == {"first_reply": "ok"}
    assert body["trace"] == [SPAN]
    assert body["trace"][0]["attributes"]["gen_ai.usage.input_tokens"] == 120


def test_a_metric_named_resolution_rate_keeps_its_spelling_out(triage, person):
    run = make_run(triage)
    make_grade(run, metrics={"resolution_rate": 0.75, "cost_usd": "0.01"})
    grade = person.get(f"/api/runs/{run.pk}/").json()["grade"]
    assert grade["metrics"]["resolution_rate"] == 0.75 and "resolutionRate" not in grade["metrics"]
    assert "cost_usd" in grade["metrics"]
    (row,) = person.get("/api/grades/").json()["results"]
    assert row["runId"] == str(run.pk) and row["metrics"]["resolution_rate"] == 0.75


def test_a_being_is_created_and_read_in_camel_case(person):
    response = person.post("/api/beings/", {"name": "nova", "startingUsd": "2.50", "stimulus": "go"}, format="json")
    assert response.status_code == 201, response.json()
    assert not deprecated(response)
    body = person.get("/api/beings/nova/").json()
    assert body["budget"]["starting"] == "2.50" and "netProfitUsd" in body
    assert {"recentActions", "lastError", "createdAt"} <= set(body) and not [k for k in body if "_" in k]


def test_a_refusal_names_the_field_in_camel_case(person):
    response = person.post("/api/beings/", {"name": "nova", "startingUsd": "-1"}, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("startingUsd: ")


def test_the_seed_mirror_reads_and_answers_camel_case(triage, person):
    response = person.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "triage"})
    assert response.status_code == 200, response.json()
    assert not deprecated(response)
    body = response.json()
    assert {"entities", "needsYou", "needsYouItems", "nextCursor"} <= set(body)
    (entity,) = body["entities"]
    assert (entity["targetKind"], entity["targetId"]) == ("scenario", "triage")
    assert entity["month"].keys() >= {"spentUsd", "ceilingUsd"}


# --- the deprecation period -----------------------------------------------------------------------------------


def test_a_snake_case_body_is_read_and_answered_with_the_deprecation_headers(person):
    response = person.post("/api/beings/", {"name": "nova", "starting_usd": "2.50", "stimulus": "go"}, format="json")
    assert response.status_code == 201, response.json()
    assert response["Deprecation"].startswith("@") and int(response["Deprecation"][1:]) < SUNSET.timestamp()
    assert response["Sunset"] == "Wed, 30 Jun 2027 23:59:59 GMT"
    assert response["Warning"] == '299 - "starting_usd is deprecated: spell it startingUsd"'
    assert person.get("/api/beings/nova/").json()["budget"]["starting"] == "2.50"


def test_a_snake_case_query_parameter_is_read_and_answered_with_the_deprecation_headers(triage, person):
    snake = person.get("/api/loop/status/", {"target_kind": "scenario", "target_id": "triage"})
    assert snake.status_code == 200, snake.json()
    assert snake["Warning"] == (
        '299 - "target_kind is deprecated: spell it targetKind", 299 - "target_id is deprecated: spell it targetId"'
    )
    assert "Deprecation" in snake and "Sunset" in snake
    camel_case = person.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "triage"})
    assert snake.json() == camel_case.json() and not deprecated(camel_case)


AFTER_SUNSET = SUNSET.timestamp() + 1


def test_after_the_sunset_a_snake_case_body_is_refused_naming_the_old_and_new_spelling(person):
    with time_machine.travel(AFTER_SUNSET, tick=False):
        response = person.post("/api/beings/", {"name": "nova", "starting_usd": "2.50"}, format="json")
        camel_case = person.post("/api/beings/", {"name": "vega", "startingUsd": "2.50"}, format="json")
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "starting_usd: the snake_case spelling was retired on 30 June 2027; spell it startingUsd"
    )
    assert person.get("/api/beings/nova/").status_code == 404
    assert camel_case.status_code == 201 and not deprecated(camel_case)


def test_after_the_sunset_a_snake_case_query_parameter_is_refused(triage, person):
    with time_machine.travel(AFTER_SUNSET, tick=False):
        snake = person.get("/api/loop/status/", {"target_kind": "scenario", "targetId": "triage"})
        camel_case = person.get("/api/loop/status/", {"targetKind": "scenario", "targetId": "triage"})
    assert snake.status_code == 400
    assert snake.json()["detail"] == (
        "target_kind: the snake_case spelling was retired on 30 June 2027; spell it targetKind"
    )
    assert camel_case.status_code == 200


def test_until_the_sunset_the_old_spelling_is_still_read(person):
    with time_machine.travel(SUNSET.timestamp(), tick=False):
        response = person.post("/api/beings/", {"name": "nova", "starting_usd": "2.50"}, format="json")
    assert response.status_code == 201 and "Sunset" in response


def test_an_unknown_query_parameter_is_still_refused_in_either_spelling(person):
    for name in ("afterSequence", "after_sequence"):
        response = person.get(f"/api/beings/nova/events/?{name}=1")
        assert response.status_code == 400 and response.json()["detail"].startswith("afterSequence: ")


def test_a_snake_case_report_keeps_its_data_keys_and_names_only_the_fields(triage, person):
    body = report(started_at="2026-03-01T11:00:00Z", completed_at="2026-03-01T11:00:05Z")
    del body["startedAt"], body["completedAt"]
    response = person.post("/api/runs/report/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response["Warning"] == (
        '299 - "started_at is deprecated: spell it startedAt", 299 - "completed_at is deprecated: spell it completedAt"'
    )  # never ticket_id, resolution_rate, first_reply nor a span attribute
    (run_id,) = response.json()["ids"]
    assert Execution.objects.get(pk=run_id).input["resolution_rate"] == 0.5


def test_old_spellings_skip_the_data_fields():
    body = {"target_kind": "x", "input": {"user_id": 1}, "metrics": {"resolution_rate": 1}, "rows": [{"run_id": 1}]}
    assert old_spellings(body) == ["target_kind", "run_id"]


def test_pages_outside_the_api_are_left_alone(alice):
    web = Client()
    web.force_login(alice)
    response = web.get("/evolution/?target_kind=scenario")
    assert not deprecated(response)


# --- the schema -----------------------------------------------------------------------------------------------


def _schema() -> dict:
    """The schema as /api/schema/ serves it (references resolved to their names)."""
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def _underscored(schema: dict) -> list[str]:
    """Every property name with an underscore, outside a data field's own value."""
    found: list[str] = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for name, inner in (node.get("properties") or {}).items():
                if "_" in name:
                    found.append(f"{where}.{name}")
                if name not in DATA_FIELDS and camel(name) not in [camel(f) for f in DATA_FIELDS]:
                    walk(inner, f"{where}.{name}")
            for key, inner in node.items():
                if key != "properties":
                    walk(inner, where)
        elif isinstance(node, list):
            for inner in node:
                walk(inner, where)

    for name, component in schema["components"]["schemas"].items():
        walk(component, name)
    for path, operations in schema["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and "_" in parameter["name"]:
                    found.append(f"{method.upper()} {path} ?{parameter['name']}")
            walk(operation, f"{method.upper()} {path}")
    return found


def test_no_property_or_query_parameter_of_the_api_has_an_underscore():
    assert _underscored(_schema()) == []


def test_the_data_fields_hold_no_shape_of_ours_with_snake_case_names():
    """A data field passes verbatim: a serializer of ours under one would keep snake_case keys the schema
    camelizes. Each one must be free-form (or its own shape spelled without underscores)."""
    hooks = [hook for hook in settings.SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] if "camel" not in hook]
    with patched_settings({"POSTPROCESSING_HOOKS": hooks}):
        components = _schema()["components"]["schemas"]  # as the serializers spell it, before camelizing
    wrong: list[str] = []

    def refs(node) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else []
            return found + [r for inner in node.values() for r in refs(inner)]
        if isinstance(node, list):
            return [r for inner in node for r in refs(inner)]
        return []

    data_names = set(DATA_FIELDS) | {camel(name) for name in DATA_FIELDS}
    for owner, component in components.items():
        for name, inner in (component.get("properties") or {}).items():
            if name in data_names:
                for ref in refs(inner):
                    wrong += [f"{owner}.{name} → {ref}.{p}" for p in components[ref].get("properties", {}) if "_" in p]
    assert wrong == []


def test_the_renderer_answers_what_the_librarys_camelize_answers():
    from djangorestframework_camel_case.util import camelize as library_camelize

    from singularity.apikit.camel import CamelJSONRenderer
    from singularity.apikit.camel_fields import IGNORED

    data = {
        "run_id": 1,
        "rows": [{"cost_usd": "1", "per_metric": {"resolution_rate": 1}}, ("a_b", {"x_y": None})],
        "perMetric": {"resolution_rate": 0.5},  # a seed read declares its field camelCase: still data
        "checkVerdict": {"gain_low": 0.1},
        "metrics": {"cost_usd": "0.1"},
        "nested": {"deeper_still": {"trace": [{"spanId": "a", "attributes": {"gen_ai.usage.input_tokens": 1}}]}},
        "http2_ok": True,
    }
    rendered = json.loads(CamelJSONRenderer().render(data))
    assert rendered == json.loads(json.dumps(library_camelize(data, ignore_fields=IGNORED)))
    assert rendered["perMetric"] == {"resolution_rate": 0.5} and rendered["checkVerdict"] == {"gain_low": 0.1}
    assert rendered["rows"][0] == {"costUsd": "1", "perMetric": {"resolution_rate": 1}}


def test_the_renderer_walks_lazy_text_and_leaves_plain_values_as_the_library_does():
    """The walk hands a plain value (str, int, float, bool, None) back without looking into it: a lazy text is
    still made text, a safe string, a decimal and a tuple's rows still answered as the library answers them."""
    from decimal import Decimal

    from django.utils.safestring import mark_safe
    from django.utils.translation import gettext_lazy
    from djangorestframework_camel_case.util import camelize as library_camelize

    from singularity.apikit.camel import CamelJSONRenderer
    from singularity.apikit.camel_fields import IGNORED

    data = {
        "lazy_words": gettext_lazy("Needs you"),
        gettext_lazy("lazy_key"): 1,
        "safe_text": mark_safe("<b>x</b>"),
        "exact_usd": Decimal("1.50"),
        "both_sides": ({"left_side": 1.5, "right_side": None}, [True, "a_b"]),
    }
    rendered = json.loads(CamelJSONRenderer().render(data))
    assert rendered == json.loads(CamelJSONRenderer().render(library_camelize(data, ignore_fields=IGNORED)))
    assert rendered["lazyWords"] == "Needs you" and rendered["lazyKey"] == 1
    assert rendered["bothSides"] == [{"leftSide": 1.5, "rightSide": None}, [True, "a_b"]]
