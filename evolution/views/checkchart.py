"""A small strip chart for one metric of a pre-merge check: each pair's movement, the aggregate, the noise band."""

from __future__ import annotations

from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from singularity.display import number_text, signed_number_text

#: Drawn at this size (not shrunk to its cell): the labels stay 11 px, legible on a laptop and a phone.
WIDTH, HEIGHT, PAD = 320, 64, 14
FONT = 11


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def movement_strip(reading: dict[str, Any]) -> SafeString:
    """The movements of ``reading`` (a check record's perMetric entry) against ±band, as inline SVG.

    Each pair's movement is a dot (green up, red down), the movement read is a dark bar, the noise band is
    shaded; the axis is labelled at both ends, at zero and at the band's edges, numbers as people read them.
    """
    moves = [m for m in (_number(v) for v in reading.get("movements") or []) if m is not None]
    band = abs(_number(reading.get("band")) or 0.0)
    moved = _number(reading.get("movement"))
    reach = max([abs(m) for m in moves] + [band, abs(moved or 0.0), 1e-9]) * 1.15
    top, bottom = 16, HEIGHT - 18  # the strip; the movement's label above, the axis's below

    def x(value: float) -> float:
        return PAD + (value + reach) / (2 * reach) * (WIDTH - 2 * PAD)

    mid = (top + bottom) / 2
    band_words = f"±{number_text(band)}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart strip" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(reading.get("metric", ""))}: movements against the band {band_words}">',
        f'<rect x="{x(-band):.1f}" y="{top}" width="{max(0.0, x(band) - x(-band)):.1f}" height="{bottom - top}" '
        f'fill="#e8edf3"><title>the noise band {band_words}</title></rect>',
        f'<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - PAD}" y2="{bottom}" stroke="#9aa5b1"/>',
        f'<line x1="{x(0):.1f}" y1="{top - 2}" x2="{x(0):.1f}" y2="{bottom + 3}" stroke="#9aa5b1" stroke-dasharray="3 2"/>',
    ]
    for value in moves:
        colour = "#1f7a4d" if value > 0 else "#b3261e" if value < 0 else "#5f6b7a"
        parts.append(
            f'<circle cx="{x(value):.1f}" cy="{mid:.1f}" r="5" fill="{colour}" fill-opacity="0.75">'
            f"<title>a pair moved {escape(signed_number_text(value))}</title></circle>"
        )
    if moved is not None:
        parts.append(
            f'<line x1="{x(moved):.1f}" y1="{top - 1}" x2="{x(moved):.1f}" y2="{bottom}" stroke="#1d2733" '
            f'stroke-width="2.5"><title>the movement read: {escape(signed_number_text(moved))}</title></line>'
        )
        anchor = "start" if x(moved) < WIDTH / 4 else "end" if x(moved) > WIDTH * 3 / 4 else "middle"
        parts.append(
            f'<text x="{x(moved):.1f}" y="{top - 4}" font-size="{FONT}" font-weight="600" fill="#1d2733" '
            f'text-anchor="{anchor}">moved {escape(signed_number_text(moved))}</text>'
        )
    labels = [(PAD, "start", f"−{number_text(reach)}"), (WIDTH - PAD, "end", f"+{number_text(reach)}")]
    labels.append((x(0), "middle", "0"))
    if band and x(band) - x(0) > 40:
        labels.append((x(band), "middle", band_words))
    for at, anchor, words in labels:
        parts.append(
            f'<text x="{at:.1f}" y="{HEIGHT - 4}" font-size="{FONT}" fill="#5f6b7a" text-anchor="{anchor}">'
            f"{escape(words)}</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated value is a number or escaped
