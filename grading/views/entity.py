"""One entity's page: its resolved terms and metrics, plots, calibration, newest ratings and recent runs; starting
a run."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils.formats import localize
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.timezone import template_localtime
from django.views.decorators.http import require_POST

from grading.calibration import calibration
from grading.models import Entity, Execution, Rating
from grading.ratings import human_metrics, scale_of
from grading.trends import WINDOW
from grading.views.entity_plots import metric_plots
from grading.views.values import _plain, rated_on_scale, show_metric
from singularity.errors import ConfigError
from singularity.templatetags.singularity_tags import money, money_exact, outcome_badge, status_badge

RECENT_RUNS = 25


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


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
        if run.grade_passed is True or run.grade_passed is False:
            badge = str(outcome_badge(run.grade_passed))
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


#: The entity page lists this many of its newest ratings.
NEWEST_RATINGS = 10


@dataclass
class GivenRating:
    """One rating as the entity page lists it: who gave it, to which run and metric, the value on the metric's
    scale (with its rubric's words), the note and when."""

    who: str
    run_id: Any
    run_url: str
    metric_id: str
    value: str
    note: str
    at: datetime


def newest_ratings(entity: Entity, limit: int = NEWEST_RATINGS) -> list[GivenRating]:
    """The entity's ``limit`` newest ratings (by when they were last given or changed), one query with who gave
    them."""
    specs = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    rows = (
        Rating.objects.filter(entity=entity)
        .select_related("user")
        .only("execution_id", "metric_id", "normalized", "value", "note", "updated_at", "user__username")
        .order_by("-updated_at", "-pk")[:limit]
    )
    given = []
    for r in rows:
        spec = specs.get(r.metric_id)
        value = rated_on_scale(spec, r.normalized) if isinstance(spec, dict) else _plain(r.value)
        given.append(
            GivenRating(
                who=r.user.get_username(),
                run_id=r.execution_id,
                run_url=reverse("grading:run", args=[r.execution_id]),
                metric_id=r.metric_id,
                value=value,
                note=r.note,
                at=r.updated_at,
            )
        )
    return given


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
        "ratings": newest_ratings(entity),
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
