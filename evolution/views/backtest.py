"""The Backtest panel of an entity's Policy view, and the backtest a settings change shows beside its diff.

Both call ``evolution.loop.backtest.run`` — the function the API and the
command call. The panel lists the last reports, a proposed policy beside
today's; its form backtests today's policy, or one knob changed, over a
period. Reads are for any signed-in user; running one is for staff (it
keeps a report). The form works without JavaScript (a redirect back).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from evolution.loop import backtest as bt
from evolution.models import Backtest
from evolution.steering import settings as sw
from grading.models import Entity

#: The knobs whose change a backtest can show: what opens a cycle and what refuses one.
BACKTESTED = ("loop.trigger.", "loop.threshold", "loop.preset", "loop.cooldownHours", "loop.maxAnalysesPerDay")
PERIODS = [("7d", "the last 7 days"), ("30d", "the last 30 days"), ("90d", "the last 90 days")]
SHOWN = 5


def backtested(key: str) -> bool:
    return key.startswith(BACKTESTED)


def shown(report: Backtest) -> dict[str, Any]:
    """A kept report as the panel shows it: counts, refusals and spend in words."""
    result = report.result or {}
    return {
        "row": report,
        "opened": result.get("opened", 0),
        "runs": result.get("graded_runs", 0),
        "period": bt.period_words(result) if result else "",
        "refusals": bt.refusal_words(result) if result else "none",
        "spend": (result.get("spend") or {}).get("total_usd", "0.00"),
        "held_for": result.get("held_for", ""),
        "cycles": [{"at": parse_datetime(c["at"]), "anchor": c["anchor"]} for c in result.get("cycles", [])[:10]],
        "changes": [bt_change_words(c) for c in report.changes or []],
        "reproduction": result.get("reproduction"),
    }


def bt_change_words(change: dict[str, Any]) -> str:
    from evolution.steering.settings.preview import Change

    return Change(change.get("key", ""), change.get("op", sw.SET), change.get("value")).words()


def comparison(current: Backtest, proposed: Backtest | None) -> dict[str, Any]:
    """Today's report beside the proposed one (or alone), with the sentence that compares them."""
    return {
        "current": shown(current),
        "proposed": shown(proposed) if proposed else None,
        "words": bt.compare_words(current.result, proposed.result if proposed else None),
    }


def recent(entity: Entity) -> list[dict[str, Any]]:
    """The entity's last reports: each proposed one beside the today's it was run with; a lone today's alone."""
    rows = list(Backtest.objects.filter(entity=entity).select_related("compared_with")[: SHOWN * 2])
    paired = {r.compared_with_id for r in rows if r.compared_with_id}
    found = []
    for row in rows:
        if row.label == Backtest.Label.PROPOSED and row.compared_with is not None:
            found.append(comparison(row.compared_with, row))
        elif row.pk not in paired:
            found.append(comparison(row, None))
    return found[:SHOWN]


def for_preview(write: dict[str, Any], answer: sw.Answer, *, actor: str) -> dict[str, Any] | None:
    """The backtest a settings preview shows before Confirm: today's policy and the previewed one over 30 days
    (None for a knob no backtest reads, the brain tier, or a write that changes nothing)."""
    target, key = write["target"], write["key"]
    if target is None or not backtested(key) or not answer.changed or answer.terms_after is None:
        return None
    now = timezone.now()
    since = bt.parse_since("30d", now=now)
    current = Backtest.objects.create(
        entity=target,
        label=Backtest.Label.CURRENT,
        since=since,
        until=now,
        created_by=actor,
        result=bt.backtest(target, since=since, now=now),
    )
    proposed = Backtest.objects.create(
        entity=target,
        label=Backtest.Label.PROPOSED,
        changes=[{"key": key, "op": write["op"], "value": write["value"]}],
        since=since,
        until=now,
        created_by=actor,
        compared_with=current,
        result=bt.backtest(target, since=since, terms=answer.terms_after, now=now, label=Backtest.Label.PROPOSED),
    )
    return comparison(current, proposed)


def _number(key: str, raw: str) -> int | float | None:
    """The panel's knobs are numbers: empty is "not set"; SettingsRefusal(invalid) naming the key otherwise."""
    text = (raw or "").strip()
    if not text:
        return None
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise sw.SettingsRefusal(sw.INVALID, f"{key}: {text!r} is not a number") from None
    if not number.is_finite():
        raise sw.SettingsRefusal(sw.INVALID, f"{key}: {text!r} is not a number")
    return int(number) if number == number.to_integral_value() else float(number)


def _context(entity: Entity, **extra: Any) -> dict[str, Any]:
    return {"entity": entity, "reports": recent(entity), "periods": PERIODS, **extra}


@login_required
def entity_backtest(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """GET: the panel. POST (staff): backtest today's policy, or one knob changed, then show the panel again."""
    entity = get_object_or_404(Entity, target_kind=target_kind, slug=slug)
    if request.method != "POST":
        return render(request, "evolution/partials/backtest_panel.html", _context(entity))
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff run backtests.")
    error = ""
    try:
        since = bt.parse_since(request.POST.get("since") or "30d", now=timezone.now())
        changes = []
        key = (request.POST.get("key") or "").strip()
        if key:
            from evolution.steering.settings.preview import Change

            changes.append(Change(key, sw.SET, _number(key, request.POST.get("value", ""))))
        bt.run(entity, since=since, changes=changes, actor=request.user.get_username())
    except ValueError as exc:
        error = str(exc)
    except sw.SettingsRefusal as refusal:
        error = refusal.detail
    if not request.htmx:
        if error:
            from django.contrib import messages

            messages.error(request, error)
        return redirect(entity)
    return render(request, "evolution/partials/backtest_panel.html", _context(entity, error=error))
