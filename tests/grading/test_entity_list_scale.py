"""The entities list at fleet scale (issue 18): a page of 50, run counts that stop counting at a bound."""

from __future__ import annotations

import pytest
from django.test import Client

from grading.views import entities
from tests.grading.rating_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_list_counts_runs_up_to_its_bound_and_says_more(web, monkeypatch):
    monkeypatch.setattr(entities, "RUNS_COUNTED_UP_TO", 3)
    busy, quiet = make_entity("busy"), make_entity("quiet")
    for _ in range(5):
        make_run(busy)
    make_run(quiet)
    make_run(quiet)
    rows = {e.slug: e.runs_label for e in web.get("/evolution/entities/").context["entities"]}
    assert rows == {"busy": "3+", "quiet": "2"}


def test_the_list_is_paged_and_costs_the_same_queries_for_a_page(web, django_assert_max_num_queries):
    for i in range(entities.ENTITIES_PER_PAGE + 5):
        make_entity(f"e{i:03d}")
    with django_assert_max_num_queries(8):
        first = web.get("/evolution/entities/")
    assert len(first.context["entities"]) == entities.ENTITIES_PER_PAGE
    assert "Page 1 of 2" in first.content.decode()
    assert len(web.get("/evolution/entities/?page=2").context["entities"]) == 5
