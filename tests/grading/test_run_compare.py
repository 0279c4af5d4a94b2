"""Side by side from the runs list: tick two runs, Compare the two, and the first run's page shows them together."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tests.grading.rating_helpers import make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db

COMPARE = "/evolution/runs/compare/"


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def two():
    entity = make_entity("digest")
    older = make_run(entity, completed_at=timezone.now() - timedelta(hours=2))
    newer = make_run(entity, completed_at=timezone.now() - timedelta(hours=1))
    for run in (older, newer):
        make_grade(run, metrics={"layout_fit": 0.75})
    return newer, older


def test_each_row_has_a_checkbox_and_the_list_a_compare_button(web, two) -> None:
    newer, older = two
    html = web.get("/evolution/runs/").content.decode()
    assert f'action="{COMPARE}"' in html and 'method="get"' in html
    for run in two:
        assert f'<input type="checkbox" name="run" value="{run.pk}"' in html
    assert ">Compare the two</button>" in html


def test_two_picked_runs_open_the_first_runs_page_beside_the_second(web, two) -> None:
    newer, older = two
    response = web.get(COMPARE, {"run": [str(newer.pk), str(older.pk)]})
    assert response.status_code == 302
    assert response["Location"] == f"/evolution/runs/{newer.pk}/?compare={older.pk}"
    html = web.get(response["Location"]).content.decode()
    assert str(older.pk)[:8] in html and "compare:" not in html


@pytest.mark.parametrize("count", [0, 1, 3])
def test_not_exactly_two_is_sent_back_to_the_list_saying_so(web, two, count) -> None:
    third = make_run(two[0].entity)
    picked = [str(r.pk) for r in (*two, third)][:count]
    response = web.get(COMPARE, {"run": picked, "back": "grade=bad"}, follow=True)
    assert response.redirect_chain[-1][0] == "/evolution/runs/?grade=bad"
    assert f"Pick exactly two runs to compare (you picked {count})." in response.content.decode()


def test_runs_of_two_entities_are_not_compared(web, two) -> None:
    other = make_run(make_entity("pulse"))
    response = web.get(COMPARE, {"run": [str(two[0].pk), str(other.pk)]}, follow=True)
    assert response.redirect_chain[-1][0] == "/evolution/runs/"
    assert "Pick two runs of the same entity to compare them." in response.content.decode()


def test_a_run_that_is_not_one_is_refused_in_words(web, two) -> None:
    response = web.get(COMPARE, {"run": [str(two[0].pk), "not-a-run"]}, follow=True)
    assert "Pick two runs of the same entity to compare them." in response.content.decode()


def test_the_compare_form_remembers_the_search_it_came_from(web, two) -> None:
    html = web.get("/evolution/runs/", {"entity": "scenario:digest"}).content.decode()
    assert '<input type="hidden" name="back" value="entity=scenario%3Adigest">' in html
