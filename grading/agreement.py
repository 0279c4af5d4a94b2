"""Judge agreement corrected for chance (issue 31, item 4), read beside the seed's agreeing share.

The seed's calibration counts the share of pairs within a tolerance: a judge that always answers 1 on a metric
people mostly rate 1 reads "calibrated" though it tells nothing apart. These figures discount what chance alone
would agree on:

- a **two-valued** metric (a scale of two points, 👍/👎): Cohen's κ — scikit-learn's ``cohen_kappa_score``;
- an **ordinal** one (a stepped scale of more points, the default 1–5): Cohen's κ with quadratic weights over the
  scale's points — the same function, ``weights="quadratic"``;
- a **continuous** one (no step): Krippendorff's α at the interval level, computed here for two coders with every
  value present (the ``krippendorff`` package, GPL-3.0, is the tests' reference, not a runtime dependency).

Each comes with a 95 % interval from a seeded bootstrap over the pairs (``RESAMPLES`` resamples of the pairs, the
2.5th and 97.5th percentiles), computed vectorized with the same formula (a test holds it equal to the library's
answer on resamples). The seed is derived from the entity and the metric, so a page shows the same interval on
every load. A resample that has no spread (every value the same) has no figure and is left out.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

#: Bootstrap resamples of the pairs.
RESAMPLES = 2000
#: Under this lower bound a chance-corrected figure does not back a "calibrated" reading (issue 31).
TRUSTED_LOW = 0.4

BINARY, ORDINAL, CONTINUOUS = "binary", "ordinal", "continuous"
NAMES = {
    BINARY: "Cohen's κ",
    ORDINAL: "weighted κ (quadratic)",
    CONTINUOUS: "Krippendorff's α (interval)",
}


@dataclass(frozen=True)
class Chance:
    """A chance-corrected agreement: ``statistic`` names it; ``value`` with its bootstrap 95 % interval
    (``low``, ``high``); any of the three None when the pairs have no spread to read."""

    statistic: str
    value: float | None
    low: float | None
    high: float | None
    pairs: int

    def as_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "value": self.value, "low": self.low, "high": self.high}

    def words(self) -> str:
        """ "Cohen's κ 0.12 (95 % 0.00–0.41)", or "Cohen's κ —" with nothing to read."""
        if self.value is None:
            return f"{self.statistic} —"
        if self.low is None or self.high is None:
            return f"{self.statistic} {self.value:.2f}"
        return f"{self.statistic} {self.value:.2f} (95 % {self.low:.2f}–{self.high:.2f})"


def kind_of(scale: dict[str, Any] | None) -> str:
    """Which figure a metric's judge scale calls for: binary (two points), ordinal (stepped) or continuous."""
    if not scale or not scale.get("step"):
        return CONTINUOUS
    points = (float(scale["max"]) - float(scale["min"])) / float(scale["step"])
    return BINARY if round(points) == 1 else ORDINAL


def points_of(scale: dict[str, Any] | None) -> list[float]:
    """A stepped scale's points on 0..1 (the values a normalized answer takes); [] for a continuous one."""
    if not scale or not scale.get("step"):
        return []
    count = round((float(scale["max"]) - float(scale["min"])) / float(scale["step"]))
    return [i / count for i in range(count + 1)] if count > 0 else []


def seed_of(*parts: Any) -> int:
    """A stable bootstrap seed for ``parts`` (the entity and the metric): the same interval on every read."""
    return zlib.crc32(":".join(str(p) for p in parts).encode())


def chance_corrected(
    pairs: list[tuple[float, float]], kind: str, *, points: list[float] | None = None, seed: int = 0
) -> Chance:
    """The chance-corrected agreement of (judge, people) ``pairs`` on 0..1 for a metric of ``kind``."""
    key = tuple((round(float(j), 9), round(float(p), 9)) for j, p in pairs)
    return _cached(key, kind, tuple(points or ()), seed)


@lru_cache(maxsize=1024)
def _cached(pairs: tuple[tuple[float, float], ...], kind: str, points: tuple[float, ...], seed: int) -> Chance:
    name = NAMES[kind]
    if len(pairs) < 2:
        return Chance(name, None, None, None, len(pairs))
    judge = np.array([p[0] for p in pairs], dtype=float)
    people = np.array([p[1] for p in pairs], dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), size=(RESAMPLES, len(pairs)))
    if kind == CONTINUOUS:
        value = _alpha_interval(judge[None, :], people[None, :])[0]
        spread = _alpha_interval(judge[picks], people[picks])
    else:
        # The labels: the scale's points, and any value between them (people split evenly on a run).
        labels = sorted(set(points) | set(judge.tolist()) | set(people.tolist()))
        weights = "quadratic" if kind == ORDINAL else None
        value = _library_kappa(judge, people, labels, weights)
        a = np.searchsorted(labels, judge)
        b = np.searchsorted(labels, people)
        spread = kappa_many(a[picks], b[picks], len(labels), weights)
    value = None if not np.isfinite(value) else float(value)
    spread = spread[np.isfinite(spread)]
    if value is None or spread.size < RESAMPLES // 2:
        return Chance(name, value, None, None, len(pairs))
    low, high = np.percentile(spread, [2.5, 97.5])
    return Chance(name, value, float(low), float(high), len(pairs))


def _library_kappa(judge: np.ndarray, people: np.ndarray, labels: list[float], weights: str | None) -> float:
    """scikit-learn's Cohen's κ over the labels' indices (nan when chance explains everything: no spread)."""
    import warnings

    from sklearn.metrics import cohen_kappa_score  # imported on first use: ~1 s, only where a page shows κ

    a = np.searchsorted(labels, judge)
    b = np.searchsorted(labels, people)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(cohen_kappa_score(a, b, labels=list(range(len(labels))), weights=weights))


def kappa_many(a: np.ndarray, b: np.ndarray, k: int, weights: str | None) -> np.ndarray:
    """Cohen's κ of each row of label indices ``a`` against ``b`` (shape resamples × n), as
    ``cohen_kappa_score`` computes it: 1 − Σ w·observed / Σ w·expected (nan where expected is 0)."""
    rows, n = a.shape
    observed = np.zeros((rows, k, k))
    np.add.at(observed, (np.repeat(np.arange(rows), n), a.ravel(), b.ravel()), 1.0)
    expected = observed.sum(axis=2)[:, :, None] * observed.sum(axis=1)[:, None, :] / n
    grid = np.arange(k)
    w = (grid[:, None] - grid[None, :]) ** 2.0 if weights == "quadratic" else 1.0 - np.eye(k)
    top = (w * observed).sum(axis=(1, 2))
    bottom = (w * expected).sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, 1.0 - top / bottom, np.nan)


def _alpha_interval(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Krippendorff's α at the interval level for two coders with every value present, per row:
    1 − (N − 1)·Σ(a − b)² / (2n · Σ(v − v̄)²) over the 2n pooled values v (nan with no spread)."""
    n = a.shape[1]
    pooled = np.concatenate([a, b], axis=1)
    spread = ((pooled - pooled.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    apart = ((a - b) ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(spread > 0, 1.0 - (2 * n - 1) * apart / (2 * n * spread), np.nan)


def shaky(status: str, chance: Chance | None) -> str:
    """The warning when the seed's rule reads calibrated but chance could explain it: "" otherwise."""
    if status != "ok" or chance is None:
        return ""
    if chance.value is None:
        return (
            f"calibrated by the seed's rule, but {chance.statistic} cannot be read: the pairs have no spread, "
            "so agreement could be chance alone"
        )
    if chance.low is None or chance.low < TRUSTED_LOW:
        low = "cannot be bounded" if chance.low is None else f"reaches {chance.low:.2f}"
        return (
            f"calibrated by the seed's rule, but {chance.statistic}'s 95 % interval {low}, below {TRUSTED_LOW}: "
            "much of the agreement could be chance"
        )
    return ""
