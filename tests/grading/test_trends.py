"""grading.trends: the rolling median, where a change sits between runs, and the marker sources' registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from grading.trends import (
    TrendMarker,
    marker_x,
    register_trend_markers,
    rolling_median,
    trend_markers,
    unregister_trend_markers,
)

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_the_rolling_median_looks_back_a_window_of_runs() -> None:
    points = [(n, Decimal(v)) for n, v in enumerate(["1", "9", "2", "8", "3"], start=1)]
    assert rolling_median(points, window=3) == [
        (1, Decimal("1")),
        (2, Decimal("5")),
        (3, Decimal("2")),
        (4, Decimal("8")),
        (5, Decimal("3")),
    ]


def test_a_change_sits_halfway_after_the_last_run_before_it() -> None:
    starts = [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert marker_x(starts, T0 + timedelta(minutes=90)) == Decimal("2.5")
    assert marker_x(starts, T0 + timedelta(hours=5)) == Decimal("3.5")
    assert marker_x(starts, T0 - timedelta(hours=1)) is None


def test_markers_come_from_every_source_oldest_first_and_not_before_since(monkeypatch) -> None:
    monkeypatch.setattr("grading.trends._sources", [])  # without the loop's own source, which reads the database

    def source(entity, since):
        return [
            TrendMarker(T0 + timedelta(hours=2), "later"),
            TrendMarker(T0, "earlier"),
            TrendMarker(T0 - timedelta(days=1), "too old"),
        ]

    register_trend_markers(source)
    try:
        assert [m.label for m in trend_markers(None, T0)] == ["earlier", "later"]  # type: ignore[arg-type]
    finally:
        unregister_trend_markers(source)


def test_the_rolling_median_equals_the_median_of_each_window_on_random_values() -> None:
    import random
    import statistics

    rng = random.Random(18)
    for _ in range(200):
        window = rng.randint(1, 12)
        values = [Decimal(rng.choice(["0", "1", "2.5", "-3", "0.1", "7"])) + rng.randint(0, 3) for _ in range(40)]
        points = [(n, v) for n, v in enumerate(values, start=1)]
        expected = [
            (n, Decimal(statistics.median(values[max(0, i - window + 1) : i + 1]))) for i, (n, _) in enumerate(points)
        ]
        assert rolling_median(points, window=window) == expected
