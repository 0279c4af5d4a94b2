"""The evolve Watch chapter's distributions: one metric's per-run values in the window before the change and the
one after it, side by side on one axis (a box from the lower to the upper quartile, whiskers to the extremes, the
median marked, each run a dot while a window holds few enough to read one by one)."""

from __future__ import annotations

import statistics
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, ROW, LEFT, PAD = 360, 22, 56, 10
#: Above this many runs a side is drawn as its box alone (a thousand dots read as a smear).
MAX_DOTS = 200
COLOURS = {"before": "#5f6b7a", "after": "#1f5fa8"}


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, median, high


def _row(name: str, values: list[float], y: float, x: Any) -> list[str]:
    colour = COLOURS[name]
    if not values:
        return [f'<text x="{LEFT}" y="{y + 4:.1f}" font-size="10" fill="#5f6b7a">not measured</text>']
    low, median, high = _quartiles(values)
    lo, hi = min(values), max(values)
    parts = [
        f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" stroke-width="1"/>',
        f'<rect x="{x(low):.1f}" y="{y - 6:.1f}" width="{max(x(high) - x(low), 1.0):.1f}" height="12" '
        f'fill="{colour}" fill-opacity="0.18" stroke="{colour}"><title>{name}: the middle half of {len(values)} runs, '
        f"{low:g} to {high:g}</title></rect>",
    ]
    if len(values) <= MAX_DOTS:
        parts += [f'<circle cx="{x(v):.1f}" cy="{y:.1f}" r="2.5" fill="{colour}" fill-opacity="0.55"/>' for v in values]
    parts.append(
        f'<line x1="{x(median):.1f}" x2="{x(median):.1f}" y1="{y - 8:.1f}" y2="{y + 8:.1f}" stroke="#1d2733" '
        f'stroke-width="2"><title>{name}: median {median:g} of {len(values)} runs</title></line>'
    )
    return parts


def window_strips(metric: str, before: list[float], after: list[float]) -> SafeString:
    """Both windows' values of ``metric`` on one axis, before above after, as inline SVG ("" with neither)."""
    if not before and not after:
        return mark_safe("")
    every = before + after
    lo, hi = min(every), max(every)
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - span * 0.05, hi + span * 0.05

    def x(value: float) -> float:
        return LEFT + (value - lo) / (hi - lo) * (WIDTH - LEFT - PAD)

    height = 2 * ROW + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart windows" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="{escape(metric)}: {len(before)} runs before the change, '
        f'{len(after)} after">',
        f'<text x="0" y="{ROW - 2}" font-size="10" fill="{COLOURS["before"]}">before ({len(before)})</text>',
        f'<text x="0" y="{2 * ROW - 2}" font-size="10" fill="{COLOURS["after"]}">after ({len(after)})</text>',
    ]
    parts += _row("before", before, ROW - 6, x)
    parts += _row("after", after, 2 * ROW - 6, x)
    axis = 2 * ROW + 4
    parts += [
        f'<line x1="{LEFT}" x2="{WIDTH - PAD}" y1="{axis}" y2="{axis}" stroke="#c9d1da"/>',
        f'<text x="{LEFT}" y="{axis + 12}" font-size="9" fill="#5f6b7a">{lo:.4g}</text>',
        f'<text x="{WIDTH - PAD}" y="{axis + 12}" font-size="9" fill="#5f6b7a" text-anchor="end">{hi:.4g}</text>',
        "</svg>",
    ]
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated value is a number or escaped


def draw_windows(cycle: Any, verdict: dict[str, Any] | None) -> None:
    """Lay each metric's drawing of both windows (``strips``) on an evolve watch's readings, in place: a run
    metric's per-run values from the source its reading names, a period metric's one value per window."""
    from evolution.presets.evolve import window_values

    if not verdict or verdict.get("comparator") != "evolve":
        return
    values = window_values(cycle)
    for reading in verdict.get("perMetric") or []:
        if reading.get("scope") == "period":
            sides = [_one((reading.get("before") or {}).get("value")), _one((reading.get("after") or {}).get("value"))]
            before, after = sides
        else:
            before, after = values.get(reading.get("metric"), ([], []))
        reading["strips"] = window_strips(str(reading.get("metric")), before, after)


def _one(value: Any) -> list[float]:
    try:
        return [] if value is None else [float(value)]
    except (TypeError, ValueError):
        return []
