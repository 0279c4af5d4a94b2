"""The grading pages under ``/evolution/``: entities, one entity, one run, and Rate runs.

Rate runs gives or changes the viewer's own rating inline with HTMX; every
form also works without JavaScript (a POST, then a redirect back). Every
rating goes through ``grading.ratings.rate`` — the one door.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.core.paginator import Paginator
from django.db import connection, transaction
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils.dateformat import format as date_format
from django.utils.formats import localize
from django.utils.html import conditional_escape, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timezone import template_localtime
from django.views.decorators.http import require_http_methods, require_POST

from grading.calibration import calibration, calibration_many
from grading.cards import card_key, waiting_until
from grading.models import Entity, Execution, Grade, Rating
from grading.people import human_rated
from grading.ratings import human_metrics, on_scale, people_values, rate, scale_of
from grading.run_search import GRADES, SearchError, page_of, parse_filter
from grading.trends import WINDOW, marker_x, rolling_median, trend_markers
from hitl.models import Card
from singularity import display
from singularity.errors import ConfigError, StateError
from singularity.plots import HLine, Series, VLine, line_chart
from singularity.templatetags.singularity_tags import money, money_exact, status_badge

RECENT_RUNS = 25
#: The plots show at most this many of the newest graded runs (read newest first by index, whatever the history
#: holds); past it the page says which span it shows and links the runs list for the older ones.
PLOT_RUNS = 60
#: Rate runs shows at most this many of the newest terminal runs.
RATE_RUNS = 30
#: A scale with at most this many steps is rated with one button per answer.
MAX_BUTTONS = 8


# --- Showing numbers as people read them ---------------------------------------------------------


def _plain(value: Any) -> str:
    """Decimal text of a number without exponent or trailing zeros."""
    number = _decimal(value)
    if number is None:
        return ""
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "") else text


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    except ArithmeticError:
        return None


def scale_label(scale: dict[str, Any], value: Decimal) -> str:
    """Return the rubric's words for ``value``: a step ("3") or an inclusive band ("2..4"); "" when none says."""
    for key, words in (scale.get("labels") or {}).items():
        low, _, high = str(key).partition("..")
        try:
            lo, hi = Decimal(low), Decimal(high or low)
        except ArithmeticError:
            continue
        if lo <= value <= hi:
            return str(words)
    return ""


def rated_on_scale(spec: dict[str, Any], normalized: Any) -> str:
    """Return a 0..1 value on the metric's own scale with its rubric words: "4 · Good"; "—" when absent."""
    if _decimal(normalized) is None:
        return "—"
    shown = on_scale(spec, float(normalized))
    assert shown is not None
    words = scale_label(scale_of(spec), shown)
    return f"{_plain(shown)} · {words}" if words else _plain(shown)


def show_metric(spec: dict[str, Any], value: Any) -> str:
    """Return a metric's value in its unit: money as $, ms as seconds, a rated metric on its scale; "—" when absent."""
    number = _decimal(value)
    if number is None:
        return "—"
    unit = spec.get("unit")
    if unit == "usd":
        return money(number)
    if unit == "ms":
        return f"{_plain((number / 1000).quantize(Decimal('0.001')))} s"
    if spec.get("kind") in ("judged", "reported") and (spec.get("scale") or spec.get("human")):
        return rated_on_scale(spec, value)
    if unit == "count":
        return _plain(number)
    return _plain(number.quantize(Decimal("0.0001")) if number != number.to_integral_value() else number)


# --- Lists and lookups ---------------------------------------------------------------------------


def _newest_grade(field_name: str) -> Subquery:
    newest = Grade.objects.filter(entity=OuterRef("pk"), status=Grade.Status.GRADED).order_by("-graded_at")
    return Subquery(newest.values(field_name)[:1])


def entities_for_list(ids: list[int] | None = None) -> QuerySet[Entity]:
    """The entities (those of ``ids`` when given) with their run count and newest grade's outcome and time.

    One query; the counts and the newest grades are correlated subqueries per entity read (a page of them).
    """
    entities = Entity.objects.all() if ids is None else Entity.objects.filter(pk__in=ids)
    return entities.annotate(
        runs=RawSQL(COUNTED_RUNS, [RUNS_COUNTED_UP_TO + 1]),
        last_passed=_newest_grade("passed"),
        last_score=_newest_grade("score"),
        last_graded_at=_newest_grade("graded_at"),
    ).order_by("kind", "slug")


#: Entities on one page of the list.
ENTITIES_PER_PAGE = 50
#: The list counts an entity's runs up to here and shows more as "1,000+" (a count that does not grow with them).
RUNS_COUNTED_UP_TO = 1000
COUNTED_RUNS = (
    "SELECT count(*) FROM (SELECT 1 FROM grading_execution e WHERE e.entity_id = grading_entity.id LIMIT %s) counted"
)


def runs_label(count: int) -> str:
    """An entity's run count as the list shows it: "1,000+" past what it counts."""
    return f"{RUNS_COUNTED_UP_TO:,}+" if count > RUNS_COUNTED_UP_TO else f"{count:,}"


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


def _get_run(run_id: uuid.UUID) -> Execution:
    return get_object_or_404(Execution.objects.select_related("entity", "started_by"), pk=run_id)


def _grade_of(execution: Execution) -> Grade | None:
    return Grade.objects.filter(execution=execution).first()


# --- Entity page pieces --------------------------------------------------------------------------


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        return [leaf for key, inner in value.items() for leaf in _leaves(f"{prefix}.{key}", inner)]
    return [(prefix, value)]


def _tier(provenance: dict[str, str], path: str) -> str:
    """The tier a dotted key came from: its own entry, else its nearest ancestor's, else the engine."""
    while path:
        if path in provenance:
            return provenance[path]
        path = path.rpartition(".")[0]
    return "engine"


def terms_table(entity: Entity) -> list[dict[str, Any]]:
    """Every resolved evaluation and loop key (metrics apart) with its value and the tier it came from."""
    rows = []
    for block in ("evaluation", "loop"):
        for key, value in (entity.terms.get(block) or {}).items():
            if block == "evaluation" and key == "metrics":
                continue
            for path, leaf in _leaves(f"{block}.{key}", value):
                shown = leaf if isinstance(leaf, str) else json.dumps(leaf, ensure_ascii=False)
                shown = "not set" if leaf is None else shown  # a person reads words, never a JSON null
                rows.append({"key": path, "value": shown, "tier": _tier(entity.provenance or {}, path)})
    return rows


def metric_rows(entity: Entity) -> list[dict[str, Any]]:
    """The resolved metrics, one row each, with their tier."""
    rows = []
    for metric_id, spec in ((entity.terms.get("evaluation") or {}).get("metrics") or {}).items():
        scale = spec.get("scale")
        if scale is None and spec.get("kind") in ("judged", "reported") and human_metrics(entity).get(metric_id):
            scale = scale_of(spec)
        rows.append(
            {
                "id": metric_id,
                "spec": spec,
                "scale": f"{scale['min']}..{scale['max']}" + (f" step {scale['step']}" if scale.get("step") else "")
                if scale
                else "",
                "target": show_metric(spec, spec.get("target")) if spec.get("target") is not None else "",
                "floor": show_metric(spec, spec.get("floor")) if spec.get("floor") is not None else "",
                "tier": _tier(entity.provenance or {}, f"evaluation.metrics.{metric_id}"),
            }
        )
    return rows


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
    people = people_values(execution_id for execution_id, *_ in grades) if humans else {}
    starts = [started for _, _, started, _ in grades]
    vlines = _change_lines(entity, starts)
    # What each run's hover says before its value, and people's numbers, once a run (not once a metric).
    runs = [
        (number, vector or {}, people.get(str(execution_id), {}), _run_words(execution_id, started, commit))
        for number, (execution_id, vector, started, commit) in enumerate(grades, start=1)
    ]
    plots = []
    for metric_id, spec in specs.items():
        y_format = _y_format(spec)
        judged, rated, judged_titles, rated_titles = [], [], [], []
        for number, vector, rated_by, words in runs:
            value = _decimal(vector.get(metric_id))
            if value is not None:
                judged.append((number, value))
                judged_titles.append(f"{words}: {y_format(value)}")
            median = _decimal(rated_by.get(metric_id))
            if median is not None:
                rated.append((number, median))
                rated_titles.append(f"{words}: people {y_format(median)}")
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


class RecentRun(NamedTuple):
    """What the recent runs table shows of a run and its grade (the grade's four None when it has none)."""

    id: uuid.UUID
    status: str
    source: str
    sampling: str
    cost_usd: Decimal | None
    completed_at: datetime | None
    grade_status: str | None
    grade_passed: bool | None
    grade_score: float | None
    grade_error: str | None


def recent_runs(entity: Entity) -> list[RecentRun]:
    """The entity's newest runs with their grades: the columns the table shows, as tuples (no model row)."""
    newest = entity.executions.order_by("-started_at").values_list(
        "id",
        "status",
        "source",
        "sampling",
        "cost_usd",
        "completed_at",
        "grade__status",
        "grade__passed",
        "grade__score",
        "grade__error",
    )
    return [RecentRun(*row) for row in newest[:RECENT_RUNS]]


def grade_badge_html(run: RecentRun) -> str:
    """A run's grade as ``grading/partials/grade_badge.html`` renders it (escaped alike)."""
    if run.grade_status is None:
        return '<span class="muted">not booked</span>'
    if run.grade_status == "graded":
        if run.grade_passed is True:
            badge = '<span class="badge ok">passed</span>'
        elif run.grade_passed is False:
            badge = '<span class="badge failed">failed</span>'
        else:
            badge = '<span class="badge">graded</span>'
        if run.grade_score is not None:
            badge += f' <span class="muted">{conditional_escape(floatformat(run.grade_score, 2))}</span>'
        return badge
    if run.grade_status == "failed":
        return f'<span class="badge failed" title="{conditional_escape(run.grade_error)}">grading failed</span>'
    return f'<span class="badge warning">{conditional_escape(run.grade_status)}</span>'


def recent_rows_html(runs: list[RecentRun]) -> str:
    """The recent runs table's rows, as its template's loop rendered them from the runs' models (a row's cells
    built here, not a template lookup and filter a cell: ~0.2 ms a row that way)."""
    if not runs:
        return ""
    sample = runs[0].id
    run_url = reverse("grading:run", args=[sample]).replace(str(sample), "{}")
    sources = {value: str(label) for value, label in Execution.Source.choices}
    samplings = {value: str(label) for value, label in Execution.Sampling.choices}
    esc = conditional_escape
    rows = []
    for run in runs:
        ended = template_localtime(run.completed_at)
        when = (
            f'<time datetime="{ended.isoformat()}" title="{esc(localize(ended))}">'
            f"{esc(naturaltime(run.completed_at))}</time>"
            if run.completed_at
            else "running"
        )
        rows.append(
            "\n    <tr>\n"
            f'      <td><a href="{esc(run_url.format(run.id))}"><code>{esc(str(run.id)[:8])}</code></a></td>\n'
            f"      <td>{status_badge(run.status)}</td>\n"
            f"      <td>{esc(sources.get(run.source, run.source))}</td>\n"
            f"      <td>{esc(samplings.get(run.sampling, run.sampling))}</td>\n"
            f"      <td>{grade_badge_html(run)}\n</td>\n"  # the partial's file ends with a newline
            f'      <td class="num" title="{esc(money_exact(run.cost_usd))}">{esc(money(run.cost_usd))}</td>\n'
            f"      <td>{when}</td>\n"
            "    </tr>\n  "
        )
    return mark_safe("".join(rows))


def _calibration_context(entity: Entity) -> dict[str, Any]:
    return {"entity": entity, "calibration": calibration(entity)}


# --- Pages ---------------------------------------------------------------------------------------


@login_required
def entity_list(request: HttpRequest) -> HttpResponse:
    """Every entity, a page at a time (by kind and id): its state, grading and loop, runs and newest grade."""
    page = Paginator(Entity.objects.order_by("kind", "slug").values_list("pk", flat=True), ENTITIES_PER_PAGE)
    shown = page.get_page(request.GET.get("page"))
    entities = list(entities_for_list(list(shown.object_list)))
    for entity in entities:
        entity.runs_label = runs_label(entity.runs)  # type: ignore[attr-defined]
    return render(request, "grading/entity_list.html", {"entities": entities, "page": shown})


@login_required
def entity_detail(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    entity = _get_entity(target_kind, slug)
    runs = recent_runs(entity)
    plots, plot_span = metric_plots(entity)
    context = {
        "entity": entity,
        "terms": terms_table(entity),
        "metrics": metric_rows(entity),
        "plots": plots,
        "plot_span": plot_span,
        "window": WINDOW,
        "calibration": calibration(entity),
        "runs": runs,
        "run_rows": recent_rows_html(runs),
        "runnable": entity.kind in (Entity.Kind.WORKFLOW, Entity.Kind.PIPELINE) and entity.ok,
        "run_refusal": entity.run_refusal(),
        "run_input": request.session.pop("run_input", "{}"),
    }
    return render(request, "grading/entity_detail.html", context)


def parse_run_input(text: str) -> dict[str, Any]:
    """Return the run's input from the form's JSON text: an object; ConfigError naming the field otherwise."""
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"input: expected a JSON object, got {type(data).__name__}")
    return data


@login_required
@require_POST
def entity_run(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Start a run of a workflow or pipeline on the workers; the run appears on the page once it starts."""
    entity = _get_entity(target_kind, slug)
    if entity.kind not in (Entity.Kind.WORKFLOW, Entity.Kind.PIPELINE) or not entity.ok:
        messages.error(
            request, f"{entity} cannot be run from here (a {entity.kind}{', broken' if not entity.ok else ''})."
        )
        return redirect(entity)
    if entity.run_refusal():
        messages.error(request, entity.run_refusal())
        return redirect(entity)
    try:
        data = parse_run_input(request.POST.get("input", ""))
    except ConfigError as exc:
        request.session["run_input"] = request.POST.get("input", "")
        messages.error(request, str(exc))
        return redirect(entity)
    from grading.tasks.runs import run_entity_task

    user_id = request.user.pk
    transaction.on_commit(
        lambda: run_entity_task.delay(entity.pk, input=data, source=Execution.Source.MANUAL.value, user_id=user_id)
    )
    messages.success(request, f"Started a run of {entity.name or entity.slug} on the workers.")
    return redirect(entity)


def criteria_rows(grade: Grade | None) -> list[dict[str, Any]]:
    return list(grade.criteria or []) if grade else []


def metric_vector(execution: Execution, grade: Grade | None) -> list[dict[str, Any]]:
    """Each metric of the run: the judge's (or computed) value in its unit, people's median and their ratings."""
    specs = (execution.entity.terms.get("evaluation") or {}).get("metrics") or {}
    vector = dict(grade.metrics or {}) if grade else {}
    ratings: dict[str, list[Rating]] = {}
    for rating in Rating.objects.filter(execution=execution).select_related("user").order_by("metric_id", "user_id"):
        ratings.setdefault(rating.metric_id, []).append(rating)
    people = people_values([execution.pk]).get(str(execution.pk), {})
    rows = []
    for metric_id in list(specs) + [m for m in vector if m not in specs]:
        spec = specs.get(metric_id) or {}
        given = ratings.get(metric_id, [])
        rows.append(
            {
                "id": metric_id,
                "spec": spec,
                "judge": show_metric(spec, vector.get(metric_id)),
                "people": rated_on_scale(spec, people.get(metric_id)) if metric_id in people else "",
                "ratings": [{"user": r.user.get_username(), "value": _plain(r.value), "note": r.note} for r in given],
            }
        )
    return rows


@login_required
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    execution = _get_run(run_id)
    grade = _grade_of(execution)
    context = {
        "run": execution,
        "entity": execution.entity,
        "grade": grade,
        "criteria": criteria_rows(grade),
        "vector": metric_vector(execution, grade),
        "input_json": json.dumps(execution.input, indent=2, ensure_ascii=False),
        "output_json": json.dumps(execution.output, indent=2, ensure_ascii=False),
        "trace": execution.trace or [],
        "awaiting_rating_until": waiting_until(execution),
        "rating_card": Card.objects.filter(key=card_key(execution.pk)).first(),
        "compare": compare_with(execution, request.GET.get("compare", "")),
    }
    return render(request, "grading/run_detail.html", context)


def _side(execution: Execution) -> dict[str, Any]:
    grade = _grade_of(execution)
    return {
        "run": execution,
        "grade": grade,
        "vector": metric_vector(execution, grade),
        "input_json": json.dumps(execution.input, indent=2, ensure_ascii=False),
        "output_json": json.dumps(execution.output, indent=2, ensure_ascii=False),
    }


def compare_with(execution: Execution, other_id: str) -> dict[str, Any] | None:
    """``?compare=<run>``: this run beside another run of the same entity (a check's pair), or the reason it cannot be."""
    if not other_id:
        return None
    try:
        other = Execution.objects.select_related("entity").get(pk=uuid.UUID(other_id), entity_id=execution.entity_id)
    except (ValueError, Execution.DoesNotExist):
        return {"error": f"compare: {other_id[:40]!r} is not a run of {execution.entity.name or execution.entity.slug}"}
    return {"sides": [_side(other), _side(execution)]}


@login_required
@require_POST
def run_grade(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Grade a run now (eval_start): books it when unbooked, pulls a delayed booking forward."""
    from grading.booking import eval_start

    execution = _get_run(run_id)
    try:
        grade = eval_start(execution)
    except (StateError, ConfigError) as exc:
        messages.error(request, str(exc))
    else:
        if grade.status == Grade.Status.FAILED:
            messages.error(request, f"Grading failed: {grade.error}")
        else:
            messages.success(request, f"Grade: {grade.get_status_display()}.")
    return redirect(execution)


# --- Rate runs -----------------------------------------------------------------------------------


@dataclass
class RateCell:
    """One human-rated metric of one run on Rate runs: the judge's, people's and the viewer's own numbers."""

    metric_id: str
    spec: dict[str, Any]
    judge: str
    people: str
    people_count: int
    mine: Rating | None
    choices: list[tuple[str, str]]
    scale: dict[str, Any]
    key: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def mine_value(self) -> str:
        return _plain(self.mine.value) if self.mine else ""

    @property
    def buttons(self) -> list[tuple[str, str, bool]]:
        """(value, label, whether it is the viewer's own rating) per step of ``choices``."""
        mine = self.mine_value
        return [(value, label, value == mine) for value, label in self.choices]

    @property
    def buttons_html(self) -> str:
        """``buttons`` as the row's submit buttons (built here: a template loop costs more than the row's rest)."""
        return format_html_join(
            "",
            '<button type="submit" name="value" value="{}" class="{}" aria-pressed="{}">{}</button>',
            ((v, "chosen" if on else "secondary", "true" if on else "false", label) for v, label, on in self.buttons),
        )

    @property
    def range(self) -> str:
        """``<kind> · <min>..<max>``, as the template would render the three (localized)."""
        return f"{self.spec.get('kind', '')} · {localize(self.scale.get('min', ''))}..{localize(self.scale.get('max', ''))}"


@dataclass
class RateRow:
    """One run on Rate runs; ``graded`` is False for a run with no judge's numbers (e.g. the sampler passed it by)."""

    run: Execution
    cells: list[RateCell]
    graded: bool
    answer: dict[str, Any] | None = None
    #: What the row's header shows of the run, as the template would render it (``rate_rows``).
    head: dict[str, str] = field(default_factory=dict)


def scale_choices(scale: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (value, label) per step when the scale has at most ``MAX_BUTTONS`` steps, else [] (a number input)."""
    step = _decimal(scale.get("step"))
    low, high = _decimal(scale["min"]), _decimal(scale["max"])
    if not step or low is None or high is None or (high - low) / step + 1 > MAX_BUTTONS:
        return []
    choices, value = [], low
    while value <= high:
        words = scale_label(scale, value)
        choices.append((_plain(value), f"{_plain(value)} · {words}" if words else _plain(value)))
        value += step
    return choices


def rateable_entities(entity: Entity | None = None) -> list[Entity]:
    """Entities with at least one human-rated metric and grading on, with what Rate runs reads of them
    (``RATE_READ``) and their terms (``rateable`` and then their terms: one more statement); any other field
    is read when asked for."""
    return with_terms(rateable(entity))


#: What Rate runs reads of an entity besides its terms (and only of the page's): the filters' links, a row's
#: header (a link and a name). The fleet's rateable ones are read with these alone.
RATE_READ = ("kind", "target_kind", "slug", "name")


def rateable(entity: Entity | None = None) -> list[Entity]:
    """The entities ``rateable_entities`` answers, by kind and id, without their terms (a fleet's resolved terms
    are kilobytes an entity; Rate runs reads them for the entities on its page only, ``with_terms``).

    On Postgres one statement on the ``rateable`` column the database keeps from the terms (``RATED_PATH``),
    so no entity's terms are read, not even in the database. Elsewhere two: every entity's
    ``evaluation.metrics`` block alone, then the rateable ones.
    """
    entities = Entity.objects.filter(evaluation_enabled=True, load_error="")
    if entity is not None:
        entities = entities.filter(pk=entity.pk)
    if connection.vendor == "postgresql":
        return list(entities.filter(rateable=True).only(*RATE_READ).order_by("kind", "slug"))
    blocks = entities.values_list("pk", "terms__evaluation__metrics")
    wanted = [pk for pk, metrics in blocks if isinstance(metrics, dict) and any(map(_rated_spec, metrics.values()))]
    if not wanted:
        return []
    return list(entities.filter(pk__in=wanted).only(*RATE_READ).order_by("kind", "slug"))


def _rated_spec(spec: Any) -> bool:
    """``human_rated`` of one spec of a metrics block; a spec that is not an object is no metric (as in SQL)."""
    return isinstance(spec, dict) and human_rated(spec)


def with_terms(entities: list[Entity]) -> list[Entity]:
    """``entities`` (read without their terms) with their terms, read in one statement (none for none)."""
    if entities:
        terms = dict(Entity.objects.filter(pk__in=[e.pk for e in entities]).values_list("pk", "terms"))
        for e in entities:
            e.terms = terms[e.pk]
    return entities


def rate_rows(user: Any, runs: list[Execution]) -> list[RateRow]:
    """Build the Rate runs rows for ``runs``: two queries (people's medians, the viewer's own ratings)."""
    ids = [run.pk for run in runs]
    people = people_values(ids)
    counts: dict[tuple[str, str], int] = {}
    for execution_id, metric_id, n in (
        Rating.objects.filter(execution_id__in=ids)
        .values("execution_id", "metric_id")
        .annotate(n=Count("id"))
        .values_list("execution_id", "metric_id", "n")
    ):
        counts[(str(execution_id), metric_id)] = n
    mine = {(str(r.execution_id), r.metric_id): r for r in Rating.objects.filter(execution_id__in=ids, user=user)}
    rows = []
    rate_url = reverse("grading:rate")
    entity_urls: dict[int, str] = {}
    for run in runs:
        entity = run.entity
        if entity.pk not in entity_urls:
            entity_urls[entity.pk] = entity.get_absolute_url()
        ended = template_localtime(run.completed_at)
        head = {
            "entity_url": entity_urls[entity.pk],
            "entity_label": entity.name or entity.slug,
            "run_url": run.get_absolute_url(),
            "short_id": str(run.id)[:8],
            "ended_iso": date_format(ended, "c") if ended else "",
            "ended_title": str(localize(ended)),
            "rate_url": rate_url,
        }
        grade = getattr(run, "grade", None) if _has_grade(run) else None
        vector = (grade.metrics or {}) if grade and grade.status == Grade.Status.GRADED else {}
        cells = []
        for metric_id, spec in human_metrics(run.entity).items():
            scale = scale_of(spec)
            judge = rated_on_scale(spec, vector.get(metric_id)) if spec.get("kind") == "judged" else ""
            median = people.get(str(run.pk), {}).get(metric_id)
            cells.append(
                RateCell(
                    metric_id=metric_id,
                    spec=spec,
                    judge=judge,
                    people=rated_on_scale(spec, median),
                    people_count=counts.get((str(run.pk), metric_id), 0),
                    mine=mine.get((str(run.pk), metric_id)),
                    choices=scale_choices(scale),
                    scale=scale,
                )
            )
        rows.append(RateRow(run=run, cells=cells, graded=bool(vector), head=head))
    return rows


def _has_grade(run: Execution) -> bool:
    """True when the run has a Grade row (read through select_related, so no query)."""
    return hasattr(run, "grade")


#: What a Rate runs row never shows of a run (its JSON and text): left unread.
RUN_UNSHOWN = ("input", "output", "error", "trace")
#: ... and of its grade (a row reads its status and metrics).
GRADE_UNSHOWN = ("criteria", "feedback", "judge", "error")
#: Up to this many entities, Rate runs reads each one's runs through its own index (a rare entity's are few).
FEW_ENTITIES = 20


def rate_runs_for(entities: list[Entity], *, before: tuple[datetime, uuid.UUID] | None = None) -> list[Execution]:
    """The newest terminal runs (never loop replays) of ``entities``, older than ``before`` when given.

    One query: ``RATE_RUNS + 1`` runs with their grade, newest first (the extra one says whether an older page
    exists), walked from the newest through ``grading_execution_newest``. Each run's entity is the one of
    ``entities`` (already read: not read again a run), and what no row shows of a run — its input, output,
    error and trace — is left unread.
    """
    runs = Execution.objects.filter(loop_launched=False, completed_at__isnull=False).exclude(
        status=Execution.Status.RUNNING
    )
    if len(entities) > FEW_ENTITIES:
        # Many entities: walk the newest runs (``execution_newest``) and keep theirs. ``entity_id + 0`` keeps a
        # planner (SQLite's) from reading every run of the entities through their own index and sorting them.
        runs = runs.alias(entity_plus=F("entity_id") + 0).filter(entity_plus__in=[e.pk for e in entities])
    else:
        runs = runs.filter(entity__in=entities)
    if before is not None:
        at, run_id = before
        runs = runs.filter(Q(completed_at__lt=at) | Q(completed_at=at, id__lt=run_id))
    by_id = {e.pk: e for e in entities}
    read = list(
        runs.select_related("grade")
        .defer(*RUN_UNSHOWN, *(f"grade__{name}" for name in GRADE_UNSHOWN))
        .order_by("-completed_at", "-id")[: RATE_RUNS + 1]
    )
    for run in read:
        run.entity = by_id[run.entity_id]
    return read


def _entity_filter(request: HttpRequest) -> Entity | None:
    wanted = request.GET.get("entity") or request.POST.get("entity_filter") or ""
    target_kind, _, slug = wanted.partition(":")
    return Entity.objects.filter(target_kind=target_kind, slug=slug).first() if slug else None


def rate_cursor(run: Execution) -> str:
    """The ``before`` of the page after ``run``: its completion instant and id."""
    return f"{run.completed_at.isoformat()}~{run.pk}"


def parse_rate_cursor(text: str) -> tuple[datetime, uuid.UUID]:
    """``before`` read back; ValueError naming what is wrong."""
    at_text, _, id_text = text.partition("~")
    try:
        at = datetime.fromisoformat(at_text)
        run_id = uuid.UUID(id_text)
    except ValueError:
        raise ValueError(f"before: {text!r} is not a page of Rate runs (an instant and a run id)") from None
    if at.tzinfo is None:
        raise ValueError(f"before: {text!r} has no time zone")
    return at, run_id


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    """Finding runs: the runs the URL's filter selects, a page at a time; a bad filter is a 400 saying which."""
    try:
        wanted = parse_filter(request.GET)
    except SearchError as exc:
        context = {"problem": str(exc), "runs": [], "entities": Entity.objects.order_by("kind", "slug")}
        return render(request, "grading/runs.html", {**context, "grades": GRADES, "params": request.GET}, status=400)
    runs, older = page_of(wanted)
    keep = request.GET.copy()
    keep.pop("before", None)
    context = {
        "runs": runs,
        "older": older,
        "wanted": wanted,
        "params": request.GET,
        "kept": keep.urlencode(),
        "grades": GRADES,
        "entities": Entity.objects.order_by("kind", "slug"),
    }
    return render(request, "grading/runs.html", context)


@login_required
def run_compare(request: HttpRequest) -> HttpResponse:
    """The runs list's "Compare the two": the first ticked run's page beside the second, or back saying why not."""
    picked = request.GET.getlist("run")
    back = reverse("grading:runs")
    kept = QueryDict(request.GET.get("back", "")).urlencode()
    back += f"?{kept}" if kept else ""
    if len(picked) != 2:
        messages.error(request, f"Pick exactly two runs to compare (you picked {len(picked)}).")
        return redirect(back)
    ids = [_uuid(value) for value in picked]
    runs = {run.pk: run for run in Execution.objects.filter(pk__in=[pk for pk in ids if pk])}
    if len(runs) != 2 or len({run.entity_id for run in runs.values()}) != 1:
        messages.error(request, "Pick two runs of the same entity to compare them.")
        return redirect(back)
    first, second = (runs[pk] for pk in ids)  # type: ignore[index]
    return redirect(f"{first.get_absolute_url()}?compare={second.pk}")


#: The attributes of the entity filter's link that is the page's.
ACTIVE = mark_safe('class="active" aria-current="true"')


@login_required
@require_http_methods(["GET", "POST"])
def rate_runs(request: HttpRequest) -> HttpResponse:
    """Rate runs: the newest runs with the judge and people side by side, and the viewer's own rating.

    A page of ``RATE_RUNS`` runs (``?before=`` pages back) and the calibration of the entities on it, in a
    fixed number of queries whatever the fleet or its history holds.
    """
    if request.method == "POST":
        return _rate_post(request)
    try:
        before = parse_rate_cursor(request.GET["before"]) if request.GET.get("before") else None
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    every = rateable()  # their terms are read for the entities on the page only
    chosen = _entity_filter(request)
    entities = [e for e in every if chosen is not None and e.pk == chosen.pk] if chosen else every
    runs = rate_runs_for(entities, before=before)
    older = rate_cursor(runs[RATE_RUNS - 1]) if len(runs) > RATE_RUNS else ""
    runs = runs[:RATE_RUNS]
    shown = {run.entity_id: run.entity for run in runs}
    if chosen is not None and entities:
        shown.setdefault(chosen.pk, entities[0])
    with_terms(list(shown.values()))  # the rows' metrics and the calibrations read them
    calibrations = calibration_many(list(shown.values()))
    nav = [(f"{e.target_kind}:{e.slug}", e.name or e.slug, chosen is not None and chosen.pk == e.pk) for e in every]
    context = {
        "rows": rate_rows(request.user, runs),
        "calibrations": [
            {"entity": e, "calibration": calibrations[e.pk], "url": e.get_absolute_url(), "label": e.name or e.slug}
            for e in sorted(shown.values(), key=lambda e: (e.kind, e.slug))
            if calibrations.get(e.pk)
        ],
        "entities": every,
        # The filters' links, one an entity (built here: a template's lookups cost more than the rows).
        "nav": nav,
        "nav_html": format_html_join(
            "", '<a href="?entity={}" {}>{}</a>', ((key, ACTIVE if on else "", label) for key, label, on in nav)
        ),
        "chosen": chosen,
        "chosen_key": f"{chosen.target_kind}:{chosen.slug}" if chosen else "",
        "older": older,
        "paged": before is not None,
    }
    return render(request, "grading/rate.html", context)


def _rate_post(request: HttpRequest) -> HttpResponse:
    """One metric of one run rated through the one door; HTMX gets the run's row back, a browser a redirect."""
    post = request.POST
    answer = rate(
        actor_user=request.user,
        is_agent=False,
        run_kind=post.get("run_kind", ""),
        run_id=post.get("run_id", ""),
        idempotency_key=post.get("idempotency_key", ""),
        ratings=[
            {"metric_id": post.get("metric_id", ""), "value": post.get("value", ""), "note": post.get("note", "")}
        ],
    )
    status = {"ok": 200, "not_found": 404, "precondition": 409, "invalid": 400, "refused": 403}[answer.code]
    if not request.htmx:
        (messages.success if answer.ok else messages.error)(request, _said(answer.as_dict()))
        back = reverse("grading:rate")
        if post.get("entity_filter"):
            back += f"?entity={post['entity_filter']}"
        return redirect(f"{back}#run-{post.get('run_id', '')}")
    run = Execution.objects.select_related("entity", "grade").filter(pk=_uuid(post.get("run_id"))).first()
    if run is None:
        return HttpResponse(_said(answer.as_dict()), status=status)
    (row,) = rate_rows(request.user, [run])
    row.answer = answer.as_dict()
    context = {"row": row, "oob": _calibration_context(run.entity), "entity_filter": post.get("entity_filter", "")}
    # An answer the page shows in place: HTMX swaps 2xx only, so a refusal is still 200 with its code in the row.
    response = render(request, "grading/partials/rate_row.html", context)
    response["X-Rate-Code"] = answer.code
    return response


def _said(answer: dict[str, Any]) -> str:
    return "Saved." if answer["ok"] else f"Not saved ({answer['code']}): {answer['detail']}"


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
