"""The runs list at 5,000 entities (issue 27): a bounded number of statements, none loading an entity's terms.

The page took 3.6 s with no run to show: its entity filter loaded every entity
whole (terms, provenance and front matter parsed from JSON, 5,000 times) for an
option naming each. The filter needs three columns.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from grading.models import Entity
from tests.grading.rating_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db

FLEET = 5_000


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def fleet(size: int) -> list[Entity]:
    """``size`` entities with the terms a real one carries (copied from one made the ordinary way)."""
    model = make_entity("e0000")
    fields = {f.attname: getattr(model, f.attname) for f in Entity._meta.concrete_fields if f.attname != "id"}
    copies = [Entity(**{**fields, "slug": f"e{i:04d}", "name": f"E {i}"}) for i in range(1, size)]
    Entity.objects.bulk_create(copies)
    return [model, *copies]


def lists_entities_whole(sql: str) -> bool:
    """Whether ``sql`` reads entities (not runs joined to theirs: a page holds 25) with their terms."""
    return 'FROM "grading_entity"' in sql and '"grading_entity"."terms"' in sql


@pytest.mark.parametrize("path", ["/evolution/runs/", "/evolution/runs/?grade=bogus"])
def test_the_runs_list_at_5000_entities_reads_no_entitys_terms_in_bounded_statements(
    web, django_assert_max_num_queries, path
):
    fleet(FLEET)
    with django_assert_max_num_queries(6), CaptureQueriesContext(connection) as read:
        response = web.get(path)
    assert response.status_code in (200, 400)
    assert not [q["sql"][:200] for q in read.captured_queries if lists_entities_whole(q["sql"])]
    html = response.content.decode()
    assert html.count('<option value="workflow:e') + html.count('<option value="scenario:e') == FLEET


def test_the_filter_names_each_entity_and_keeps_the_chosen_one_selected(web):
    entity = make_entity("triage")
    make_entity("digest", name="Morning digest")
    make_run(entity)
    key = f"{entity.target_kind}:{entity.slug}"
    html = web.get(f"/evolution/runs/?entity={key}").content.decode()
    assert f'<option value="{key}" selected>{entity.name}</option>' in html
    assert f'<option value="{entity.target_kind}:digest">Morning digest</option>' in html
