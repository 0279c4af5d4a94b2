"""What an entity's metric plots draw besides the numbers: a rolling median and the changes that moved the line.

grading never reads the loop's tables: the loop registers a source of markers
(``register_trend_markers``, filled by ``evolution.hooks``) that answers, in one
query, which of its changes to the entity landed since an instant.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from grading.models import Entity

#: The rolling median is over this many graded runs (the plot's legend says so).
WINDOW = 10
#: A source returns at most this many markers: the newest.
MAX_MARKERS = 60


@dataclass(frozen=True)
class TrendMarker:
    """A change to the entity at ``at``: ``kind`` is "merge" or "revert"; ``label`` says what it was in words."""

    at: datetime
    label: str
    kind: str = "merge"
    href: str = ""


#: Asked with the entity and the oldest plotted run's start; returns the changes that landed since.
TrendMarkers = Callable[[Entity, datetime], list[TrendMarker]]
_sources: list[TrendMarkers] = []


def register_trend_markers(source: TrendMarkers) -> TrendMarkers:
    """Register a source of markers for the entity page's plots (the loop's merges and reverts); return it."""
    if source not in _sources:
        _sources.append(source)
    return source


def unregister_trend_markers(source: TrendMarkers) -> None:
    if source in _sources:
        _sources.remove(source)


def trend_markers(entity: Entity, since: datetime) -> list[TrendMarker]:
    """Return every registered source's markers for ``entity`` at or after ``since``, oldest first."""
    markers = [m for source in list(_sources) for m in source(entity, since) if m.at >= since]
    return sorted(markers, key=lambda m: m.at)


def rolling_median(points: Sequence[tuple[int, Decimal]], window: int = WINDOW) -> list[tuple[int, Decimal]]:
    """Return, at each point's x, the median of that point's value and up to ``window - 1`` before it.

    The window is kept sorted as it slides (one value in, one out), not sorted
    again at each point; the median is ``statistics.median``'s: the middle
    value, or the mean of the two middle ones.
    """
    values = [y for _, y in points]
    ordered: list[Decimal] = []
    medians = []
    for i, (x, y) in enumerate(points):
        if i >= window:
            del ordered[bisect.bisect_left(ordered, values[i - window])]
        bisect.insort(ordered, y)
        n = len(ordered)
        middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        medians.append((x, Decimal(middle)))
    return medians


def marker_x(starts: Sequence[datetime], at: datetime) -> Decimal | None:
    """Return where a change at ``at`` sits on a plot of runs numbered 1.. (``starts`` in plot order).

    Halfway between the last run that started before it and the next one;
    None when every plotted run started after it (the change is older than
    the plot).
    """
    before = sum(1 for started in starts if started < at)
    return Decimal(before) + Decimal("0.5") if before else None
