"""The evolve Watch chapter's drawing: a metric's interval of gain against its ±allowed band, as inline SVG."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

WIDTH, HEIGHT, PAD = 320, 34, 10


def _number(value: Any) -> float | None:
    try:
        return float(Decimal(str(value)))
    except (InvalidOperation, ValueError, TypeError):
        return None


@register.simple_tag
def interval_bar(metric: dict[str, Any]) -> SafeString | str:
    """The gain's interval (a bar, the point gain a tick) over the shaded ±allowed band, zero marked; "" without one."""
    spread = metric.get("spread") or []
    low, high = (_number(spread[0]), _number(spread[1])) if len(spread) == 2 else (None, None)
    gain, allowed = _number(metric.get("gain")), _number(metric.get("allowed"))
    if low is None or high is None or allowed is None:
        return ""
    reach = max(abs(low), abs(high), allowed, abs(gain or 0)) * 1.15 or 1.0

    def x(value: float) -> float:
        return round(PAD + (value + reach) / (2 * reach) * (WIDTH - 2 * PAD), 1)

    tick = (
        format_html(
            '<line x1="{0}" x2="{0}" y1="8" y2="26" stroke="#1d2733" stroke-width="2"><title>gain {1}</title></line>',
            x(gain),
            f"{gain:g}",
        )
        if gain is not None
        else ""
    )
    bar = allowed if metric.get("mustImprove") else -allowed  # what the whole interval must clear
    colour = "#1f7a4d" if low > bar else "#b3261e" if high < -allowed else "#8a6d1f"
    return format_html(
        '<svg class="interval" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{label}">'
        '<rect x="{bl}" y="4" width="{bw}" height="26" fill="#e8edf3"><title>±{allowed}: the band it may move inside'
        "</title></rect>"
        '<line x1="{zero}" x2="{zero}" y1="2" y2="32" stroke="#9aa5b1" stroke-dasharray="2 2"/>'
        '<rect x="{il}" y="13" width="{iw}" height="8" fill="{colour}" fill-opacity="0.8"><title>{label}</title></rect>'
        "{tick}</svg>",
        w=WIDTH,
        h=HEIGHT,
        label=f"gain from {low:g} to {high:g} against ±{allowed:g}",
        allowed=f"{allowed:g}",
        bl=x(-allowed),
        bw=round(x(allowed) - x(-allowed), 1),
        zero=x(0),
        il=x(low),
        iw=max(round(x(high) - x(low), 1), 1),
        colour=colour,
        tick=tick,
    )


@register.filter
def measure(value: Any) -> str:
    """A reading's number as people read it (two places from 1 up, three significant digits below; "—" for none):
    the record keeps an interval's endpoints to twelve places."""
    from evolution.presets.readings import shown

    return shown(value)
