"""A small strip chart for one metric of a pre-merge check: each pair's movement, the aggregate, the noise band."""

from __future__ import annotations

from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, PAD = 320, 44, 12


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def movement_strip(reading: dict[str, Any]) -> SafeString:
    """The movements of ``reading`` (a check record's perMetric entry) against ±band, as inline SVG."""
    moves = [m for m in (_number(v) for v in reading.get("movements") or []) if m is not None]
    band = abs(_number(reading.get("band")) or 0.0)
    moved = _number(reading.get("movement"))
    reach = max([abs(m) for m in moves] + [band, abs(moved or 0.0), 1e-9]) * 1.15

    def x(value: float) -> float:
        return PAD + (value + reach) / (2 * reach) * (WIDTH - 2 * PAD)

    mid = HEIGHT / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart strip" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(reading.get("metric", ""))}: movements against the band ±{band:g}">',
        f'<rect x="{x(-band):.1f}" y="6" width="{max(0.0, x(band) - x(-band)):.1f}" height="{HEIGHT - 12}" '
        'fill="#e8edf3"><title>the noise band</title></rect>',
        f'<line x1="{x(0):.1f}" y1="4" x2="{x(0):.1f}" y2="{HEIGHT - 4}" stroke="#9aa5b1" stroke-dasharray="2 2"/>',
    ]
    for value in moves:
        colour = "#1f7a4d" if value > 0 else "#b3261e" if value < 0 else "#5f6b7a"
        parts.append(
            f'<circle cx="{x(value):.1f}" cy="{mid:.1f}" r="4" fill="{colour}" fill-opacity="0.7">'
            f"<title>{value:+g}</title></circle>"
        )
    if moved is not None:
        parts.append(
            f'<line x1="{x(moved):.1f}" y1="8" x2="{x(moved):.1f}" y2="{HEIGHT - 8}" stroke="#1d2733" stroke-width="2">'
            f"<title>the movement read: {moved:+g}</title></line>"
        )
    parts.append(f'<text x="{PAD}" y="{HEIGHT - 1}" font-size="9" fill="#5f6b7a">−{reach:.2g}</text>')
    parts.append(
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 1}" font-size="9" fill="#5f6b7a" text-anchor="end">+{reach:.2g}</text>'
    )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated value is a number or escaped
