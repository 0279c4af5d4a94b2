"""Server-rendered line charts as inline, accessible SVG.

Values may be ``Decimal``, ``int`` or ``float``. Tick values are computed in
``Decimal`` so their labels are exact ("0.2", never "0.20000000000000001");
only pixel coordinates are floats. Every text is escaped, so the result is
safe to drop into a template.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from html import escape

from django.utils.safestring import mark_safe

Number = Decimal | int | float
Formatter = Callable[[Number], str]

#: Colour-blind-safe palette (Okabe-Ito), used in order for series without a colour.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_CTX = Context(prec=28)
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 72, 16, 34, 44


@dataclass(frozen=True)
class Series:
    """One line: ``points`` are (x, y) pairs in x order."""

    label: str
    points: Sequence[tuple[Number, Number]]
    color: str = ""
    dashed: bool = False
    #: One hover text per point (in ``points`` order); empty: "<label> at <x>: <y>".
    titles: Sequence[str] = ()
    #: Draw the line only, without a dot per point (a derived line such as a rolling median).
    dots: bool = True


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line, such as a target or a floor."""

    y: Number
    label: str
    color: str = "#c0392b"
    #: Widen the y axis to include the line; when False the line is drawn only if the data's axis reaches it,
    #: so a far-off reference (a balance's $0 "Empty") never flattens the data into a line.
    fit: bool = True


@dataclass(frozen=True)
class VLine:
    """A vertical marker at ``x`` (an event between points, such as a change that landed), titled and linked."""

    x: Number
    label: str
    href: str = ""
    color: str = "#6a3d9a"


def _dec(value: Number) -> Decimal:
    """The exact decimal of a value; a float goes through its shortest text so 0.1 stays 0.1."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(value)


def nice_ticks(low: Number, high: Number, *, count: int = 5, integer: bool = False) -> list[Decimal]:
    """Return evenly spaced round tick values (steps of 1, 2 or 5 × 10^k) covering [low, high].

    The first tick is at or below ``low`` and the last at or above ``high``; with
    ``integer`` the step is never below 1. A range that is not negative gets no
    negative tick, even when it is flat (a flat zero spans 0..1, not -1..1).
    """
    lo, hi = _dec(low), _dec(high)
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) / 10 if lo else Decimal(1)
        if integer:
            pad = max(pad, Decimal(1))
        lo, hi = (lo - pad if lo - pad >= 0 or lo < 0 else Decimal(0)), hi + pad
    raw = _CTX.divide(hi - lo, Decimal(max(count, 1)))
    exponent = raw.adjusted()
    mantissa = raw.scaleb(-exponent)
    multiple = next(m for m in (1, 2, 5, 10) if mantissa <= m)
    step = Decimal(multiple).scaleb(exponent)
    if integer and step < 1:
        step = Decimal(1)
    first = _CTX.divide(lo, step).to_integral_value(rounding=ROUND_FLOOR) * step
    last = _CTX.divide(hi, step).to_integral_value(rounding=ROUND_CEILING) * step
    ticks, tick = [], first
    while tick <= last:
        ticks.append(tick.normalize(_CTX) if tick else Decimal(0))
        tick += step
    return ticks


def _plain(value: Number) -> str:
    """Decimal text without exponent or trailing zeros."""
    text = format(_dec(value).normalize(_CTX), "f")
    return "0" if text in ("-0", "") else text


class _Scale:
    """Maps a value domain onto a pixel range."""

    def __init__(self, low: Decimal, high: Decimal, start: float, end: float) -> None:
        self.low, self.span = float(low), float(high - low) or 1.0
        self.start, self.end = start, end

    def __call__(self, value: Number) -> float:
        return round(self.start + (float(value) - self.low) / self.span * (self.end - self.start), 2)


def _x_domain(xs: list[Decimal]) -> tuple[Decimal, Decimal]:
    """The x range: the data's, widened by one each side when flat but never below 0 for data that is not."""
    low, high = min(xs), max(xs)
    if low == high:
        return (low - 1 if low >= 1 or low < 0 else low), high + 1
    return low, high


def line_chart(
    series: Sequence[Series],
    *,
    width: int = 720,
    height: int = 280,
    y_label: str = "",
    x_label: str = "",
    hlines: Sequence[HLine] = (),
    vlines: Sequence[VLine] = (),
    title: str = "",
    y_format: Formatter = _plain,
    x_format: Formatter = _plain,
    chart_id: str = "",
    y_integer: bool = False,
    empty_text: str = "No data yet",
) -> str:
    """Return an SVG document fragment (a safe string) plotting ``series`` with axes, ticks and a legend.

    Each point carries a ``<title>`` with its series, x and y (as ``x_format``
    and ``y_format`` render them) so screen readers and hovering show exact
    values. With no points at all, the chart says ``empty_text`` instead of
    drawing axes. The y axis fits the points and the reference lines that
    ``fit``; ``y_integer`` keeps its ticks whole (counts). The x axis also
    reaches every ``vlines`` marker, drawn as a titled dashed line (a link when
    it has an ``href``).
    """
    title = title or ", ".join(s.label for s in series) or "Chart"
    chart_id = chart_id or "chart-" + hashlib.sha1(title.encode()).hexdigest()[:8]
    points = [(_dec(x), _dec(y)) for s in series for x, y in s.points]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'role="img" aria-labelledby="{chart_id}-title {chart_id}-desc">'
        f'<title id="{chart_id}-title">{escape(title)}</title>'
    )
    if not points:
        return mark_safe(
            f'{head}<desc id="{chart_id}-desc">{escape(empty_text)}.</desc>'
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#5f6b7a">{escape(empty_text)}</text></svg>'
        )

    xs = [x for x, _ in points]
    ys = [y for _, y in points] + [_dec(h.y) for h in hlines if h.fit]
    integer_x = all(x == x.to_integral_value() for x in xs)
    y_ticks = nice_ticks(min(ys), max(ys), integer=y_integer)
    hlines = [h for h in hlines if h.fit or y_ticks[0] <= _dec(h.y) <= y_ticks[-1]]
    x_low, x_high = _x_domain(xs + [_dec(v.x) for v in vlines])
    x_ticks = [t for t in nice_ticks(x_low, x_high, count=8, integer=integer_x) if x_low <= t <= x_high]
    sx = _Scale(x_low, x_high, _MARGIN_LEFT, width - _MARGIN_RIGHT)
    sy = _Scale(y_ticks[0], y_ticks[-1], height - _MARGIN_BOTTOM, _MARGIN_TOP)
    left, right, top, bottom = _MARGIN_LEFT, width - _MARGIN_RIGHT, _MARGIN_TOP, height - _MARGIN_BOTTOM

    parts = [head, f'<desc id="{chart_id}-desc">{escape(_describe(series, x_format, y_format))}</desc>']
    parts.append('<g class="grid" stroke="#e6e9ef" stroke-width="1">')
    parts += [f'<line x1="{left}" x2="{right}" y1="{sy(t)}" y2="{sy(t)}"/>' for t in y_ticks]
    parts.append("</g>")
    parts.append('<g class="axis" font-size="11" fill="#5f6b7a" stroke="none">')
    parts += [f'<text x="{left - 6}" y="{sy(t) + 4}" text-anchor="end">{escape(y_format(t))}</text>' for t in y_ticks]
    parts += [
        f'<line x1="{sx(t)}" x2="{sx(t)}" y1="{bottom}" y2="{bottom + 4}" stroke="#5f6b7a"/>'
        f'<text x="{sx(t)}" y="{bottom + 16}" text-anchor="middle">{escape(x_format(t))}</text>'
        for t in x_ticks
    ]
    parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#5f6b7a"/>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#5f6b7a"/>')
    if x_label:
        parts.append(f'<text x="{(left + right) / 2}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    if y_label:
        mid = (top + bottom) / 2
        parts.append(
            f'<text x="14" y="{mid}" text-anchor="middle" transform="rotate(-90 14 {mid})">{escape(y_label)}</text>'
        )
    parts.append("</g>")
    for line in hlines:
        y = sy(line.y)
        text = f"{line.label}: {y_format(line.y)}"
        parts.append(
            f'<g class="hline"><line x1="{left}" x2="{right}" y1="{y}" y2="{y}" stroke="{escape(line.color)}" '
            f'stroke-dasharray="6 4" stroke-width="1.5"><title>{escape(text)}</title></line>'
            f'<text x="{right - 4}" y="{y - 4}" text-anchor="end" font-size="11" fill="{escape(line.color)}" '
            'stroke="#fff" stroke-width="3" paint-order="stroke">'
            f"{escape(text)}</text></g>"
        )
    parts += [_vline_svg(line, sx(line.x), top, bottom) for line in vlines]
    for index, one in enumerate(series):
        parts.append(_series_svg(one, _color(one, index), sx, sy, x_format, y_format, x_label))
    parts.append(_legend(series, left))
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _color(one: Series, index: int) -> str:
    return one.color or PALETTE[index % len(PALETTE)]


def _vline_svg(line: VLine, x: float, top: int, bottom: int) -> str:
    """Return one vertical marker: a dashed line with a wide transparent hit area, its title, maybe a link."""
    color, label = escape(line.color), escape(line.label)
    body = (
        f'<g class="vline"><title>{label}</title>'
        f'<line x1="{x}" x2="{x}" y1="{top}" y2="{bottom}" stroke="{color}" stroke-width="1.5" stroke-dasharray="3 3"/>'
        f'<line x1="{x}" x2="{x}" y1="{top}" y2="{bottom}" stroke="transparent" stroke-width="8"/></g>'
    )
    return f'<a href="{escape(line.href)}">{body}</a>' if line.href else body


def _series_svg(
    one: Series, color: str, sx: _Scale, sy: _Scale, x_format: Formatter, y_format: Formatter, x_label: str
) -> str:
    """Return one series as a polyline plus a titled marker per point."""
    color = escape(color)
    at = [(sx(x), sy(y)) for x, y in one.points]  # each point's pixels once, for the line and its marker
    coords = " ".join(f"{cx},{cy}" for cx, cy in at)
    dash = ' stroke-dasharray="5 3"' if one.dashed else ""
    radius = 3 if len(one.points) <= 60 else 1.5
    markers = ""
    if one.dots:  # a line without dots (a rolling median) has no marker to title
        titles = list(one.titles) or [
            f"{one.label} at {x_label or 'x'} {x_format(x)}: {y_format(y)}" for x, y in one.points
        ]
        markers = "".join(
            f'<circle cx="{cx}" cy="{cy}" r="{radius}"><title>{escape(text)}</title></circle>'
            for (cx, cy), text in zip(at, titles, strict=True)
        )
    return (
        f'<g class="series" data-label="{escape(one.label)}">'
        f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{coords}"/>'
        f'<g fill="{color}">{markers}</g></g>'
    )


def _legend(series: Sequence[Series], left: int) -> str:
    """Return the legend row above the plot area: a swatch and a label per series."""
    parts, x = ['<g class="legend" font-size="12" fill="#1d2330">'], left
    for index, one in enumerate(series):
        color = escape(_color(one, index))
        dash = ' stroke-dasharray="5 3"' if one.dashed else ""
        parts.append(
            f'<line x1="{x}" x2="{x + 18}" y1="14" y2="14" stroke="{color}" stroke-width="3"{dash}/>'
            f'<text x="{x + 24}" y="18">{escape(one.label)}</text>'
        )
        x += 36 + 7 * len(one.label)
    parts.append("</g>")
    return "".join(parts)


def _describe(series: Sequence[Series], x_format: Formatter, y_format: Formatter) -> str:
    """Return a one-sentence text summary: each series' last value, for readers who cannot see the plot."""
    bits = []
    for one in series:
        if one.points:
            x, y = one.points[-1]
            bits.append(f"{one.label} {y_format(y)} at {x_format(x)}")
    return "Latest: " + "; ".join(bits) + "." if bits else "No data yet."
