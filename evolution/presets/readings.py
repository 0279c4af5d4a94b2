"""Metric readings a verdict shares: which metrics vote, their floors, bands and mustImprove, people or the judge,
one point per side, and the bootstrap interval of a gain (seed 003, "Roles", "Tolerances", "The watch compares").

The evolve watch reads windows with these; the pre-merge check reads the same floors, bands and mustImprove.
Everything here is a plain function over values and specs: no rows are read except people's ratings
(``values_by_source``, one query for both windows).
"""

from __future__ import annotations

import json
import statistics
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from grading import observed as O
from grading.metrics import (
    VERDICT_ROLES,
    aggregate,
    movement,
    on_floor,
    specs,
    to_number,
    tolerance_band,
)
from grading.models import Grade

#: Resamples of the evolve watch's bootstrap (DESIGN: 2,000, seeded from the cycle id).
RESAMPLES = 2000
#: The central interval the watch reads when the entity declares no ``watch.confidence``.
DEFAULT_CONFIDENCE = 0.9
#: Below this many runs on either side a run metric has no interval to read.
MIN_RUNS = 3
PEOPLE, JUDGE = O.PEOPLE, O.JUDGE


# --- Which metrics vote, and their terms --------------------------------------------------


def voting(terms: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The objectives then the guards of the resolved spec, each (id, spec), each role by id (the same order on
    every database: Postgres keeps a JSON object's keys in its own order); observe metrics never vote."""
    metrics = specs(terms)
    order = {"objective": 0, "guard": 1}
    chosen = [(mid, dict(spec)) for mid, spec in metrics.items() if spec.get("role") in VERDICT_ROLES]
    return sorted(chosen, key=lambda pair: (order[pair[1]["role"]], pair[0]))


def how(spec: Mapping[str, Any]) -> str:
    """How a metric is read over many runs: ``mean`` where it says ``aggregate: mean``, else the median."""
    return "mean" if spec.get("aggregate") == "mean" else "median"


def point(values: Iterable[Any], spec: Mapping[str, Any]) -> Any:
    """The metric's one value over a window's runs (median, or mean), None when no run measured it."""
    return aggregate(values, how(spec))


def point_of(numbers: list[Any], spec: Mapping[str, Any]) -> Any:
    """``point`` over values already ``measured``: floats read as floats, any Decimal among them exactly."""
    if not numbers or any(type(number) is not float for number in numbers):
        return aggregate(numbers, how(spec))
    return statistics.median(numbers) if how(spec) == "median" else statistics.fmean(numbers)


def under_floor(spec: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` stands under the metric's declared floor (direction-aware; never without a floor or value)."""
    return spec.get("floor") is not None and value is not None and not on_floor(spec, value)


def allowed(spec: Mapping[str, Any], terms: Mapping[str, Any], baseline: Any) -> Decimal:
    """How far the metric may move from ``baseline`` before it counts as moved (its tolerance band)."""
    return tolerance_band(spec, terms, baseline)


def must_improve(spec: Mapping[str, Any]) -> bool:
    return spec.get("role") == "objective" and spec.get("mustImprove") is True


def gain(spec: Mapping[str, Any], before: Any, after: Any) -> Decimal | None:
    """How much ``after`` improved on ``before`` in the metric's own direction (negative: worse)."""
    return movement(spec, before, after)


def is_period(spec: Mapping[str, Any]) -> bool:
    return spec.get("scope") == "period"


# --- People or the judge ------------------------------------------------------------------


# ``min_pairs`` and ``source_of`` are grading's (``grading.observed``): the one reading of a run's value.
min_pairs = O.min_pairs
source_of = O.source_of


@dataclass
class Sides:
    """One metric's per-run values on both windows, read from one source."""

    source: str
    before: list[Any]
    after: list[Any]


#: One run of a window as the readings take it: its execution id and its metric vector as graded.
Run = tuple[Any, Mapping[str, Any]]


def vectors_of(texts: list[str]) -> list[dict[str, Any]]:
    """Metric vectors from their stored JSON texts, decoded in one parse (a thousand small parses cost more)."""
    return json.loads(f"[{','.join(texts)}]") if texts else []


def measured(values: Iterable[Any]) -> list[Any]:
    """The values a metric was measured at, as numbers (Decimal for money, float otherwise); absent ones dropped.

    A float is taken as it is (most of a window's values are): ``to_number`` is asked only of the rest.
    """
    numbers: list[Any] = []
    keep = numbers.append
    for value in values:
        if type(value) is float:
            keep(value)
        elif value is not None:
            number = to_number(value)
            if number is not None:
                keep(number)
    return numbers


def values_by_source(
    terms: Mapping[str, Any], metric_ids: Iterable[str], before: list[Run], after: list[Run]
) -> dict[str, Sides]:
    """Each run metric's values on both windows, from one source per metric (``grading.observed.sources``: people
    only when both windows hold at least minPairs rated runs); people's ratings are read in one query, only when a
    metric is human-rated."""
    ids = list(metric_ids)
    people = O.ratings_of([run for run, _ in before + after if run is not None], terms)
    chosen = O.sources(terms, [run for run, _ in before], [run for run, _ in after], people)
    metric_specs, rated = specs(terms), O.rated_ids(terms)

    def observed(runs: list[Run]) -> list[Any]:
        if not rated:
            return [vector or {} for _, vector in runs]
        return [O.vector_of(metric_specs, rated, vector, people.get(str(run)), chosen) for run, vector in runs]

    seen_before, seen_after = observed(before), observed(after)
    return {
        mid: Sides(chosen.get(mid, JUDGE), [v.get(mid) for v in seen_before], [v.get(mid) for v in seen_after])
        for mid in ids
    }


def overlay_people(grades: list[Grade], terms: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each run's observed vector (``grading.observed.vectors``: people's ratings over the judge's, per run)."""
    return O.vectors([(g.execution_id, g.metrics) for g in grades], terms)


# --- The bootstrap --------------------------------------------------------------------------


def seed_for(cycle_id: int, metric_id: str) -> np.random.SeedSequence:
    """The bootstrap's seed: the cycle id (and the metric, so two metrics draw apart) — a verdict reproduces."""
    return np.random.SeedSequence([int(cycle_id), zlib.crc32(metric_id.encode())])


def _resampled_medians(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The medians of ``resamples`` resamples (with replacement) of ``values``, drawn exactly without building them.

    A resample's index i is floor(n·U) for a uniform U, so its k-th smallest index is floor(n·U₍ₖ₎), and the k-th
    order statistic of n uniforms is Beta(k, n − k + 1); the next one is U₍ₖ₎ + (1 − U₍ₖ₎)·Beta(1, n − k). So the
    median of each resample (the middle order statistic, or the mean of the two middle ones) is read off the sorted
    values with one or two Beta draws: the same distribution as ``np.median(values[rng.integers(0, n, n)])``, at a
    cost that does not grow with n.
    """
    ordered = np.sort(values)
    n = len(ordered)
    k = (n + 1) // 2 if n % 2 else n // 2
    low = rng.beta(k, n - k + 1, size=resamples)
    first = ordered[np.minimum((low * n).astype(np.int64), n - 1)]
    if n % 2:
        return first
    high = low + (1 - low) * rng.beta(1, n - k, size=resamples)
    second = ordered[np.minimum((high * n).astype(np.int64), n - 1)]
    return (first + second) / 2


def _resampled_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The means of ``resamples`` resamples of ``values`` (drawn in blocks, so memory stays bounded)."""
    n = len(values)
    out = np.empty(resamples)
    block = max(1, 2_000_000 // max(n, 1))
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        picks = rng.integers(0, n, size=(stop - start, n), dtype=np.int32)
        out[start:stop] = values[picks].mean(axis=1)
    return out


def resampled(values: np.ndarray, rng: np.random.Generator, resamples: int, statistic: str) -> np.ndarray:
    if statistic == "mean":
        return _resampled_means(values, rng, resamples)
    return _resampled_medians(values, rng, resamples)


def interval(
    before: Iterable[Any],
    after: Iterable[Any],
    *,
    spec: Mapping[str, Any],
    confidence: float,
    seed: np.random.SeedSequence,
    resamples: int = RESAMPLES,
) -> tuple[Decimal, Decimal] | None:
    """The central ``confidence`` percentile interval of the gain (after's median − before's, in the metric's own
    direction; the mean for ``aggregate: mean``) over ``resamples`` bootstrap resamples of each window.

    None when either side holds fewer than three measured runs: there is no interval to read.
    """
    a = np.array(measured(before), dtype=float)
    b = np.array(measured(after), dtype=float)
    if len(a) < MIN_RUNS or len(b) < MIN_RUNS:
        return None
    rng = np.random.default_rng(seed)
    statistic = how(spec)
    diffs = resampled(b, rng, resamples, statistic) - resampled(a, rng, resamples, statistic)
    if spec.get("direction", "max") == "min":
        diffs = -diffs
    tail = (1 - float(confidence)) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return _decimal(float(low)), _decimal(float(high))


def _decimal(value: float) -> Decimal:
    """A float as the decimal of its shortest repr, to at most 12 places (an interval's endpoint is an estimate)."""
    exact = Decimal(repr(value))
    return exact if exact == exact.to_integral_value() else round(exact, 12)


def shown(value: Any) -> str:
    """A measured number as people read it (``singularity.display.number_text``: 2.33, 0.0412; "—" for none)."""
    from singularity.display import number_text

    number = to_number(value)
    return "—" if number is None else number_text(number)


def confidence_of(terms: Mapping[str, Any]) -> float:
    """``loop.watch.confidence`` (0.9 by default), a share strictly between 0 and 1."""
    watch = ((terms.get("loop") or {}).get("watch")) or {}
    value = watch.get("confidence", DEFAULT_CONFIDENCE)
    try:
        share = float(value)
    except (TypeError, ValueError):
        return DEFAULT_CONFIDENCE
    return share if 0 < share < 1 else DEFAULT_CONFIDENCE
