"""The entity page's trend plots: a rolling median, and markers where a loop merge or a revert changed the entity."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round
from grading.trends import WINDOW
from tests.evolution.page_helpers import graded_run, in_loop, make_cycle, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def plot_of(html: str, metric_id: str) -> str:
    start = html.index(f'data-metric="{metric_id}"')
    return html[start : html.index("</figure>", start)]


def merged_cycle(entity, *, at, pr: int, revert_pr: int | None = None, reverted_at=None) -> Cycle:
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED, at=at - timedelta(hours=1))
    Cycle.objects.filter(pk=cycle.pk).update(merged_at=at)
    make_round(
        cycle,
        status=Round.Status.MERGED,
        pr_number=pr,
        merge_sha="f" * 40,
        revert_pr_number=revert_pr,
        revert_outcome="merged" if revert_pr else "",
        revert_merged_at=reverted_at,
    )
    return cycle


def runs(entity, count: int, *, start, step=timedelta(hours=1)):
    return [graded_run(entity, metrics={"accuracy": 0.5 + (n % 3) / 10}, at=start + n * step) for n in range(count)]


def test_the_plot_marks_a_merge_and_a_revert_between_the_runs_they_moved(web) -> None:
    entity = in_loop("digest")
    start = timezone.now() - timedelta(days=2)
    runs(entity, 6, start=start)
    cycle = merged_cycle(
        entity, at=start + timedelta(hours=2, minutes=30), pr=3, revert_pr=7, reverted_at=start + timedelta(hours=4.5)
    )
    plot = plot_of(web.get(entity.get_absolute_url()).content.decode(), "accuracy")
    assert f"<title>cycle {cycle.pk} merged PR #3</title>" in plot
    assert f"<title>revert of cycle {cycle.pk} merged PR #7</title>" in plot
    assert plot.count(f'href="/evolution/cycles/{cycle.pk}/"') == 2
    xs = [float(x) for x in re.findall(r'<g class="vline"><title>[^<]*</title><line x1="([\d.]+)"', plot)]
    dots = sorted(float(x) for x in re.findall(r'<circle cx="([\d.]+)"', plot))
    assert dots[2] < xs[0] < dots[3]  # three runs before the merge
    assert dots[4] < xs[1] < dots[5]  # five before the revert
    assert f"Median of the last {WINDOW} runs" in plot


def test_each_point_names_its_run_value_instant_and_commit(web) -> None:
    entity = in_loop("digest", commit="abc1234def5678")
    run = graded_run(entity, metrics={"accuracy": 0.75})
    plot = plot_of(web.get(entity.get_absolute_url()).content.decode(), "accuracy")
    hover = re.search(rf"<title>(run {str(run.pk)[:8]}[^<]*)</title>", plot)
    assert hover, plot
    assert "0.75" in hover.group(1) and "commit abc1234" in hover.group(1)
    assert str(run.started_at.year) in hover.group(1)


def test_a_change_older_than_every_plotted_run_is_not_marked(web) -> None:
    entity = in_loop("digest")
    start = timezone.now() - timedelta(days=2)
    cycle = merged_cycle(entity, at=start - timedelta(days=1), pr=2)
    runs(entity, 3, start=start)
    plot = plot_of(web.get(entity.get_absolute_url()).content.decode(), "accuracy")
    assert f"cycle {cycle.pk} merged" not in plot


def test_the_entity_page_reads_as_many_queries_for_many_runs_and_cycles(web) -> None:
    entity = in_loop("digest")
    start = timezone.now() - timedelta(days=20)
    runs(entity, 2, start=start)
    merged_cycle(entity, at=start + timedelta(minutes=30), pr=1)
    with CaptureQueriesContext(connection) as few:
        web.get(entity.get_absolute_url())
    runs(entity, 40, start=start + timedelta(hours=3))
    for n in range(8):
        merged_cycle(
            entity,
            at=start + timedelta(hours=4 + n * 4),
            pr=10 + n,
            revert_pr=30 + n,
            reverted_at=start + timedelta(hours=5 + n * 4),
        )
    with CaptureQueriesContext(connection) as many:
        html = web.get(entity.get_absolute_url()).content.decode()
    assert plot_of(html, "accuracy").count('class="vline"') == 17
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_marked_changes_are_listed_under_the_plots_as_links(web) -> None:
    entity = in_loop("digest")
    start = timezone.now() - timedelta(days=2)
    runs(entity, 4, start=start)
    cycle = merged_cycle(entity, at=start + timedelta(hours=1.5), pr=3)
    html = web.get(entity.get_absolute_url()).content.decode()
    changes = html[html.index('id="plot-changes"') :]
    changes = changes[: changes.index("</p>")]
    assert f'<a href="/evolution/cycles/{cycle.pk}/">cycle {cycle.pk} merged PR #3</a>' in changes
