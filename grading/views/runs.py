"""Runs: the runs list, "Compare the two", one run's page (with ``?compare=``) and grading a run now."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from grading.cards import card_key, waiting_until
from grading.models import Entity, Execution, Grade, Rating
from grading.ratings import people_values
from grading.run_search import GRADES, SearchError, page_of, parse_filter
from grading.run_view import render_run_view, run_view
from grading.spans import page_context
from grading.views.rate_html import nav_html
from grading.views.values import _plain, _uuid, rated_on_scale, show_metric
from hitl.models import Card
from singularity.errors import ConfigError, StateError


def _get_run(run_id: uuid.UUID) -> Execution:
    return get_object_or_404(Execution.objects.select_related("entity", "started_by"), pk=run_id)


def _grade_of(execution: Execution) -> Grade | None:
    return Grade.objects.filter(execution=execution).first()


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
        **page_context(execution.trace),
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
        # The run as every place it is judged shows it: input, output, expected answer, the judge's verdicts.
        "view_html": render_run_view(run_view(execution, grade)),
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


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    """Finding runs: the runs the URL's filter selects, a page at a time; a bad filter is a 400 saying which."""
    try:
        wanted = parse_filter(request.GET)
    except SearchError as exc:
        context = {"problem": str(exc), "runs": [], "entity_options": entity_options(request.GET.get("entity", ""))}
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
        "entity_options": entity_options(request.GET.get("entity", "")),
    }
    return render(request, "grading/runs.html", context)


def entity_options(chosen: str) -> SafeString:
    """The entity filter's options, one an entity, ``chosen`` (``kind:id``) selected.

    Three columns, not whole entities: at 5,000 entities parsing each one's terms, provenance and front matter
    took seconds, and a template loop over them as long again (issue 27).
    """
    rows = Entity.objects.order_by("kind", "slug").values_list("target_kind", "slug", "name")
    return nav_html([(f"{kind}:{slug}", name or slug, f"{kind}:{slug}" == chosen) for kind, slug, name in rows])


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
