"""Property-based tests of the whole REST API, generated from its own OpenAPI schema (``/api/schema/``).

Schemathesis generates requests for every operation the schema lists, valid
and invalid, and sends each one as a person's token and as an agent's token,
first as generated and then with its path naming objects that exist. Every
answer must be no 5xx, must conform to the schema (its status documented, its
body the documented shape, errors ``{"error", "detail"}``), and no action that
is a person's alone may succeed for an agent.

Bounded to run in a few minutes in all: ``API_PROPERTY_EXAMPLES`` examples per
operation (default 8), derandomized so a run is reproducible.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import RequestFactory
from django.utils import timezone
from hypothesis import HealthCheck, settings
from rest_framework.test import APIClient, force_authenticate
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from evolution.models import Idea, PullRequest
from grading.chat.episodes import Counterpart, open_episode
from hitl.actions import post_notice
from singularity.being.actions import create_being
from singularity.models import ApiToken
from tests.evolution.loop_helpers import graded, proposed_round, settled_cycle
from tests.grading.chat_helpers import make_role
from tests.grading.grading_helpers import make_entity, make_run
from tests.hitl.helpers import make_card, recording_handler

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("API_PROPERTY_EXAMPLES", "8"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

#: What only a person may do (DESIGN decision 9): an agent's call never succeeds.
PEOPLE_ONLY = {
    ("POST", "/api/beings/"),
    ("POST", "/api/beings/{name}/start/"),
    ("POST", "/api/cards/{id}/answer/"),
    ("POST", "/api/cards/{id}/cancel/"),
    ("POST", "/api/episodes/{run_id}/close/"),
    ("POST", "/api/forge/pulls/{number}/merge/"),
    ("POST", "/api/forge/pulls/{number}/close/"),
    ("POST", "/api/loop/analyze/"),
    ("POST", "/api/ratings/"),
}
#: What an agent may only ask for: its call waits on a person's approval card (202), never applies at once.
WAITS_ON_A_PERSON = {
    ("POST", "/api/loop/release/"),
    ("POST", "/api/loop/rearm/"),
    ("POST", "/api/loop/dismiss/"),
    ("POST", "/api/loop/widen/"),
}


def _schema_from_the_endpoint() -> dict[str, Any]:
    """The document ``GET /api/schema/?format=json`` answers (read through the view, as a signed-in person)."""
    from django.urls import resolve

    request = RequestFactory().get("/api/schema/", {"format": "json"})
    force_authenticate(request, user=User(username="schema-reader", is_active=True))
    response = resolve("/api/schema/").func(request)
    response.render()
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


RAW = _schema_from_the_endpoint()
schema = schemathesis.openapi.from_dict(RAW)
schema.app = WSGIHandler()
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=EXAMPLES,
    deterministic=True,
    database="none",
    no_shrink=True,
)


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """The WSGI handler closes old connections around each request; the test's transaction needs its own."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def world(alice) -> Iterator[dict[str, Any]]:
    """One of everything the API names in a path, and a person's and an agent's token."""
    with recording_handler():
        entity = make_entity("triage", loop={"enabled": True})
        run = make_run(entity)
        graded(entity, bad=True)
        cycle = settled_cycle(entity, "regressed", at=timezone.now())
        proposed_round(cycle)
        idea = Idea.objects.create(entity=entity, text="Lead with the numbers.", author="alice")
        pull = PullRequest.objects.create(
            number=7, title="Shorter notes", head="loop/triage-0000aaaa", head_sha="a" * 40, base_sha="b" * 40
        )
        create_being("ada")
        card = make_card()
        post_notice(producer="test", kind="info", title="Hello", text="A notice.", url="/")
        role = make_role("helpdesk")
        episode = open_episode(role, Counterpart(user=alice))
        _, person = ApiToken.issue(alice, "script")
        _, agent = ApiToken.issue(alice, "bot", is_agent=True)
        yield {
            "tokens": {"person": person, "agent": agent},
            "paths": {
                "name": "ada",
                "target_kind": entity.target_kind,
                "slug": entity.slug,
                "run_id": str(run.pk),
                "card": str(card.pk),
                "cycle": str(cycle.pk),
                "idea": str(idea.pk),
                "number": str(pull.number),
                "episode": str(episode.pk) if episode else str(run.pk),
            },
        }


def _id_for(path: str, known: dict[str, str]) -> str:
    """What ``{id}`` names in ``path``: a card, a cycle or an idea."""
    for prefix, name in (("/api/cards/", "card"), ("/api/loop/cycles/", "cycle"), ("/api/loop/ideas/", "idea")):
        if path.startswith(prefix):
            return known[name]
    return "1"


def _existing(case: Any, world: dict[str, Any]) -> dict[str, Any] | None:
    """The case's path parameters naming objects that exist, or None when it has none to replace."""
    if not case.path_parameters:
        return None
    known = dict(world["paths"])
    path = case.path
    known["id"] = _id_for(path, known)
    if path.startswith("/api/episodes/"):
        known["run_id"] = known["episode"]
    replaced = {name: known.get(name, value) for name, value in case.path_parameters.items()}
    return replaced if replaced != case.path_parameters else None


def _send(case: Any, token: str) -> Any:
    response = case.call(headers={"Authorization": f"Bearer {token}"})
    case.validate_response(response, checks=CHECKS)
    return response


def _check_the_agent(case: Any, response: Any) -> None:
    operation = (case.method.upper(), case.path)
    if operation in PEOPLE_ONLY:
        assert response.status_code >= 400, f"{operation}: an agent's call answered {response.status_code}"
    if operation in WAITS_ON_A_PERSON and response.status_code < 400:
        assert response.status_code == 202, f"{operation}: an agent's call applied at once"


@schema.parametrize()
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@pytest.mark.parametrize("caller", ["person", "agent"])
def test_the_api_holds_its_schema(case, caller, world):
    token = world["tokens"][caller]
    calls = [_send(case, token)]
    if (existing := _existing(case, world)) is not None:
        case.path_parameters = existing
        calls.append(_send(case, token))
    if caller == "agent":
        for response in calls:
            _check_the_agent(case, response)


# --- A NUL anywhere: every parameter and every body the schema lists ---------------------------------------

NUL_REFUSED = "contains a NUL character (U+0000), which no text here may hold"


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in RAW["paths"].items()
        for method, operation in operations.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


PARAMETERS = [
    (method, path, parameter["name"], parameter["in"])
    for method, path, operation in _operations()
    for parameter in operation.get("parameters", [])
    if parameter["in"] in ("query", "path")
]
BODIES = [(method, path) for method, path, operation in _operations() if "requestBody" in operation]


def _person(world: dict[str, Any]) -> APIClient:
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {world['tokens']['person']}")
    return api


def _url(path: str, world: dict[str, Any], nul_in: str = "") -> str:
    """``path`` naming objects that exist, with a NUL for the path parameter ``nul_in``."""
    known = {**world["paths"], "id": _id_for(path, world["paths"])}
    for name, value in known.items():
        path = path.replace("{" + name + "}", "a%00b" if name == nul_in else value)
    return path


def _wrong(response: Any, named: str) -> str:
    """What is wrong with ``response`` as the refusal of a NUL in ``named`` ("" when nothing)."""
    expected = {"error": "invalid", "detail": f"{named}: {NUL_REFUSED}"}
    if response.status_code == 400 and response.json() == expected:
        return ""
    return f"{response.status_code} {response.content[:200]!r}"


def test_a_nul_in_any_parameter_of_any_operation_is_refused_naming_it(world):
    api, wrong = _person(world), []
    for method, path, name, where in PARAMETERS:
        url = _url(path, world, nul_in=name if where == "path" else "")
        if where == "query":
            url += "?" + urlencode({name: "a\x00b"})
        if problem := _wrong(api.generic(method, url), "path" if where == "path" else name):
            wrong.append(f"{method} {path} {name}: {problem}")
    assert wrong == []
    assert len(PARAMETERS) > 40, "the schema lists the API's parameters"


def test_a_nul_in_any_body_of_any_operation_is_refused_naming_the_field(world):
    api, wrong = _person(world), []
    for method, path in BODIES:
        response = api.generic(method, _url(path, world), '{"note": "a\\u0000b"}', content_type="application/json")
        if problem := _wrong(response, "note"):
            wrong.append(f"{method} {path}: {problem}")
    assert wrong == []
    assert len(BODIES) > 10, "the schema lists the API's bodies"
