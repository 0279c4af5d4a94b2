"""The entity page at scale (issue 18): what it reads is bounded whatever the entity's history holds.

The plots draw the newest ``PLOT_RUNS`` graded runs and say so past them; the
recent runs table's rows are built in Python exactly as its template loop
rendered them; and the page sends as many statements at 300 runs as at 10.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.template import Context, Template
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from grading import views
from grading.models import Execution, Grade, Rating
from grading.views import entity_plots
from tests.grading.rating_helpers import JUDGE, RELEVANCE, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def plot_of(html: str, metric_id: str) -> str:
    start = html.index(f'<figure class="plot" data-metric="{metric_id}"')
    return html[start : html.index("</figure>", start)]


def graded_runs(entity, count: int, *, start, metric_id: str = "layout_fit") -> list[Execution]:
    """``count`` graded runs of ``entity`` an hour apart from ``start`` (oldest first), written in two statements."""
    runs = [
        Execution(
            entity=entity,
            run_kind=entity.kind,
            status=Execution.Status.SUCCEEDED,
            sampling=Execution.Sampling.SAMPLED,
            started_at=start + timedelta(hours=n),
            completed_at=start + timedelta(hours=n, seconds=3),
            duration_ms=3000,
            cost_usd=Decimal("0.0123"),
            commit=entity.commit,
        )
        for n in range(count)
    ]
    Execution.objects.bulk_create(runs)
    Grade.objects.bulk_create(
        Grade(
            execution=run,
            entity=entity,
            status=Grade.Status.GRADED,
            day=run.completed_at.date(),
            booked_at=run.completed_at,
            due_at=run.completed_at,
            graded_at=run.completed_at,
            score=0.8,
            passed=True,
            metrics={metric_id: 0.25 + (n % 3) / 4},
            judge=JUDGE,
        )
        for n, run in enumerate(runs)
    )
    return runs


# --- The plots' bound -----------------------------------------------------------------------------


def test_the_plots_draw_the_newest_runs_and_say_which_span_past_the_bound(web, monkeypatch) -> None:
    monkeypatch.setattr(entity_plots, "PLOT_RUNS", 5)
    entity = make_entity()
    runs = graded_runs(entity, 7, start=timezone.now() - timedelta(days=2))
    html = web.get(entity.get_absolute_url()).content.decode()
    plot = plot_of(html, "layout_fit")
    shown = re.findall(r"<title>run ([0-9a-f]{8}) ", plot)
    assert shown == [str(run.pk)[:8] for run in runs[2:]]  # the newest five, oldest first
    span = re.search(r'<p class="small" id="plot-span">(.*?)</p>', html)
    assert span, html
    assert "The plots show the newest 5 graded runs" in span.group(1)
    from singularity.display import instant_text

    assert f"started {instant_text(runs[2].started_at)} to {instant_text(runs[-1].started_at)}" in span.group(1)
    assert f'<a href="/evolution/runs/?entity=scenario:{entity.slug}">the runs list</a>' in span.group(1)


def test_the_plots_say_nothing_of_a_span_when_they_draw_every_graded_run(web, monkeypatch) -> None:
    monkeypatch.setattr(entity_plots, "PLOT_RUNS", 5)
    entity = make_entity()
    runs = graded_runs(entity, 5, start=timezone.now() - timedelta(days=2))
    html = web.get(entity.get_absolute_url()).content.decode()
    assert 'id="plot-span"' not in html
    assert re.findall(r"<title>run ([0-9a-f]{8}) ", plot_of(html, "layout_fit")) == [str(r.pk)[:8] for r in runs]


# --- The recent runs' rows --------------------------------------------------------------------------

#: The recent runs table's loop as the template rendered it before its rows were built in Python.
TEMPLATE_ROWS = (
    "{% load humanize singularity_tags %}"
    "{% for r in runs %}\n    <tr>\n"
    '      <td><a href="{{ r.get_absolute_url }}"><code>{{ r.id|stringformat:"s"|slice:":8" }}</code></a></td>\n'
    "      <td>{{ r.status|status_badge }}</td>\n"
    "      <td>{{ r.get_source_display }}</td>\n"
    "      <td>{{ r.get_sampling_display }}</td>\n"
    '      <td>{% with g=r.grade %}{% include "grading/partials/grade_badge.html" %}{% endwith %}</td>\n'
    '      <td class="num" title="{{ r.cost_usd|money_exact }}">{{ r.cost_usd|money }}</td>\n'
    "      <td>{% if r.completed_at %}<time datetime=\"{{ r.completed_at|date:'c' }}\" "
    'title="{{ r.completed_at }}">{{ r.completed_at|naturaltime }}</time>{% else %}running{% endif %}</td>\n'
    "    </tr>\n  {% endfor %}"
)


def test_the_recent_runs_rows_are_what_the_template_rendered_on_odd_runs() -> None:
    entity = make_entity()
    now = timezone.now()
    make_run(entity, completed_at=now - timedelta(days=9), cost_usd=Decimal("0.0000001"))  # not booked
    make_run(entity, status=Execution.Status.RUNNING, cost_usd=Decimal("0"))
    failed = make_run(entity, status=Execution.Status.FAILED, completed_at=now - timedelta(minutes=3))
    make_grade(failed, status=Grade.Status.FAILED, error='judge said "<no>" & left')
    pending = make_run(entity, completed_at=now - timedelta(hours=5), cost_usd=Decimal("12.3456789"))
    make_grade(pending, status=Grade.Status.BOOKED)
    unjudged = make_run(entity, completed_at=now - timedelta(seconds=30), sampling=Execution.Sampling.SKIPPED_RATE)
    make_grade(unjudged, passed=None, score=0.12345)
    bad = make_run(entity, completed_at=now - timedelta(days=1, hours=2), source=Execution.Source.SCHEDULE)
    make_grade(bad, passed=False, score=None)
    make_grade(make_run(entity, completed_at=now - timedelta(days=400)), score=1)
    runs = views.recent_runs(entity)
    assert len(runs) == 7
    models = list(entity.executions.select_related("grade").order_by("-started_at"))
    assert [run.id for run in runs] == [run.pk for run in models]
    assert views.recent_rows_html(runs) == Template(TEMPLATE_ROWS).render(Context({"runs": models}))
    assert views.recent_rows_html([]) == ""


# --- Statements whatever the history holds -----------------------------------------------------------


def statements(web: Client, entity) -> list[str]:
    with CaptureQueriesContext(connection) as read:
        assert web.get(entity.get_absolute_url()).status_code == 200
    return [q["sql"] for q in read.captured_queries]


def test_the_entity_pages_send_as_many_statements_at_300_runs_as_at_10(web, alice) -> None:
    plain = make_entity("plain", metrics={"relevance": RELEVANCE})
    rated = make_entity("rated")
    start = timezone.now() - timedelta(days=30)
    few = {}
    for entity, metric_id in ((plain, "relevance"), (rated, "layout_fit")):
        runs = graded_runs(entity, 10, start=start, metric_id=metric_id)
        few[entity.slug] = runs
    for run in few["rated"][:4]:
        Rating.objects.create(execution=run, metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    at_10 = {e.slug: len(statements(web, e)) for e in (plain, rated)}
    for entity, metric_id in ((plain, "relevance"), (rated, "layout_fit")):
        runs = graded_runs(entity, 290, start=start + timedelta(hours=20), metric_id=metric_id)
        if entity is rated:
            for run in runs[::9]:
                Rating.objects.create(execution=run, metric_id="layout_fit", user=alice, value=4, normalized=0.75)
    at_300 = {e.slug: len(statements(web, e)) for e in (plain, rated)}
    assert at_300 == at_10
    assert at_300["plain"] <= 20 and at_300["rated"] <= 20


# --- A rating carries its run's entity (calibration reads ratings by entity) --------------------------


def test_a_rating_carries_its_runs_entity_whatever_writes_it(alice, bob) -> None:
    from grading.ratings import rate

    entity, other = make_entity("digest"), make_entity("other")
    run = make_run(entity)
    make_grade(run, metrics={"layout_fit": 0.5})
    answer = rate(
        actor_user=alice,
        is_agent=False,
        run_kind=run.run_kind,
        run_id=str(run.pk),
        idempotency_key="k1",
        ratings=[{"metric_id": "layout_fit", "value": 4, "note": ""}],
    )
    assert answer.ok, answer
    by_create = Rating.objects.create(
        execution=make_run(other), metric_id="layout_fit", user=bob, value=2, normalized=0.25
    )
    by_id = Rating(execution_id=make_run(other).pk, metric_id="layout_fit", user=bob, value=2, normalized=0.25)
    by_id.save()
    assert Rating.objects.get(execution=run, user=alice).entity_id == entity.pk
    assert by_create.entity_id == other.pk and Rating.objects.get(pk=by_id.pk).entity_id == other.pk
    assert not Rating.objects.exclude(entity_id=F("execution__entity_id")).exists()


def test_a_rating_written_in_bulk_without_its_entity_is_refused(bob) -> None:
    run = make_run(make_entity())
    with pytest.raises(IntegrityError), transaction.atomic():
        Rating.objects.bulk_create([Rating(execution=run, metric_id="layout_fit", user=bob, value=2, normalized=0.25)])


def test_calibrations_pairs_are_read_by_the_entity_on_the_rating_not_through_its_runs(alice) -> None:
    from grading.calibration import calibration

    entity = make_entity()
    runs = graded_runs(entity, 6, start=timezone.now() - timedelta(days=1))
    for run in runs[:4]:
        Rating.objects.create(execution=run, metric_id="layout_fit", user=alice, value=2, normalized=0.25)
    with CaptureQueriesContext(connection) as read:
        [answer] = calibration(entity)
    pairs = read.captured_queries[-1]["sql"]
    assert '"grading_rating"."entity_id" IN' in pairs and '"grading_execution"."entity_id"' not in pairs
    assert answer.pairs == 4
