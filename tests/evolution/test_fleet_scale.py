"""The fleet at scale (issue 18): a page of it, what needs a person first, found by name, at a fixed query count."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round
from evolution.reads import fleet
from singularity.apikit.pagination import PAGE_SIZE
from tests.evolution.page_helpers import graded_run, in_loop, make_card, make_cycle, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def idle_fleet(n: int, runs: int, start: int = 0) -> None:
    for i in range(start, start + n):
        entity = in_loop(f"idle-{i:03d}")
        for k in range(runs):
            graded_run(entity, passed=k % 3 != 0, at=timezone.now() - timedelta(minutes=k + 1))


def deciding(slug: str) -> Cycle:
    cycle = make_cycle(in_loop(slug), phase=Cycle.Phase.DECIDING)
    make_card(make_round(cycle, status=Round.Status.PROPOSED))
    return cycle


def test_a_page_lists_what_waits_on_a_person_first_then_live_cycles_then_the_rest():
    idle_fleet(5, 2)
    watching = make_cycle(in_loop("aaa-watching"), phase=Cycle.Phase.WATCHING)
    waiting = deciding("zzz-deciding")
    page = fleet.fleet_page(per_page=3)
    assert [r["targetId"] for r in page.rows] == ["zzz-deciding", "aaa-watching", "idle-000"]
    assert [r["state"] for r in page.rows] == ["waiting_on_you", "watching", "window"]
    assert (page.total, page.pages, page.need_you) == (7, 3, 1)
    last = fleet.fleet_page(per_page=3, page=9)  # past the end: the last page
    assert last.page == 3 and [r["targetId"] for r in last.rows] == ["idle-004"]
    assert waiting.pk != watching.pk


def test_the_search_box_finds_entities_by_name_or_id(web):
    idle_fleet(3, 1)
    in_loop("billing", name="Invoice triage")
    html = web.get("/evolution/?q=invoice").content.decode()
    assert 'id="entity-scenario-billing"' in html and "idle-000" not in html
    assert 'value="invoice"' in html
    assert "No entity in the loop matches" in web.get("/evolution/?q=nothing-like-it").content.decode()
    assert web.get("/evolution/?page=banana").status_code == 200


def test_the_htmx_refresh_keeps_the_page_and_the_search():
    idle_fleet(1, 1)
    client = Client()
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("dora", "dora@example.org", "x"))
    html = client.get("/evolution/?q=idle&page=1", HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-get="/evolution/?q=idle&amp;page=1"' in html


def test_the_fleet_page_costs_the_same_queries_with_ten_times_the_entities_and_runs(web):
    idle_fleet(3, 2)
    deciding("one-deciding")
    with CaptureQueriesContext(connection) as few:
        web.get("/evolution/", HTTP_HX_REQUEST="true")
    idle_fleet(60, 6, start=3)
    deciding("two-deciding")
    with CaptureQueriesContext(connection) as many:
        response = web.get("/evolution/", HTTP_HX_REQUEST="true")
    assert len(many.captured_queries) == len(few.captured_queries) <= 20
    assert len(response.context["rows"]) == fleet.PER_PAGE


def test_loop_status_pages_the_fleet_by_its_cursor_and_refuses_a_bad_page(web):
    idle_fleet(5, 1)
    seen, url = [], "/api/loop/status/?limit=2"
    while url:
        body = web.get(url).json()
        assert len(body["entities"]) <= 2 and body["needsYou"] == len(body["needsYouItems"])
        seen += [e["targetId"] for e in body["entities"]]
        url = f"/api/loop/status/?limit=2&cursor={body['nextCursor']}" if body["nextCursor"] else ""
    assert seen == [f"idle-{i:03d}" for i in range(5)]
    for query, named in (("limit=0", "limit: "), ("limit=101", "limit: "), ("cursor=nonsense", "cursor: ")):
        response = web.get(f"/api/loop/status/?{query}")
        assert response.status_code == 400 and response.json()["detail"].startswith(named), query


def test_loop_status_answers_the_fleet_a_page_of_every_lists_size_unless_asked_for_more(web):
    idle_fleet(PAGE_SIZE + 1, 0)
    body = web.get("/api/loop/status/").json()
    assert len(body["entities"]) == PAGE_SIZE and body["nextCursor"]
    assert len(web.get("/api/loop/status/?limit=100").json()["entities"]) == PAGE_SIZE + 1
