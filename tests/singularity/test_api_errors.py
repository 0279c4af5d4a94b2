"""One error shape for every endpoint: ``{"error": <code>, "detail": <a sentence>}``, JSON under /api/ always."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from hitl.actions import answer_card
from singularity.being.actions import create_being
from singularity.models import ApiToken
from tests.hitl.helpers import make_card, recording_handler

pytestmark = pytest.mark.django_db


def client(user, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def shape(response) -> tuple[int, str]:
    """The status and the error code, after checking the body is exactly the error shape (plus extras)."""
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert isinstance(body.get("error"), str) and isinstance(body.get("detail"), str), body
    return response.status_code, body["error"]


def test_an_unknown_path_under_api_is_a_json_404(alice):
    response = client(alice).get("/api/no-such-thing/")
    assert shape(response) == (404, "not_found")
    assert response.json()["detail"] == "/api/no-such-thing/: no such endpoint"


def test_a_path_outside_api_keeps_the_html_404(alice, client):
    client.force_login(alice)
    assert client.get("/no-such-page/")["Content-Type"].startswith("text/html")


def test_a_method_an_endpoint_does_not_take_is_a_json_405(alice):
    response = client(alice).delete("/api/runs/")
    assert shape(response) == (405, "method_not_allowed")
    assert response.json()["detail"] == 'Method "DELETE" not allowed.'


def test_no_credentials_and_bad_credentials(db):
    assert shape(APIClient().get("/api/beings/")) == (401, "not_authenticated")
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer sg_not-a-key")
    response = bad.get("/api/beings/")
    assert shape(response) == (401, "authentication_failed")
    assert response.json()["detail"] == "Invalid or revoked API token."


def test_a_missing_object_is_not_found(alice):
    response = client(alice).get("/api/beings/nobody/")
    assert shape(response) == (404, "not_found")


def test_a_validation_error_names_the_field(alice):
    response = client(alice).post("/api/beings/", {"name": "x" * 65}, format="json")
    assert shape(response) == (400, "invalid")
    assert response.json()["detail"] == "name: Ensure this field has no more than 64 characters."


def test_a_body_that_is_not_json_is_invalid(alice):
    response = client(alice).post("/api/beings/", "{nope", content_type="application/json")
    assert shape(response) == (400, "invalid")
    assert response.json()["detail"].startswith("body: JSON parse error")


def test_a_card_refusal_has_the_error_code_beside_its_code(alice):
    with recording_handler():
        card = make_card()
        answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
        response = client(alice).post(f"/api/cards/{card.pk}/answer/", {"choice": "skip"}, format="json")
    assert shape(response) == (409, "already_closed")
    assert response.json()["code"] == "already_closed"


def test_an_agent_refusal_keeps_its_words(alice):
    create_being("nova")
    response = client(alice, agent=True).post("/api/beings/nova/start/")
    assert shape(response) == (403, "refused")


def test_a_crash_under_api_is_a_json_500(alice, monkeypatch, settings):
    from singularity import api

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(api.BeingViewSet, "get_queryset", boom)
    settings.DEBUG = False
    response = client(alice).get("/api/beings/")
    assert shape(response) == (500, "server_error")
    assert "boom" not in response.json()["detail"]
