"""The SVG line chart: exact ticks, accessible titles, Decimal-safe values, reference lines."""

from __future__ import annotations

import re
from decimal import Decimal
from xml.etree import ElementTree

from singularity.plots import HLine, Series, VLine, line_chart, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(Decimal("0.13"), Decimal("0.97")) == [Decimal(x) for x in ("0", "0.2", "0.4", "0.6", "0.8", "1")]


def test_nice_ticks_for_integers_never_step_below_one() -> None:
    assert nice_ticks(1, 3, count=8, integer=True) == [1, 2, 3]


def test_nice_ticks_widen_a_flat_range() -> None:
    ticks = nice_ticks(Decimal(5), Decimal(5))
    assert ticks[0] < 5 < ticks[-1]


def test_it_plots_decimals_with_a_title_per_point() -> None:
    series = [Series("Balance", [(1, Decimal("9.9843")), (2, Decimal("9.5")), (3, Decimal("8.25"))])]
    root = parse(line_chart(series, x_label="cycle", y_label="USD", y_format=lambda v: f"${v}"))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert titles[0] == "Balance"
    assert "Balance at cycle 1: $9.9843" in titles
    assert "Balance at cycle 3: $8.25" in titles
    assert len(list(root.iter(f"{SVG}circle"))) == 3


def test_it_is_labelled_for_screen_readers() -> None:
    svg = line_chart([Series("Spent", [(0, 0), (4, Decimal("1.5"))])], title="Spend", chart_id="c1")
    root = parse(svg)
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "c1-title c1-desc"
    desc = root.find(f"{SVG}desc")
    assert desc is not None and desc.text == "Latest: Spent 1.5 at 4."


def test_axis_ticks_are_exact_decimal_text() -> None:
    svg = line_chart([Series("a", [(0, Decimal("0.1")), (1, Decimal("0.3"))])])
    labels = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    assert "0.1" in labels and "0.3" in labels
    assert not any("0000000" in label for label in labels)


def test_higher_values_are_drawn_higher() -> None:
    root = parse(line_chart([Series("a", [(0, 1), (1, 5)])]))
    low, high = (float(c.get("cy")) for c in root.iter(f"{SVG}circle"))
    assert high < low  # SVG y grows downwards


def test_hlines_widen_the_domain_and_are_labelled() -> None:
    svg = line_chart([Series("score", [(0, 5), (1, 6)])], hlines=[HLine(10, "target"), HLine(0, "floor")])
    root = parse(svg)
    lines = [g for g in root.iter(f"{SVG}g") if g.get("class") == "hline"]
    assert [g.find(f"{SVG}text").text for g in lines] == ["target: 10", "floor: 0"]
    target_y = float(lines[0].find(f"{SVG}line").get("y1"))
    point_ys = [float(c.get("cy")) for c in root.iter(f"{SVG}circle")]
    assert target_y < min(point_ys)


def test_it_escapes_labels() -> None:
    svg = line_chart([Series("<b>&", [(0, 1)])], x_label="<x>")
    assert "<b>&" not in svg
    assert "&lt;b&gt;&amp;" in svg
    parse(svg)


def test_an_empty_chart_says_no_data() -> None:
    svg = line_chart([Series("Balance", [])])
    assert "No data yet" in svg
    assert "<circle" not in svg
    parse(svg)


def test_a_legend_names_every_series() -> None:
    root = parse(line_chart([Series("Balance", [(0, 1)]), Series("Spent", [(0, 0)], dashed=True)]))
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    assert [t.text for t in legend.iter(f"{SVG}text")] == ["Balance", "Spent"]


def y_tick_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]+)</text>', svg)


def x_tick_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="middle">([^<]+)</text>', svg)


def test_a_reference_line_that_does_not_fit_never_flattens_the_data() -> None:
    # A balance from $10 down by cents: a $0 line on the axis would make it a flat line at the top.
    series = [Series("Balance", [(0, Decimal("10")), (1, Decimal("9.9948")), (2, Decimal("9.9843"))])]
    svg = line_chart(series, hlines=[HLine(0, "Empty", fit=False), HLine(10, "Start", fit=False)])
    labels = [Decimal(label) for label in y_tick_labels(svg)]
    assert labels[0] >= Decimal("9.98") and labels[-1] <= Decimal("10")
    assert "Empty" not in svg  # off the axis: not drawn
    assert "Start: 10" in svg  # on the axis: drawn


def test_a_flat_zero_has_no_negative_axis() -> None:
    svg = line_chart([Series("Spent", [(0, 0), (1, 0)])])
    assert [Decimal(label) for label in y_tick_labels(svg)][0] == 0


def test_a_count_axis_never_starts_at_minus_one() -> None:
    svg = line_chart([Series("Runs", [(0, 3)])], y_integer=True)
    assert x_tick_labels(svg)[0] == "0"
    assert "-1" not in x_tick_labels(svg)
    ys = [Decimal(label) for label in y_tick_labels(svg)]
    assert all(y == y.to_integral_value() for y in ys) and ys[0] >= 0


def test_nice_ticks_of_a_flat_zero_start_at_zero() -> None:
    assert nice_ticks(0, 0)[0] == 0
    assert nice_ticks(-2, -2)[0] < -2  # a negative range still gets its room


def test_an_empty_chart_says_what_is_missing() -> None:
    assert "No cycles yet" in line_chart([Series("Balance", [])], empty_text="No cycles yet")


def test_a_point_may_carry_its_own_title() -> None:
    svg = line_chart([Series("m", [(1, 1), (2, 3)], titles=["run ab12cd34: 1", "run ef56ab78: 3"])], x_label="run")
    titles = [c.find(f"{SVG}title").text for c in parse(svg).iter(f"{SVG}circle")]
    assert titles == ["run ab12cd34: 1", "run ef56ab78: 3"]


def test_vlines_are_titled_links_and_widen_the_x_domain() -> None:
    svg = line_chart(
        [Series("m", [(1, 1), (2, 3)])],
        vlines=[VLine(2.5, "cycle 4 merged PR #3", href="/evolution/cycles/4/")],
    )
    root = parse(svg)
    link = next(root.iter(f"{SVG}a"))
    assert link.get("href") == "/evolution/cycles/4/"
    assert "cycle 4 merged PR #3" in "".join(link.itertext())
    line = next(link.iter(f"{SVG}line"))
    circles = [float(c.get("cx")) for c in root.iter(f"{SVG}circle")]
    assert float(line.get("x1")) > max(circles)  # 2.5 is past the last point, inside the plot
