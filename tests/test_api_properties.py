"""Property-based tests of the whole REST API, generated from its own OpenAPI schema (``/api/schema/``).

Schemathesis generates requests for every operation the schema lists, valid
and invalid, and sends each one as a person's token and as an agent's token,
first as generated and then with its path naming objects that exist. Every
answer must be no 5xx, must conform to the schema (its status documented, its
body the documented shape, errors ``{"error", "detail"}``), and no action that
is a person's alone may succeed for an agent.

Beyond the schema (issue 27): header values of any text (Latin-1 bytes that are
not UTF-8, any character at all) and any ``Content-Length`` on the API and the
pages, and signed webhook deliveries of any shape (GitHub answers 200 or 400,
Telegram 200), never a 5xx.

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


# --- Header values of any encoding, and the webhooks' payloads of any shape (issue 27) ------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: Any character WSGI can hand over in a header (Latin-1: every byte, UTF-8 or not) and, since Django's test client
#: passes a str through, any character at all (lone surrogates included).
HEADER_TEXT = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40),
    st.text(st.characters(codec=None, exclude_categories=("Cc",)), max_size=20),
)
GET_PATHS = [path for method, path, _ in _operations() if method == "GET" and "{" not in path]
HEADER_SETTINGS = settings(
    max_examples=EXAMPLES * 12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@HEADER_SETTINGS
@given(path=st.sampled_from(GET_PATHS), value=HEADER_TEXT, scheme=st.sampled_from(["Bearer ", "Token ", ""]))
def test_an_authorization_header_of_any_text_is_never_a_server_error(world, path, value, scheme):
    answer = APIClient(raise_request_exception=False).get(path, HTTP_AUTHORIZATION=scheme + value)
    assert answer.status_code < 500, (path, scheme + value, answer.content[:200])
    if not (scheme + value).isascii() and scheme:
        assert answer.status_code == 401
        assert answer.json()["detail"].startswith("Authorization header: ")


@HEADER_SETTINGS
@given(
    path=st.sampled_from([*GET_PATHS, "/evolution/runs/", "/inbox/", "/github/webhook/", "/telegram/webhook/"]),
    header=st.sampled_from(
        [
            "HTTP_X_ANYTHING",
            "HTTP_ACCEPT",
            "HTTP_HX_REQUEST",
            "HTTP_HX_CURRENT_URL",
            "CONTENT_TYPE",
            "HTTP_X_HUB_SIGNATURE_256",
            "HTTP_X_GITHUB_EVENT",
            "HTTP_X_GITHUB_DELIVERY",
            "HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN",
        ]
    ),
    value=HEADER_TEXT,
    length=st.one_of(st.none(), HEADER_TEXT, st.integers(min_value=-(10**20), max_value=10**20).map(str)),
)
def test_any_header_value_and_any_content_length_is_never_a_server_error(
    world, settings, telegram_on, path, header, value, length
):
    settings.GITHUB_WEBHOOK_SECRET = "s3cret"
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {world['tokens']['person']}")
    if length is not None and length.isascii() and length.isdigit() and int(length) > 2:
        # A length past the body: a server waits for bytes that never come; the test client raises instead.
        length = "2"
    extra = {header: value} if length is None else {header: value, "CONTENT_LENGTH": length}
    answer = api.post(path, b"{}", content_type="application/json", **extra)
    assert answer.status_code < 500, (path, header, value, length, answer.content[:200])
    if length is not None and not (length.isascii() and length.isdigit()) and length != "":
        assert answer.status_code == 400 and b"Content-Length" in answer.content


#: Any JSON value: big and boolean numbers, text with NUL and lone surrogates, nesting.
JSON_ANY = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec=None), max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(st.characters(codec=None), max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
PR_FIELDS = ["action", "number", "repository", "pull_request", "sender"]


def _pull_request_event(changes: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": "closed",
        "number": 12,
        "pull_request": {"number": 12, "state": "closed"},
        "repository": {"full_name": "acme/brain"},
    }
    payload.update(changes)
    return payload


@HEADER_SETTINGS
@given(
    changes=st.dictionaries(st.sampled_from(PR_FIELDS), JSON_ANY, max_size=3),
    event=st.sampled_from(["pull_request", "push", "ping", ""]),
    delivery=HEADER_TEXT,
    deep=st.sampled_from([0, 0, 0, 100_000]),
)
def test_a_signed_github_delivery_of_any_shape_is_answered_200_or_400_never_a_server_error(
    world, settings, changes, event, delivery, deep
):
    import hashlib
    import hmac

    from evolution.models import GitHubDelivery

    settings.GITHUB_REPOSITORY = "acme/brain"
    settings.GITHUB_WEBHOOK_SECRET = "s3cret"
    body = json.dumps(_pull_request_event(changes)).encode()
    if deep:
        body = b'{"x":' * deep + body + b"}" * deep
    signature = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    answer = APIClient(raise_request_exception=False).post(
        "/github/webhook/",
        body,
        content_type="application/json",
        HTTP_X_HUB_SIGNATURE_256=signature,
        HTTP_X_GITHUB_EVENT=event,
        HTTP_X_GITHUB_DELIVERY=delivery,
    )
    assert answer.status_code in (200, 400), (changes, answer.content[:200])
    for number in GitHubDelivery.objects.exclude(number=None).values_list("number", flat=True):
        assert isinstance(number, int) and 1 <= number < 2**31
    if event == "pull_request" and changes.get("number") is True and answer.status_code == 200:
        raise AssertionError("true was read as PR #1")


@HEADER_SETTINGS
@given(update=st.one_of(JSON_ANY, st.dictionaries(st.sampled_from(["update_id", "message"]), JSON_ANY)))
def test_a_telegram_update_of_any_shape_is_answered_200_never_a_server_error(world, telegram_on, update):
    from tests.fakes.telegram_fixtures import WEBHOOK_SECRET

    answer = APIClient(raise_request_exception=False).post(
        "/telegram/webhook/",
        json.dumps(update).encode(),
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=WEBHOOK_SECRET,
    )
    assert answer.status_code == 200, (update, answer.content[:200])
