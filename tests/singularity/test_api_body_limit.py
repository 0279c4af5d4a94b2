"""A request body over the API's bound is refused before it is read: 413 in the one error shape (issue 14)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from singularity.models import ApiToken

pytestmark = pytest.mark.django_db


def bearer(alice) -> dict[str, str]:
    _, key = ApiToken.issue(alice, "script", is_agent=False)
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.mark.parametrize("path", ["/api/runs/", "/api/runs/report/", "/api/beings/", "/api/no-such-endpoint/"])
def test_a_body_over_the_bound_is_413_naming_its_size_and_the_bound(alice, settings, path):
    settings.API_MAX_BODY_BYTES = 4096
    body = json.dumps({"input": "x" * 5000})
    response = Client().post(path, body, content_type="application/json", **bearer(alice))
    assert response.status_code == 413
    assert response.json() == {
        "error": "too_large",
        "detail": f"body: {len(body):,} bytes is more than the API takes (4,096 bytes)",
    }


def test_a_body_within_the_bound_is_read_as_ever(alice, settings):
    settings.API_MAX_BODY_BYTES = 4096
    response = Client().post("/api/beings/", json.dumps({"name": 5}), content_type="application/json", **bearer(alice))
    assert response.status_code == 201 and response.json()["name"] == "5"


def test_a_length_that_is_not_a_number_is_refused_naming_the_header(alice):
    response = Client().post(
        "/api/beings/", "{}", content_type="application/json", CONTENT_LENGTH="lots", **bearer(alice)
    )
    assert response.status_code == 400
    assert response.json() == {"error": "invalid", "detail": "Content-Length: not a number of bytes"}


def test_the_default_bound_is_two_and_a_half_megabytes():
    from django.conf import settings

    assert settings.API_MAX_BODY_BYTES == 2_621_440 <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
