"""The being pages: the list with a "New being" form, the detail page, start and stop.

One view serves a full page or, for HTMX, the partial named by the request's
target. The detail page is live: its summary polls every few seconds with the
version it shows; when the being has changed since, the answer carries the
``being-changed`` client event and every other part (plots, cycles, mind,
journal) fetches itself again.
"""

from __future__ import annotations

import hashlib

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import F, OuterRef, QuerySet, Subquery, Sum, Window
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from singularity.being.actions import create_being, request_stop, start_on_workers
from singularity.display import usd_plain, usd_text
from singularity.errors import ConfigError, StateError
from singularity.forms import BeingForm
from singularity.models import Being, Event
from singularity.plots import HLine, Series, line_chart

BEINGS_PER_PAGE = 50
CYCLES_PER_PAGE = 25
JOURNAL_LINES = 50
#: The plot shows at most this many of the latest cycles.
PLOT_CYCLES = 200
PARTIALS = {
    "summary": "beings/partials/summary.html",
    "plots": "beings/partials/plots.html",
    "cycles": "beings/partials/cycles.html",
    "mind": "beings/partials/mind.html",
    "journal": "beings/partials/journal.html",
}
#: The client event that makes the detail page's parts fetch themselves again.
BEING_CHANGED = "being-changed"


def _get_being(name: str) -> Being:
    return get_object_or_404(Being.objects.select_related("parent"), name=name)


def _beings_for_list() -> QuerySet[Being]:
    """Beings with their parent and the time of their latest journal event, in one query."""
    latest = Event.objects.filter(being=OuterRef("pk")).order_by("-seq").values("created_at")[:1]
    return Being.objects.select_related("parent").annotate(last_activity=Subquery(latest)).order_by("name")


@login_required
@require_http_methods(["GET", "POST"])
def being_list(request: HttpRequest) -> HttpResponse:
    form = BeingForm(request.POST or None)
    if form.is_valid():
        data = form.cleaned_data
        try:
            being = create_being(data["name"], starting=data["starting_usd"], stimulus=data["stimulus"])
        except ConfigError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Created {being.name} with {usd_text(being.starting)}.")
            return redirect(being)
    page = Paginator(_beings_for_list(), BEINGS_PER_PAGE).get_page(request.GET.get("page"))
    status = 400 if form.is_bound else 200
    return render(request, "beings/list.html", {"page": page, "form": form}, status=status)


def _journal(being: Being, kind: str, before: str) -> dict[str, object]:
    """The newest journal events of ``being`` (newest first, optionally of one kind and before a seq) and whether older ones exist."""
    events = being.events.order_by("-seq")
    if kind:
        events = events.filter(kind=kind)
    if before.isdigit():
        events = events.filter(seq__lt=int(before))
    rows = list(events[: JOURNAL_LINES + 1])
    return {"events": rows[:JOURNAL_LINES], "more": len(rows) > JOURNAL_LINES}


def being_version(being: Being) -> str:
    """Return a short digest of everything the detail page shows, so a poll can tell whether anything changed.

    Not every change is journaled (a cycle's end, a stop, a lease), so the
    digest covers the being's budget, mind and status, its journal counter and
    its latest cycle row.
    """
    latest = being.cycles.values_list("number", "status", "rounds", "tool_calls", "balance_after").first()
    fields = (
        being.status,
        being.host,
        being.cycle,
        being.event_seq,
        being.remaining,
        being.earned,
        being.api_spent,
        being.instance_spent,
        being.model,
        being.system_prompt,
        being.rules,
        being.learnings,
        being.memories,
        being.last_error,
        latest,
    )
    return hashlib.sha256(repr(fields).encode()).hexdigest()[:16]


def _part(being: Being, part: str, request: HttpRequest, kind: str, before: str) -> dict[str, object]:
    """The context one part of the detail page needs."""
    if part == "summary":
        return {"version": being_version(being)}
    if part == "plots":
        return {"plots": budget_charts(being)}
    if part == "cycles":
        page = Paginator(being.cycles.defer("messages"), CYCLES_PER_PAGE).get_page(request.GET.get("page"))
        return {"cycles": page}
    if part == "mind":
        return {"children": list(being.children.order_by("name").values_list("name", flat=True))}
    return _journal(being, kind, before)


@login_required
def being_detail(request: HttpRequest, name: str) -> HttpResponse:
    being = _get_being(name)
    kind = request.GET.get("kind", "") if request.GET.get("kind") in Event.Kind.values else ""
    before = request.GET.get("before", "")
    context: dict[str, object] = {"being": being, "kind": kind, "kinds": Event.Kind.values, "before": before}
    target = request.htmx.target if request.htmx else None
    if target in PARTIALS:
        context.update(_part(being, target, request, kind, before))
        response = render(request, PARTIALS[target], context)
        shown = request.GET.get("version")
        if target == "summary" and shown and shown != context["version"]:
            trigger_client_event(response, BEING_CHANGED)
        return response
    for part in PARTIALS:
        context.update(_part(being, part, request, kind, before))
    return render(request, "beings/detail.html", context)


@login_required
@require_POST
def being_start(request: HttpRequest, name: str) -> HttpResponse:
    being = _get_being(name)
    try:
        start_on_workers(being, by=request.user.get_username())
    except (StateError, ConfigError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{being.name} is running on the workers.")
    return redirect(being)


@login_required
@require_POST
def being_stop(request: HttpRequest, name: str) -> HttpResponse:
    being = _get_being(name)
    try:
        request_stop(being, by=request.user.get_username())
    except (StateError, ConfigError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{being.name} is {being.status}.")
    return redirect(being)


def budget_charts(being: Being) -> list[str]:
    """Return two SVG plots over the latest cycles: the balance, and spend and earnings to date.

    Two panels because cents of spend vanish on a scale of dollars of balance.
    Each axis fits its data: the $0 "Empty" and the "Start" lines show only
    when the balance comes near them. Before the first cycle both say so. One
    query: running sums are window functions, so they stay right when the
    plots show only the latest ``PLOT_CYCLES`` cycles.
    """
    rows = list(
        being.cycles.annotate(
            spent_to_date=Window(Sum("spent"), order_by=F("number").asc()),
            earned_to_date=Window(Sum("earned"), order_by=F("number").asc()),
        )
        .order_by("-number")
        .values("number", "balance_after", "spent_to_date", "earned_to_date")[:PLOT_CYCLES]
    )[::-1]
    balance, spent, earned = [], [], []
    if rows and rows[0]["number"] <= 1:
        balance.append((0, being.starting))
        spent.append((0, 0))
        earned.append((0, 0))
    for row in rows:
        after = row["balance_after"]
        if after is None:  # the cycle in flight
            after = being.starting - row["spent_to_date"] + row["earned_to_date"]
        balance.append((row["number"], after))
        spent.append((row["number"], row["spent_to_date"]))
        earned.append((row["number"], row["earned_to_date"]))
    common = {
        "width": 560,
        "height": 260,
        "x_label": "cycle",
        "y_label": "USD",
        "y_format": usd_plain,
        "empty_text": "No cycles yet",
    }
    return [
        line_chart(
            [Series("Balance", balance, color="#0072B2")],
            hlines=[HLine(0, "Empty", fit=False), HLine(being.starting, "Start", color="#5f6b7a", fit=False)],
            title=f"{being.name}: balance by cycle",
            chart_id="balance-chart",
            **common,
        ),
        line_chart(
            [Series("Spent to date", spent, color="#D55E00"), Series("Earned to date", earned, color="#009E73")],
            title=f"{being.name}: spend and earnings to date by cycle",
            chart_id="flow-chart",
            **common,
        ),
    ]
