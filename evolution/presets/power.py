"""How much a verdict could have seen (issue 31, "Every verdict states its power").

The pre-merge check's rule (g′) validates an objective only when its movement
exceeds the band — half the spread of the per-input movements, never tighter
than the tolerance; the tolerance alone below three pairs. On a metric that
takes two values (a 0/1 accuracy) every movement is −1, 0 or +1, so as soon
as one input moves and another does not the band is 0.5: a small set can
neither validate a fix of fewer than half its inputs nor say so unless it is
told. These functions say it:

- ``smallest_gain``: the smallest movement a set of ``n`` pairs could show
  beyond its band (exact, by enumerating every outcome of a two-valued
  metric; the band itself for a continuous one); None when none can.
- ``check_power``: the check's record of its power — pairs, held-out k of n
  and the answer on the held-out inputs alone, the band, the smallest gain,
  whether every input was one the proposer saw — and the sentence saying it.
- ``planned_power``: the same before the check runs (the decide card), from
  the frozen set.
- ``chance_of_firing`` / ``watch_power``: how often a repair watch of
  ``minFailures`` of ``windowRuns`` regresses an unchanged entity at its own
  failure rate (the binomial tail, exact).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fractions import Fraction
from math import comb
from typing import Any

from grading.metrics import specs, to_number, tolerance_band

#: Below this many compared pairs the band is the tolerance alone (pairs.MIN_SPREAD_PAIRS, restated to stay a leaf).
MIN_SPREAD_PAIRS = 3
#: Above this many pairs the enumeration is skipped: the smallest gain is then just above half the range.
ENUMERATED = 400
SEEN_ONLY = "validated on seen inputs only"


def _plain(value: Decimal | None) -> str | None:
    if value is None:
        return None
    return format(value.quantize(Decimal("1e-6")).normalize(), "f")


def _fmt(value: Decimal | None) -> str:
    return "—" if value is None else f"{float(value):.3g}"


def _aggregate(values: list[Decimal], how: str) -> Decimal:
    return statistics.median(values) if how == "median" else sum(values, Decimal(0)) / len(values)


def smallest_gain(
    n: int,
    tolerance: Decimal,
    *,
    two_valued: bool,
    how: str = "median",
    band: Decimal | None = None,
    span: Decimal = Decimal(1),
) -> Decimal | None:
    """The smallest aggregate movement ``n`` pairs could show beyond their band; None when no outcome validates.

    Two-valued (each side ``lo`` or ``lo + span``): every split of the pairs into
    up / unmoved / down is tried, its band computed as the check computes it. A
    continuous metric can show any gain past its band: the band read (else the
    tolerance) is the answer (a gain must exceed it).
    """
    if n <= 0:
        return None
    if not two_valued:
        return band if band is not None else tolerance
    if n > ENUMERATED:
        return span / 2 if span / 2 > tolerance else None
    best: Decimal | None = None
    for up in range(1, n + 1):
        for down in range(0, n - up + 1):
            still = n - up - down
            moves = [span] * up + [Decimal(0)] * still + [-span] * down
            gain = _aggregate(moves, how)
            bar = tolerance if n < MIN_SPREAD_PAIRS else max(tolerance, (max(moves) - min(moves)) / 2)
            if gain > bar and (best is None or gain < best):
                best = gain
    return best


def two_valued(spec: Mapping[str, Any], values: Iterable[Any]) -> bool:
    """Whether the metric takes two values: a declared scale of one step, else every value seen is 0 or 1."""
    scale = spec.get("scale") if isinstance(spec.get("scale"), dict) else None
    if scale and scale.get("step") is not None and scale.get("min") is not None and scale.get("max") is not None:
        try:
            return Decimal(str(scale["max"])) - Decimal(str(scale["min"])) == Decimal(str(scale["step"]))
        except ArithmeticError:
            return False
    numbers = [to_number(v) for v in values]
    numbers = [Decimal(str(v)) for v in numbers if v is not None]
    return bool(numbers) and all(v in (Decimal(0), Decimal(1)) for v in numbers)


def _objective(terms: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for metric_id, spec in specs(terms).items():
        if spec.get("role") == "objective" and (spec.get("scope") or "run") == "run" and spec.get("kind") != "reported":
            return metric_id, dict(spec)
    return None


def gain_words(n: int, unit: str, smallest: Decimal | None, band: Decimal, *, binary: bool) -> str:
    """ "3 pairs of a 0/1 metric: a gain of 0.5 or less cannot validate (the smallest that can is 0.667)"."""
    what = f"{n} {unit}{'s' if n != 1 else ''}" + (" of a 0/1 metric" if binary else "")
    if smallest is None:
        return f"{what}: no gain can validate (the band ±{_fmt(band)} is wider than the metric's range)"
    return f"{what}: a gain of {_fmt(band)} or less cannot validate (the smallest that can is {_fmt(smallest)})"


def _held(frozen: Mapping[str, Any] | None) -> dict[str, int]:
    held = (frozen or {}).get("heldOut") or {}
    return {"k": int(held.get("k") or 0), "n": int(held.get("n") or 0)}


def check_power(terms: Mapping[str, Any], pairs: list[Any], verdict: Any, frozen: Mapping[str, Any] | None) -> dict:
    """The check's power, recorded beside its verdict (see the module's docstring)."""
    from evolution.presets import pairs as P

    held = _held(frozen)
    trials = int(((frozen or {}).get("terms") or {}).get("trials") or 1)
    inputs = len({p.slot for p in pairs})
    found = _objective(terms)
    reading = None
    if found is not None:
        reading = P.read_metric(found[0], found[1], terms, pairs)
    n = reading.pairs if reading is not None else 0
    band = reading.band if reading is not None else Decimal(0)
    binary = False
    smallest = None
    if reading is not None and n:
        values = [
            side.vector.get(found[0])
            for p in pairs
            for side in (p.baseline, p.candidate)
            if side.vector and side.vector.get(found[0]) is not None
        ]
        binary = two_valued(found[1], values)
        how = "mean" if found[1].get("aggregate") == "mean" else "median"
        smallest = smallest_gain(n, reading.tolerance, two_valued=binary, how=how, band=band)
    held_pairs = [p for p in pairs if p.held_out]
    held_answer = None
    if held_pairs:
        alone = P.engine_verdict(terms, held_pairs)
        held_answer = {
            "verdict": alone.verdict,
            "reason": alone.reason,
            "pairs": len(held_pairs),
            "inputs": len({p.slot for p in held_pairs}),
        }
    seen_only = held["n"] > 0 and held["k"] == 0
    said = []
    if found is not None and n:
        said.append(gain_words(n, "pair", smallest, band, binary=binary))
    elif found is not None:
        said.append(f"no pair measured {found[0]} on both sides")
    said.append(f"held-out {held['k']} of {held['n']}")
    if held_answer is not None:
        said.append(f"on the {held_answer['inputs']} held-out inputs alone: {held_answer['verdict']}")
    if seen_only:
        said.append(SEEN_ONLY)
    return {
        "metric": found[0] if found else None,
        "pairs": n,
        "inputs": inputs,
        "trials": trials,
        "heldOut": held,
        "heldOutAnswer": held_answer,
        "band": _plain(band),
        "twoValued": binary,
        "smallestGain": _plain(smallest),
        "seenOnly": seen_only,
        "words": "; ".join(said),
    }


def planned_power(terms: Mapping[str, Any], frozen: Mapping[str, Any] | None) -> dict | None:
    """The check's power before it runs, from the frozen set (the decide card); None with no set.

    The tolerance is read at the frozen incumbent scores' mean; the metric is
    two-valued when every frozen score of it is 0 or 1.
    """
    slots = list((frozen or {}).get("slots") or [])
    found = _objective(terms)
    if not slots or found is None:
        return None
    metric_id, spec = found
    trials = int(((frozen or {}).get("terms") or {}).get("trials") or 1)
    n = len(slots) * trials
    scores = [((s.get("score") or {}).get("vector") or {}).get(metric_id) for s in slots]
    scores = [Decimal(str(to_number(v))) for v in scores if to_number(v) is not None]
    base = sum(scores, Decimal(0)) / len(scores) if scores else None
    tolerance = tolerance_band(spec, terms, base)
    binary = (
        two_valued(spec, scores) if scores else bool(spec.get("unit") == "share" and spec.get("aggregate") == "mean")
    )
    how = "mean" if spec.get("aggregate") == "mean" else "median"
    smallest = smallest_gain(n, tolerance, two_valued=binary, how=how)
    band = tolerance if n < MIN_SPREAD_PAIRS or not binary else max(tolerance, Decimal("0.5"))
    held = _held(frozen)
    said = [gain_words(n, "pair", smallest, band, binary=binary), f"held-out {held['k']} of {held['n']}"]
    if held["n"] and not held["k"]:
        said.append("every input is one the proposer was shown: it can validate on seen inputs only")
    return {
        "metric": metric_id,
        "pairs": n,
        "heldOut": held,
        "band": _plain(band),
        "twoValued": binary,
        "smallestGain": _plain(smallest),
        "seenOnly": bool(held["n"] and not held["k"]),
        "words": "; ".join(said),
    }


def chance_of_firing(runs: int, min_failures: int, rate: Decimal | float) -> Decimal:
    """P(at least ``min_failures`` bad of ``runs``) at failure rate ``rate``: the binomial tail, exact."""
    p = Fraction(str(rate))
    if min_failures <= 0:
        return Decimal(1)
    if min_failures > runs:
        return Decimal(0)
    q = 1 - p
    tail = sum((comb(runs, k) * p**k * q ** (runs - k) for k in range(min_failures, runs + 1)), Fraction(0))
    return Decimal(tail.numerator) / Decimal(tail.denominator)


def watch_power(runs: int, min_failures: int, rate: Decimal | None, *, rated_over: int = 0) -> dict:
    """A repair watch's power: its window, its count, and how often it fires on an unchanged entity at ``rate``."""
    said = f"{runs} runs per window, {min_failures} bad regress"
    chance = None
    if rate is not None:
        chance = chance_of_firing(runs, min_failures, rate)
        over = f" over its last {rated_over} graded runs" if rated_over else ""
        said += (
            f": at the entity's own failure rate {_fmt(Decimal(str(rate)))}{over} an unchanged entity regresses "
            f"{round(float(chance) * 100)}% of the time"
        )
    return {
        "runsPerWindow": runs,
        "minFailures": min_failures,
        "failureRate": _plain(Decimal(str(rate))) if rate is not None else None,
        "chance": _plain(chance),
        "words": said,
    }
