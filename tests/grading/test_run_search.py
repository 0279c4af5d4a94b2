"""Finding runs (issue 15): the runs list filters by grade, failure category, commit, date and text, all in the URL;
a bad value is a 400 naming the parameter, never a 500."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from grading.models import Execution, Grade
from tests.grading.rating_helpers import make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def runs():
    entity = make_entity("storyboard", name="Storyboard")
    other = make_entity("digest", name="Digest")
    now = timezone.now()
    good = make_run(entity, completed_at=now - timedelta(hours=1))
    Execution.objects.filter(pk=good.pk).update(input={"topic": "spring launch"})
    make_grade(good, passed=True)
    bad = make_run(entity, completed_at=now - timedelta(hours=2))
    Execution.objects.filter(pk=bad.pk).update(commit="abcdef1234" + "0" * 30)
    make_grade(bad, passed=False, failure_category="below floor: layout_fit", feedback="scenes overlap")
    crashed = make_run(entity, status=Execution.Status.FAILED, completed_at=now - timedelta(days=3), error="boom")
    ungraded = make_run(other, completed_at=now - timedelta(minutes=5))
    grading_failed = make_run(other, completed_at=now - timedelta(minutes=6))
    make_grade(grading_failed, status=Grade.Status.FAILED, passed=None)
    replay = make_run(entity, loop_launched=True)
    return {
        "good": good,
        "bad": bad,
        "crashed": crashed,
        "ungraded": ungraded,
        "grading_failed": grading_failed,
        "replay": replay,
    }


def listed(web, query: str) -> set:
    response = web.get(f"/evolution/runs/?{query}")
    assert response.status_code == 200, response.content.decode()[:500]
    return {str(run.pk) for run in response.context["runs"]}


def ids(runs, *names) -> set:
    return {str(runs[name].pk) for name in names}


def test_every_run_but_replays_is_listed_newest_first(web, runs) -> None:
    response = web.get("/evolution/runs/")
    shown = [run.pk for run in response.context["runs"]]
    assert shown == [runs[n].pk for n in ("ungraded", "grading_failed", "good", "bad", "crashed")]


def test_the_runs_list_filters_by_grade(web, runs) -> None:
    assert listed(web, "grade=bad") == ids(runs, "bad")
    assert listed(web, "grade=failed") == ids(runs, "crashed", "grading_failed")
    assert listed(web, "grade=ungraded") == ids(runs, "ungraded", "crashed")
    assert listed(web, "grade=passed") == ids(runs, "good")


def test_the_runs_list_filters_by_entity_category_commit_date_and_text(web, runs) -> None:
    assert listed(web, "entity=scenario:digest") == ids(runs, "ungraded", "grading_failed")
    assert listed(web, "category=below+floor%3A+layout_fit") == ids(runs, "bad")
    assert listed(web, "commit=ABCDEF12") == ids(runs, "bad")
    today = timezone.localdate()
    assert listed(web, f"since={today - timedelta(days=4)}&until={today - timedelta(days=2)}") == ids(runs, "crashed")
    assert listed(web, "q=spring") == ids(runs, "good")  # the input
    assert listed(web, "q=overlap") == ids(runs, "bad")  # the grade's feedback
    assert listed(web, "q=BOOM") == ids(runs, "crashed")  # the error
    assert listed(web, "grade=bad&q=spring") == set()


def test_the_filter_stays_in_the_form_and_the_links(web, runs) -> None:
    html = web.get("/evolution/runs/?grade=bad&q=overlap").content.decode()
    assert '<option value="bad" selected>' in html and 'value="overlap"' in html
    assert 'href="?category=below%20floor%3A%20layout_fit"' in html  # a row's category is a search
    assert 'href="?commit=abcdef123400"' in html


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("grade=awful", "grade: &#x27;awful&#x27; is not one of bad, failed, ungraded, passed"),
        ("commit=xyz!", "commit: &#x27;xyz!&#x27; is not a commit"),
        ("since=yesterday", "since: &#x27;yesterday&#x27; is not a day (YYYY-MM-DD"),
        ("since=2026-12-05&until=2026-12-01", "since: 2026-12-05 is after until (2026-12-01)"),
        ("entity=scenario:nope", "entity: no entity &#x27;scenario:nope&#x27;"),
        ("before=soon", "before: &#x27;soon&#x27; is not a page of runs"),
        ("q=" + "x" * 201, "q: longer than 200 characters"),
    ],
)
def test_a_bad_filter_is_a_400_that_says_which_parameter(web, runs, query, said) -> None:
    response = web.get(f"/evolution/runs/?{query}")
    assert response.status_code == 400
    html = response.content.decode()
    assert "This search cannot be read: " in html and said in html
    assert "<form" in html  # the person can fix it in place


def test_the_runs_list_pages_back_with_the_filter_kept(web, runs) -> None:
    from grading import run_search

    entity = runs["good"].entity
    now = timezone.now()
    for n in range(run_search.PAGE + 2):
        make_grade(make_run(entity, completed_at=now - timedelta(days=10, minutes=n)), passed=False)
    first = web.get("/evolution/runs/?grade=bad")
    assert len(first.context["runs"]) == run_search.PAGE and first.context["older"]
    second = web.get("/evolution/runs/", {"grade": "bad", "before": first.context["older"]})
    assert len(second.context["runs"]) == 3  # 53 bad runs: 50, then 3


def test_the_navigation_and_the_entity_page_lead_to_the_runs_list(web, runs) -> None:
    nav = web.get("/evolution/entities/").content.decode().split('<nav aria-label="main">')[1].split("</nav>")[0]
    assert 'href="/evolution/runs/"' in nav
    entity = runs["good"].entity
    page = web.get(entity.get_absolute_url()).content.decode()
    assert f'href="/evolution/runs/?entity={entity.target_kind}:{entity.slug}"' in page


def test_a_rows_grade_is_named_in_the_filters_words(web, runs) -> None:
    html = web.get("/evolution/runs/?grade=bad").content.decode()
    row = html.split(f'href="/evolution/runs/{runs["bad"].pk}/"')[1].split("</tr>")[0]
    assert '<span class="badge bad">bad</span>' in row
    html = web.get("/evolution/runs/?grade=failed").content.decode()
    assert "grading failed" in html.split(f'href="/evolution/runs/{runs["grading_failed"].pk}/"')[1].split("</tr>")[0]
