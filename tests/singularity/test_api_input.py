"""Hostile input to the REST API: each is a 400 naming the parameter or field, never a 500, on both databases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from grading.models import Entity, Execution
from singularity.being.actions import create_being
from singularity.models import ApiToken
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db

HUGE = str(2**64)
LISTS = [
    "/api/beings/",
    "/api/beings/ada/cycles/",
    "/api/beings/ada/events/",
    "/api/entities/",
    "/api/runs/",
    "/api/grades/",
    "/api/cards/",
    "/api/notices/",
    "/api/episodes/?role=helpdesk",
    "/api/loop/history/",
    "/api/loop/supervision/",
]


def client(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def person(alice) -> APIClient:
    create_being("ada")
    make_entity("triage")
    make_entity("helpdesk", kind=Entity.Kind.ROLE)
    return client(alice)


def refusal(response: Any) -> tuple[int, str, str]:
    body = response.json()
    return response.status_code, body.get("error"), body.get("detail")


def with_param(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


# --- ?limit=, ?cursor= and ?offset= --------------------------------------------------------


@pytest.mark.parametrize("url", LISTS)
def test_a_limit_past_any_page_is_refused_naming_limit(person, url):
    status, error, detail = refusal(person.get(with_param(url, f"limit={HUGE}")))
    assert (status, error) == (400, "invalid"), detail
    assert detail.startswith("limit: ")


@pytest.mark.parametrize("url", [u for u in LISTS if not u.startswith("/api/loop/")])
@pytest.mark.parametrize("limit", ["0", "-1", "ten", "2.5", ""])
def test_a_limit_that_is_no_page_size_is_refused(person, url, limit):
    response = person.get(with_param(url, f"limit={limit}"))
    if limit == "":
        assert response.status_code == 200, response.content
        return
    assert refusal(response)[:2] == (400, "invalid") and refusal(response)[2].startswith("limit: ")


@pytest.mark.parametrize("url", LISTS)
def test_an_offset_past_any_row_is_refused_naming_offset(person, url):
    status, error, detail = refusal(person.get(with_param(url, f"offset={2**70}")))
    assert (status, error) == (400, "invalid") and detail.startswith("offset: ")


@pytest.mark.parametrize("url", [u for u in LISTS if not u.startswith("/api/loop/")])
@pytest.mark.parametrize("cursor", ["garbage!", "W10", "bnVsbA", "WyJ4IiwieCIsIngiLCJ4Il0", "eyJhIjoxfQ"])
def test_a_cursor_that_is_no_page_is_refused_naming_cursor(person, url, cursor):
    """Not base64, [], null, four values, an object: none is a position in any list."""
    status, error, detail = refusal(person.get(with_param(url, f"cursor={cursor}")))
    assert (status, error) == (400, "invalid") and detail.startswith("cursor: "), detail


def test_a_cursor_past_the_databases_integers_is_refused_naming_cursor(person):
    """["2026-01-01T00:00:00+00:00", 2**64]: the shape of a notices cursor, an id no column holds."""
    cursor = "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwxODQ0Njc0NDA3MzcwOTU1MTYxNl0"
    status, error, detail = refusal(person.get(f"/api/notices/?cursor={cursor}"))
    assert (status, error) == (400, "invalid") and detail.startswith("cursor: "), detail


def test_a_limit_within_bounds_still_pages(person):
    body = person.get("/api/entities/?limit=1").json()
    assert len(body["results"]) == 1 and body["nextCursor"] and "count" not in body and "next" not in body


# --- NUL in a filter ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,params,named",
    [
        ("/api/grades/", {"entity": "scenario:tri\0age"}, "entity"),
        ("/api/grades/", {"status": "graded\0"}, "status"),
        ("/api/runs/", {"entity": "scenario:tri\0age"}, "entity"),
        ("/api/runs/", {"status": "\0"}, "status"),
        ("/api/loop/history/", {"targetKind": "scenario", "targetId": "tri\0age"}, "targetId"),
        ("/api/loop/history/", {"targetKind": "sce\0nario", "targetId": "triage"}, "targetKind"),
        ("/api/loop/history/", {"since": "2026-01-01\0"}, "since"),
        ("/api/loop/status/", {"targetKind": "scenario", "targetId": "tri\0age"}, "targetId"),
        ("/api/cards/", {"kind": "decide\0"}, "kind"),
        ("/api/episodes/", {"role": "help\0desk"}, "role"),
    ],
)
def test_a_nul_in_a_filter_is_refused_naming_it(person, url, params, named):
    status, error, detail = refusal(person.get(url, params))
    assert (status, error) == (400, "invalid"), detail
    assert detail == f"{named}: contains a NUL character (U+0000), which no text here may hold"


def test_a_nul_in_a_path_is_refused(person):
    status, error, detail = refusal(person.get("/api/entities/scenario/tri%00age/"))
    assert (status, error) == (400, "invalid") and detail.startswith("path: contains a NUL")


# --- POST /api/runs/ and /api/runs/report/ -----------------------------------------------------

RUN = (
    '{"entity": "scenario:triage", "status": "succeeded", '
    '"startedAt": "2026-03-01T11:00:00Z", "completedAt": "2026-03-01T11:00:05Z", '
)
REPORTS = ["/api/runs/", "/api/runs/report/"]


def post(api: APIClient, url: str, tail: str) -> Any:
    return api.post(url, RUN + tail, content_type="application/json")


@pytest.mark.parametrize("url", REPORTS)
@pytest.mark.parametrize(
    "tail,named,why",
    [
        ('"input": {"ticket": "\\ud800"}}', "input.ticket", "lone surrogate"),
        ('"output": "\\udfff tail"}', "output", "lone surrogate"),
    ],
)
def test_text_no_database_can_hold_is_refused_naming_the_field(person, url, tail, named, why):
    status, error, detail = refusal(post(person, url, tail))
    assert (status, error) == (400, "invalid"), detail
    assert detail.startswith(f"{named}: ") and why in detail
    assert not Execution.objects.exists()


@pytest.mark.parametrize("url", REPORTS)
@pytest.mark.parametrize(
    "tail,field,kept",
    [
        ('"input": {"ticket": "x\\u0000"}}', "input", {"ticket": "x\ufffd"}),
        ('"input": {"ti\\u0000cket": 1}}', "input", {"ti\ufffdcket": 1}),
        ('"output": ["ok", "\\u0000"]}', "output", ["ok", "\ufffd"]),
        ('"status": "failed", "error": "down\\u0000"}', "error", "down\ufffd"),
    ],
)
def test_a_nul_in_a_runs_evidence_is_kept_as_the_replacement_character(person, url, tail, field, kept):
    # A run's evidence is kept, not refused (it was, before): PostgreSQL cannot hold U+0000, so both hold U+FFFD.
    response = post(person, url, tail)
    assert response.status_code == 201, response.content
    assert getattr(Execution.objects.get(), field) == kept


@pytest.mark.parametrize("url", REPORTS)
@pytest.mark.parametrize("depth", [65, 50_000])
def test_nesting_past_the_bound_is_refused_naming_the_field(person, url, depth):
    status, error, detail = refusal(post(person, url, '"input": {"deep": ' + "[" * depth + "]" * depth + "}}"))
    assert (status, error) == (400, "invalid"), detail
    assert detail.startswith("input.deep") and "nested more than 64 levels" in detail


def test_nesting_in_a_list_of_runs_names_the_row(person):
    deep = "[" * 50_000 + "]" * 50_000
    body = "[" + RUN + '"input": {}}, ' + RUN + '"output": ' + deep + "}]"
    status, error, detail = refusal(person.post("/api/runs/report/", body, content_type="application/json"))
    assert (status, error) == (400, "invalid") and detail.startswith("[1].output")


def sqlite() -> bool:
    return connection.vendor == "sqlite"


@pytest.mark.parametrize("url", REPORTS)
@pytest.mark.parametrize("cost", ['"1e18"', "1e18", '"1000000000000000000.5"', '"1e100"', '"1e999999"', "1e300"])
def test_a_cost_no_money_column_holds_is_refused_naming_cost_usd(person, url, cost):
    status, error, detail = refusal(post(person, url, f'"costUsd": {cost}}}'))
    assert (status, error) == (400, "invalid"), detail
    assert detail.startswith("costUsd: ") and "the most" in detail


@pytest.mark.parametrize("url", REPORTS)
def test_a_cost_past_sqlites_exact_range_is_refused_there_and_kept_on_postgres(person, url):
    response = post(person, url, '"costUsd": "9223373"}')
    if sqlite():
        status, error, detail = refusal(response)
        assert (status, error) == (400, "invalid") and detail.startswith("costUsd: 9223373 is over")
    else:
        assert response.status_code == 201, response.content
        assert str(Execution.objects.get().cost_usd) == "9223373.000000000000"


@pytest.mark.parametrize("url", REPORTS)
def test_the_most_each_database_holds_is_kept_exactly(person, url):
    most = "9223372.036854775807" if sqlite() else "999999999999999999.999999999999"
    response = post(person, url, f'"costUsd": "{most}"}}')
    assert response.status_code == 201, response.content
    assert str(Execution.objects.get().cost_usd) == most


@pytest.mark.parametrize("url", REPORTS)
def test_a_tool_failure_count_past_the_column_is_refused(person, url):
    status, error, detail = refusal(post(person, url, '"toolFailures": 100000000000000000000}'))
    assert (status, error) == (400, "invalid") and detail.startswith("toolFailures: ")


def test_a_batch_row_past_the_bound_names_its_row(person):
    body = json.dumps([json.loads(RUN + '"costUsd": "1"}'), json.loads(RUN + '"costUsd": "1e18"}')])
    status, error, detail = refusal(person.post("/api/runs/report/", body, content_type="application/json"))
    assert (status, error) == (400, "invalid") and detail.startswith("runs[1].costUsd: ")
