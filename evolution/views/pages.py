"""The loop's pages under ``/evolution/``: the fleet, an entity's cycles and lessons, a cycle's story.

Every page reads ``evolution.status`` (the same functions the REST API
answers from). The fleet's table refreshes itself with HTMX; the entity
page loads its Cycles and Lessons section as a fragment; "Analyze now"
goes through the one door (``evolution.trigger.analyze_now``). Every form
works without JavaScript (a POST, then a redirect back).
"""

from __future__ import annotations

import html
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from evolution.core import pull_checks
from evolution.core.diffs import file_diffs
from evolution.models import Cycle, Lesson
from evolution.reads import fleet as fleet_reads
from evolution.reads import history, status, story
from evolution.reads.evidence import attach_pair_views
from evolution.steering import groups
from evolution.views.checkchart import movement_strip
from evolution.views.spend import spend_context
from evolution.views.watchchart import draw_windows
from grading.metrics import aggregate, specs
from grading.models import Entity
from singularity.plots import HLine, Series, line_chart

#: A state → the badge colour the stylesheet already has.
STATE_BADGE = {
    "idle": "",
    "off": "stopped",
    "window": "",
    "analysing": "running",
    "waiting_on_you": "warning",
    "applying": "running",
    "checking": "running",
    "pr_open": "warning",
    "watching": "running",
    "reverting": "failed",
    "paused": "stopped",
}
STATUS_BADGE = {"validated": "ok", "regressed": "failed", "failed": "failed", "unvalidated": "warning"}
ENTITY_CYCLES = 20
ENTITY_LESSONS = 20
#: What the Lessons section shows of a lesson: its cycle and round (number, who decided), what came of it, its
#: tally and a person's no; neither the cycle nor the round is read whole with it.
LESSON_FIELDS = (
    "id",
    "cycle",
    "round",
    "round__number",
    "round__decided_by",
    "outcome",
    "summary",
    "hypothesis",
    "rejection",
    "note",
    "helpful",
    "harmful",
)


def _badged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in rows:
        row["badge"] = STATE_BADGE.get(row["state"], "")
    return rows


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


# --- The fleet ------------------------------------------------------------------


def _page_number(text: str | None) -> int:
    """A page number from the query string: 1 for anything that is not a positive whole number."""
    return int(text) if text and text.isdigit() and int(text) > 0 else 1


def escaped(value: Any) -> str:
    """``value`` escaped as a template variable (and ``format_html``) escapes it: safe text as it is, anything
    else through ``html.escape`` (``django.utils.html.escape``), without their per-call wrappers."""
    if hasattr(value, "__html__"):
        return value.__html__()
    return html.escape(str(value))


def fleet_rows_html(rows: list[dict[str, Any]]) -> SafeString:
    """The fleet table's rows (``_badged`` rows of ``fleet_page``) as one piece of HTML: what the template's loop
    over them rendered, each value escaped as the template escaped it (``escaped``), built here without a template
    lookup, a filter or a ``format_html`` a value (a page's fifty rows cost their template more than their read).
    A cycle's link is reversed once a page (its id is an ``int`` converter's: ``str(id)`` in the path).
    """
    prefix, _, suffix = reverse("evolution:cycle", args=[987654321]).partition("987654321")
    cycle_url = (escaped(prefix), escaped(suffix))
    parts = []
    for row in rows:
        kind, slug = escaped(row["targetKind"]), escaped(row["targetId"])
        parts.append(
            f'\n      <tr id="entity-{kind}-{slug}" data-state="{escaped(row["state"])}">'
            f'\n        <td><a href="{escaped(row["entity"].get_absolute_url())}">{escaped(row["name"])}</a>'
            f'<div class="muted small"><code>{kind}:{slug}</code></div></td>'
            f'\n        <td><span class="badge {escaped(row["badge"])}">{escaped(row["stateLabel"])}</span></td>'
            f'\n        <td class="small">{escaped(row["next"])}</td>'
            f'\n        <td class="small">{_in_flight_html(row["inFlight"])}</td>'
            f'\n        <td class="small month-spend">{_month_html(row["month"])}</td>'
            f'\n        <td class="small">{_needs_html(row["needsYou"], cycle_url)}</td>'
            "\n      </tr>\n    "
        )
    return mark_safe("".join(parts))  # noqa: S308 - every value escaped (``escaped``)


def _in_flight_html(cycles: list[dict[str, Any]]) -> str:
    from evolution.core.outcomes import phase_words
    from singularity.templatetags.singularity_tags import local

    if not cycles:
        return '<span class="muted">none</span>'
    parts = []
    for c in cycles:
        rnd = f" · r{escaped(c['round'])}" if c["round"] else ""
        pr = f' · <a href="{escaped(local(c["pr"]["url"]))}">PR #{escaped(c["pr"]["number"])}</a>' if c["pr"] else ""
        parts.append(
            f'<div><a href="{escaped(local(c["url"]))}">cycle {escaped(c["id"])}</a>{rnd} · {escaped(phase_words(c["phase"]))}{pr}</div>'
        )
    return "".join(parts)


def _month_html(m: dict[str, Any]) -> str:
    from django.template.defaultfilters import pluralize

    from singularity.templatetags.singularity_tags import usd

    ceiling = f' <span class="muted">of {escaped(usd(m["ceiling_usd"]))}</span>' if m["ceiling_usd"] is not None else ""
    if m["cycles"]:
        moved = (
            f'<div class="muted">{escaped(m["validated"])} kept · {escaped(m["regressed"])} regressed · {escaped(m["cycles"])} '
            f"cycle{escaped(pluralize(m['cycles']))}</div>"
        )
    else:
        moved = '<div class="muted">no cycle</div>'
    return f"<div>{escaped(usd(m['spent_usd']))}{ceiling}</div>{moved}"


def _needs_html(items: list[dict[str, Any]], cycle_url: tuple[str, str]) -> str:
    from django.template.defaultfilters import truncatechars

    from singularity.templatetags.singularity_tags import local

    parts = []
    for item in items:
        if item["cycleId"]:
            rnd = f" · r{escaped(item['round'])}" if item["round"] else ""
            href = f"{cycle_url[0]}{escaped(item['cycleId'])}{cycle_url[1]}"
            tail = f' · <a href="{href}">cycle {escaped(item["cycleId"])}{rnd}</a>'
        elif item["clause"]:
            tail = f" · {escaped(truncatechars(item['clause'], 80))}"
        else:
            tail = ""
        parts.append(f'<div><a href="{escaped(local(item["url"]))}">{escaped(item["gate"])}</a>{tail}</div>')
    return "".join(parts)


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """A page of the entities in the loop, what needs a person first, with a search box (HTMX: the table alone)."""
    query = request.GET.get("q", "").strip()[:100]
    page = fleet_reads.fleet_page(query=query, page=_page_number(request.GET.get("page")))
    rows = _badged(page.rows)
    context = {"rows": rows, "rows_html": fleet_rows_html(rows), "need_you": page.need_you, "page": page, "q": query}
    template = "evolution/partials/fleet_table.html" if request.htmx else "evolution/fleet.html"
    return render(request, template, context)


# --- An entity's cycles and lessons -----------------------------------------------


def entity_cycles_context(entity: Entity) -> dict[str, Any]:
    """What the entity page's Cycles and Lessons section shows: the loop's state, newest cycles, lessons."""
    (row,) = fleet_reads.loop_status(entity)["entities"]
    # What Analyze now would be refused for, from what the loop's row read already: the breaker's pause is its
    # rearm wait (a gone entity's is read again), and a row not "paused" stands under neither a hold nor the
    # breaker (its pause is the hold's, the breaker's or the month's); a paused one's hold is read.
    rearm = next((item["clause"] for item in row["needsYou"] if item["gate"] == "rearm"), "")
    held = None if row["state"] == "paused" or not entity.present else ""
    lessons = list(
        Lesson.objects.filter(entity=entity)
        .select_related("round")
        .only(*LESSON_FIELDS)
        .order_by("-created_at", "-id")[:ENTITY_LESSONS]
    )
    return {
        "entity": entity,
        "row": _badged([row])[0],
        "cycles": history.recent_cycles(entity, limit=ENTITY_CYCLES),
        "lessons": lessons,
        "ended": status.ENDED,
        "groups": groups.overview(entity),
        "cannot_analyze": cannot_analyze(entity, paused=rearm if entity.present else None, held=held),
        "spend": spend_context(entity),
        "pull_checks": pull_checks.of_entity(entity),
    }


def cannot_analyze(entity: Entity, *, paused: str | None = None, held: str | None = None) -> str:
    """Why Analyze now would open nothing that a person can see before pressing it: a hold or the breaker's
    pause, or the loop switched off; "" when it may open one (the one door still answers for the rest).

    ``paused`` and ``held`` are the breaker's pause and the hold when the caller has read them ("" for none;
    None reads it here)."""
    from evolution.steering import autonomy, supervision

    if not entity.loop_enabled:
        return "the loop is switched off for this entity"
    if held is None:
        held = supervision.hold_refusal(entity)
    if held:
        return f"{held.rstrip('.')} — release it under Supervision first"
    if paused is None:
        paused = autonomy.paused(entity)
    if paused:
        return f"{paused.rstrip('.')} — re-arm it under Supervision first"
    return ""


@login_required
def entity_cycles(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """The entity's Cycles and Lessons: the fragment the entity page loads, or a page of its own."""
    entity = _get_entity(target_kind, slug)
    template = "evolution/_entity_cycles.html" if request.htmx else "evolution/entity_cycles.html"
    return render(request, template, entity_cycles_context(entity))


@login_required
@require_POST
def entity_analyze(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """Analyze now: open a cycle on request through the one door, and say what came of it."""
    from evolution.loop.trigger import analyze_now

    entity = _get_entity(target_kind, slug)
    answer = analyze_now(entity, user=request.user)
    said = f"Cycle {answer.cycle.pk} opened." if answer.opened and answer.cycle else f"No cycle: {answer.reason}."
    if request.htmx:
        context = {**entity_cycles_context(entity), "answer": answer, "said": said}
        return render(request, "evolution/_entity_cycles.html", context)
    (messages.success if answer.opened else messages.error)(request, said)
    return redirect(entity)


# --- A cycle's story --------------------------------------------------------------


def _metric_points(runs: list[dict[str, Any]], metric_id: str, spec: dict[str, Any], start: int) -> list[tuple]:
    from evolution.loop.cardtext import on_own_scale

    points = []
    for number, run in enumerate(runs, start=start):
        value = on_own_scale(spec, run["metrics"].get(metric_id))
        if value is not None:
            points.append((number, value))
    return points


def watch_plot(cycle: Cycle, detail: dict[str, Any]) -> str:
    """The Watch chapter's plot: the watched runs against the window's baseline.

    The first objective any of those runs measured, its window median as the
    baseline line; with no objective reading, each run as bad (1) or ok (0)
    against the window's bad share.
    """
    from evolution.loop.cardtext import on_own_scale

    before, after = detail["windowRuns"], detail["watch"]["runs"]
    terms = cycle.terms or cycle.entity.terms or {}
    start = len(before) + 1
    for metric_id, spec in specs(terms).items():
        if spec.get("role") != "objective":
            continue
        window = _metric_points(before, metric_id, spec, 1)
        watched = _metric_points(after, metric_id, spec, start)
        if not window and not watched:
            continue
        hlines = []
        how = spec.get("aggregate") or "median"
        baseline = aggregate([run["metrics"].get(metric_id) for run in before], how)
        if baseline is not None:
            hlines.append(HLine(on_own_scale(spec, baseline) or 0, f"Window {how}", color="#5f6b7a"))
        series = [Series("Window", window, color="#0072B2"), Series("Watched", watched, color="#D55E00")]
        title = f"Cycle {cycle.pk}: {metric_id}, window then watched runs"
        return line_chart(series, width=640, height=240, x_label="run", y_label=metric_id, hlines=hlines, title=title)
    window = [(n, 1 if run["bad"] else 0) for n, run in enumerate(before, start=1) if run["bad"] is not None]
    watched = [(n, 1 if run["bad"] else 0) for n, run in enumerate(after, start=start) if run["bad"] is not None]
    hlines = []
    if window:
        share = Decimal(sum(y for _, y in window)) / len(window)
        hlines.append(HLine(share.quantize(Decimal("0.01")), "Window bad share", color="#5f6b7a"))
    series = [Series("Window", window, color="#0072B2"), Series("Watched", watched, color="#D55E00")]
    return line_chart(
        series,
        width=640,
        height=240,
        x_label="run",
        y_label="bad (1) / ok (0)",
        hlines=hlines,
        title=f"Cycle {cycle.pk}: bad runs, window then watched",
    )


def _open_round(request: HttpRequest, detail: dict[str, Any]) -> int | None:
    """The round shown expanded: ?proposal=<n> when it names one, else the newest."""
    wanted = request.GET.get("proposal", "")
    numbers = [r["number"] for r in detail["rounds"]]
    if wanted.isdigit() and int(wanted) in numbers:
        return int(wanted)
    return numbers[-1] if numbers else None


@login_required
def cycle_story(request: HttpRequest, pk: int) -> HttpResponse:
    """A cycle's story: the window, Hypothesize, Ship, Watch and Learn."""
    from evolution.core import outcomes as verdicts

    cycle = get_object_or_404(Cycle.objects.select_related("entity", "requested_by", "anchor", "idea"), pk=pk)
    detail = story.cycle_detail(cycle)
    rounds = {rnd.number: rnd for rnd in cycle.rounds.all()}  # as the detail read them (each knows its cycle)
    for shown in detail["rounds"]:
        rnd = rounds.get(shown["number"])
        shown["diffs"] = file_diffs(rnd) if rnd is not None and rnd.files else []
    set_aside = next((r for r in reversed(detail["rounds"]) if r["rejection"]), None)
    checks = [shown["check"] for shown in detail["rounds"] if shown.get("check")]
    for shown in checks:
        for reading in shown["perMetric"]:
            reading["chart"] = movement_strip(reading)
    attach_pair_views(checks)  # each pair's two runs, drawn as Rate runs draws a run
    draw_windows(cycle, detail["watch"]["verdict"])  # an evolve watch: both windows per metric
    context = {
        "cycle": cycle,
        "entity": cycle.entity,
        "d": detail,
        "open_round": _open_round(request, detail),
        "plot": watch_plot(cycle, detail) if cycle.watch_opened_at or detail["watch"]["runs"] else "",
        "status_words": verdicts.status_label(cycle),
        "status_badge": STATUS_BADGE.get(cycle.status, ""),
        "set_aside": set_aside,
        "idea": cycle.idea,
        "shipped": [r for r in detail["rounds"] if r["pr"] or r["gate"] or r["checkVerdict"]],
        "checks": checks,
    }
    return render(request, "evolution/cycle.html", context)


def go_cycle(request: HttpRequest, pk: int) -> HttpResponse:
    """``/evolution/go/cycle:<id>/`` → the cycle's story (keeping ?proposal=<round>)."""
    target = reverse("evolution:cycle", args=[pk])
    query = request.META.get("QUERY_STRING", "")
    return redirect(f"{target}?{query}" if query else target)
