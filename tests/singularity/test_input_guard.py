"""No input gives a 500 (issue 27): odd header encodings, a Content-Length that is no length, NUL in a form or query.

Runs on whichever database ``DATABASE_URL`` names: on Postgres a NUL that
reached a query would be an error there (text cannot hold U+0000), so these
are run on both backends.
"""

from __future__ import annotations

import pytest
from django.test import Client

from singularity.models import ApiToken
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db

NUL = "contains a NUL character (U+0000), which no text here may hold"


def client(user=None) -> Client:
    browser = Client(raise_request_exception=False)
    if user is not None:
        browser.force_login(user)
    return browser


# --- The Authorization header -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/beings/", "/api/loop/status/", "/api/cards/"])
@pytest.mark.parametrize(
    "value",
    [
        "Bearer \xe9",  # a byte that is not UTF-8 (WSGI hands headers over as Latin-1)
        "Bearer \u20ac",  # a character no header byte can carry (the test client lets it through)
        "\xe9 abc",  # the scheme itself
        "Token \xff\xfe",
    ],
)
def test_an_authorization_header_that_is_not_text_is_refused_401_naming_it(path, value):
    answer = client().get(path, HTTP_AUTHORIZATION=value)
    assert answer.status_code == 401, answer.content[:300]
    body = answer.json()
    assert body["error"] == "authentication_failed"
    assert body["detail"].startswith("Authorization header: ")


def test_a_good_token_still_authenticates(alice):
    _, key = ApiToken.issue(alice, "script")
    assert client().get("/api/beings/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200


# --- Content-Length ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "+5", " ", "5 5"])
@pytest.mark.parametrize(
    "path",
    ["/accounts/login/", "/github/webhook/", "/telegram/webhook/", "/evolution/runs/", "/api/loop/ideas/"],
)
def test_a_content_length_that_is_no_number_of_bytes_is_refused_400(alice, path, length):
    answer = client(alice).post(
        path, data=b"text=hi", content_type="application/x-www-form-urlencoded", CONTENT_LENGTH=length
    )
    assert answer.status_code == 400, answer.content[:300]
    assert b"Content-Length" in answer.content


def test_a_right_content_length_is_read(alice):
    answer = client().post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert answer.status_code == 302


# --- A NUL (or a lone surrogate) in a form field, a query parameter or the path of a page ------------------


@pytest.fixture
def entity():
    return looped()


def test_a_nul_in_an_ideas_text_is_refused_400_naming_the_field(alice, entity):
    url = f"/evolution/entities/{entity.target_kind}/{entity.slug}/ideas/post/"
    answer = client(alice).post(url, {"text": "lead\x00with numbers"})
    assert answer.status_code == 400
    assert answer.content.decode() == f"text: {NUL}"
    from evolution.models import Idea

    assert not Idea.objects.exists()


def test_a_nul_in_a_holds_reason_is_refused_400_naming_the_field(alice, entity):
    url = f"/evolution/entities/{entity.target_kind}/{entity.slug}/supervision/hold/"
    answer = client(alice).post(url, {"reason": "\x00"})
    assert answer.status_code == 400
    assert answer.content.decode() == f"reason: {NUL}"
    from evolution.models import Supervision

    assert not Supervision.objects.exists()


@pytest.mark.parametrize(
    "path",
    ["/evolution/runs/", "/evolution/rate/", "/evolution/entities/", "/inbox/", "/admin/auth/user/", "/evolution/"],
)
def test_a_nul_in_a_query_parameter_of_a_page_is_refused_400_naming_it(alice, path):
    answer = client(alice).get(path, {"q": "a\x00b"})
    assert answer.status_code == 400, answer.content[:300]
    assert answer.content.decode() == f"q: {NUL}"


def test_a_nul_in_a_query_parameters_name_is_refused_too(alice):
    answer = client(alice).get("/evolution/runs/?a%00b=1")
    assert answer.status_code == 400 and NUL in answer.content.decode()


def test_a_nul_in_the_path_of_a_page_is_refused_400(alice):
    answer = client(alice).get("/evolution/entities/scenario/tri%00age/")
    assert answer.status_code == 400
    assert answer.content.decode() == f"path: {NUL}"


def test_a_nul_in_a_multipart_field_is_refused_400_naming_it(alice, entity):
    url = f"/evolution/entities/{entity.target_kind}/{entity.slug}/ideas/post/"
    answer = client(alice).post(url, {"text": "ok", "note": "x\x00"})  # multipart is the test client's default
    assert answer.status_code == 400
    assert answer.content.decode() == f"note: {NUL}"


def test_the_same_pages_answer_ordinary_text(alice, entity):
    browser = client(alice)
    assert browser.get("/evolution/runs/", {"q": "ticket é ✓"}).status_code == 200
    url = f"/evolution/entities/{entity.target_kind}/{entity.slug}/supervision/hold/"
    assert browser.post(url, {"reason": "looking into it"}).status_code == 302


@pytest.mark.parametrize("path", ["/github/webhook/", "/telegram/webhook/"])
def test_a_form_posted_to_a_webhook_is_still_answered_by_the_webhook(path, settings):
    settings.GITHUB_WEBHOOK_SECRET = "s3cret"
    answer = client().post(path, {"payload": "{}"})  # multipart: the guard reads the fields, the webhook the body
    assert answer.status_code in (401, 404), answer.content[:300]
