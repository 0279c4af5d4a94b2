"""The entity page's metric plots: one SVG a metric over the newest graded runs, with change markers."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from grading.models import Entity, Grade, Rating
from grading.ratings import human_metrics
from grading.trends import WINDOW, marker_x, rolling_median, trend_markers
from grading.views.values import _decimal, _plain, show_metric
from singularity import display
from singularity.plots import HLine, Series, VLine, line_chart
from singularity.templatetags.singularity_tags import money

#: The plots show at most this many of the newest graded runs (read newest first by index, whatever the history
#: holds); past it the page says which span it shows and links the runs list for the older ones.
PLOT_RUNS = 60


def _y_format(spec: dict[str, Any]):
    if spec.get("unit") == "usd":
        return money
    if spec.get("unit") == "ms":
        return lambda value: show_metric(spec, value)
    return _plain


@dataclass(frozen=True)
class PlotSpan:
    """What the plots show when the entity has more graded runs than they draw: the newest ``runs``, started
    from ``first`` to ``last`` (as a person reads instants)."""

    runs: int
    first: str
    last: str


def metric_plots(entity: Entity) -> tuple[list[dict[str, Any]], PlotSpan | None]:
    """One SVG plot per metric over the entity's newest ``PLOT_RUNS`` graded runs (oldest first), with target and
    floor lines; and the span they show when older graded runs exist (None when they show every one).

    A human-rated metric gets people's median beside the judge's number; each
    plot has a rolling median and a marker wherever a change to the entity
    landed (``grading.trends``). Each point's hover names its run, value,
    instant and commit. One query for the grades (one more than shown, to know
    whether older ones exist), one for the ratings, one per marker source.
    """
    specs = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    read = list(
        Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)
        .order_by("-graded_at")
        .values_list("execution_id", "metrics", "execution__started_at", "execution__commit")[: PLOT_RUNS + 1]
    )
    grades = read[:PLOT_RUNS][::-1]
    span = None
    if len(read) > PLOT_RUNS:
        first, last = grades[0][2], grades[-1][2]
        span = PlotSpan(len(grades), display.instant_text(first), display.instant_text(last))
    humans = human_metrics(entity)
    people, raters = _people(execution_id for execution_id, *_ in grades) if humans else ({}, {})
    starts = [started for _, _, started, _ in grades]
    vlines = _change_lines(entity, starts)
    # What each run's hover says before its value, and people's numbers, once a run (not once a metric).
    runs = [
        (
            number,
            vector or {},
            people.get(str(execution_id), {}),
            _run_words(execution_id, started, commit),
            raters.get(str(execution_id), {}),
        )
        for number, (execution_id, vector, started, commit) in enumerate(grades, start=1)
    ]
    plots = []
    for metric_id, spec in specs.items():
        y_format = _y_format(spec)
        judged, rated, judged_titles, rated_titles = [], [], [], []
        for number, vector, rated_by, words, who in runs:
            value = _decimal(vector.get(metric_id))
            if value is not None:
                judged.append((number, value))
                judged_titles.append(f"{words}: {y_format(value)}")
            median = _decimal(rated_by.get(metric_id))
            if median is not None:
                rated.append((number, median))
                names = who.get(metric_id) or []
                by = f" ({', '.join(names)})" if names else ""
                rated_titles.append(f"{words}: people {y_format(median)}{by}")
        series = []
        if spec.get("kind") != "reported":
            name = "Judge" if metric_id in humans else metric_id
            series.append(Series(name, judged, color="#0072B2", titles=judged_titles))
        if metric_id in humans:
            dashed = spec.get("kind") != "reported"
            series.append(Series("People (median)", rated, color="#D55E00", dashed=dashed, titles=rated_titles))
        main = judged if spec.get("kind") != "reported" else rated
        if len(main) > 1:
            median_line = rolling_median(main)
            series.append(Series(f"Median of the last {WINDOW} runs", median_line, color="#5f6b7a", dots=False))
        hlines = []
        if spec.get("target") is not None:
            hlines.append(HLine(_decimal(spec["target"]) or 0, "Target", color="#009E73"))
        if spec.get("floor") is not None:
            hlines.append(HLine(_decimal(spec["floor"]) or 0, "Floor"))
        chart = line_chart(
            series,
            width=560,
            height=240,
            x_label="graded run",
            y_label=spec.get("unit") or "",
            hlines=hlines,
            vlines=vlines if main else (),
            title=f"{entity.name or entity.slug}: {metric_id} by graded run",
            chart_id=f"plot-{metric_id}",
            y_format=y_format,
        )
        plots.append({"metric_id": metric_id, "chart": chart, "changes": vlines})
    return plots, span


def _people(execution_ids: Any) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, list[str]]]]:
    """People's medians a run and metric (on 0..1) and who rated it, in one query: ``({run: {metric: median}},
    {run: {metric: [names]}})``."""
    values: dict[str, dict[str, list[float]]] = {}
    names: dict[str, dict[str, list[str]]] = {}
    rows = (
        Rating.objects.filter(execution_id__in=list(execution_ids))
        .order_by("user__username")
        .values_list("execution_id", "metric_id", "normalized", "user__username")
    )
    for execution_id, metric_id, normalized, username in rows:
        values.setdefault(str(execution_id), {}).setdefault(metric_id, []).append(normalized)
        names.setdefault(str(execution_id), {}).setdefault(metric_id, []).append(username)
    medians = {run: {m: statistics.median(v) for m, v in by.items()} for run, by in values.items()}
    return medians, names


def _run_words(execution_id: Any, started: datetime, commit: str) -> str:
    """A point's hover before its value: "run 1a2b3c4d · 2026-12-01 14:05 CET · commit abc1234" (": 0.75" follows)."""
    words = [f"run {str(execution_id)[:8]}", display.instant_text(started)]
    if commit:
        words.append(f"commit {commit[:7]}")
    return " · ".join(words)


def _change_lines(entity: Entity, starts: list[datetime]) -> list[VLine]:
    """The plot's markers: each change since the oldest plotted run, between the runs it came between."""
    if not starts:
        return []
    lines = []
    for marker in trend_markers(entity, min(starts)):
        x = marker_x(starts, marker.at)
        if x is not None:
            color = "#b3261e" if marker.kind == "revert" else "#6a3d9a"
            lines.append(VLine(x, marker.label, href=marker.href, color=color))
    return lines
