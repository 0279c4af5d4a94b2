"""GET /api/ratings/ lists people's ratings (issue 36: it answered 405): newest first, a cursor page at a time,
filtered by entity, run and metric, each filter refused naming it when it names nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from grading.models import Rating
from tests.grading.grading_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db


def _rated(entity, person, value: str, metric: str = "layout_fit", note: str = "") -> Rating:
    return Rating.objects.create(
        execution=make_run(entity), metric_id=metric, user=person, value=Decimal(value), normalized=0.5, note=note
    )


def test_ratings_are_listed_newest_first_filtered_and_paged(alice):
    bob = User.objects.create_user("bob")
    digest, other = make_entity("digest"), make_entity("other")
    first = _rated(digest, alice, "3.5", note="fine")
    second = _rated(digest, bob, "2", metric="tone")
    _rated(other, alice, "4")
    api = APIClient()
    api.force_authenticate(alice)
    page = api.get("/api/ratings/", {"entity": f"{digest.target_kind}:digest", "limit": 1}).json()
    assert [r["runId"] for r in page["results"]] == [str(second.execution_id)] and page["nextCursor"]
    rest = api.get(
        "/api/ratings/", {"entity": f"{digest.target_kind}:digest", "limit": 1, "cursor": page["nextCursor"]}
    )
    (row,) = rest.json()["results"]
    assert row == {
        "runId": str(first.execution_id),
        "entity": f"{digest.target_kind}:digest",
        "metricId": "layout_fit",
        "user": "alice",
        "value": "3.500000",
        "normalized": 0.5,
        "note": "fine",
        "createdAt": row["createdAt"],
        "updatedAt": row["updatedAt"],
    }
    by_run = api.get("/api/ratings/", {"runId": str(second.execution_id)}).json()["results"]
    assert [r["metricId"] for r in by_run] == ["tone"]
    assert [r["metricId"] for r in api.get("/api/ratings/", {"metricId": "tone"}).json()["results"]] == ["tone"]


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ({"entity": "scenario:nope"}, "entity: 'scenario:nope' names no entity"),
        ({"runId": "twelve"}, "runId: 'twelve' is not a run id"),
    ],
)
def test_a_filter_naming_nothing_is_refused_naming_it(alice, query, detail):
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.get("/api/ratings/", query)
    assert answer.status_code == 400 and answer.json()["detail"].startswith(detail), answer.json()
