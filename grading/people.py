"""People's numbers for runs: which metrics people rate, on what scale, and the median of their ratings.

Read by the metric vector (people over the judge), calibration, the rating
cards and the pages; written only through the door, ``grading.ratings.rate``.
Nothing here books, asks or writes, so every grading module may import it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from grading.models import Entity, Execution, Rating
from singularity.brain.defaults import DEFAULT_HUMAN_SCALE


def human_rated(spec: dict[str, Any] | None) -> bool:
    """True for a metric people rate: ``kind: reported``, or ``kind: judged`` with ``human: true``."""
    if not spec:
        return False
    return spec.get("kind") == "reported" or (spec.get("kind") == "judged" and spec.get("human") is True)


def human_metrics(entity: Entity) -> dict[str, dict[str, Any]]:
    """Return the entity's human-rated metrics by id, in declaration order."""
    metrics = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    return {metric_id: spec for metric_id, spec in metrics.items() if human_rated(spec)}


def scale_of(spec: dict[str, Any]) -> dict[str, Any]:
    """Return the scale a person rates ``spec`` on: its own, or the engine's 1–5 rubric when it declares none."""
    return dict(spec.get("scale") or DEFAULT_HUMAN_SCALE)


def people_value(execution: Execution, metric_id: str) -> float | None:
    """Return people's number for one metric of one run on 0..1: the median of their ratings; None if nobody rated."""
    values = list(Rating.objects.filter(execution=execution, metric_id=metric_id).values_list("normalized", flat=True))
    return statistics.median(values) if values else None


def people_values(execution_ids: Iterable[Any]) -> dict[str, dict[str, float]]:
    """Return people's medians for many runs in one query: ``{str(execution_id): {metric_id: median on 0..1}}``."""
    collected: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows = Rating.objects.filter(execution_id__in=list(execution_ids)).values_list(
        "execution_id", "metric_id", "normalized"
    )
    for execution_id, metric_id, normalized in rows:
        collected[str(execution_id)][metric_id].append(normalized)
    return {
        run: {metric: statistics.median(values) for metric, values in by_metric.items()}
        for run, by_metric in collected.items()
    }


def on_scale(spec: dict[str, Any], normalized: float | None) -> Decimal | None:
    """Return a 0..1 value back on the metric's own scale (for showing a median as people read it)."""
    if normalized is None:
        return None
    scale = scale_of(spec)
    low, high = Decimal(str(scale["min"])), Decimal(str(scale["max"]))
    shown = low + (high - low) * Decimal(repr(float(normalized)))
    return shown.quantize(Decimal("0.01")).normalize() if shown != shown.to_integral_value() else shown.quantize(1)


def rubric_words(scale: dict[str, Any], value: Decimal) -> str:
    """Return the rubric's words for ``value``: a step ("3") or an inclusive band ("2..4"); "" when none says."""
    for key, words in (scale.get("labels") or {}).items():
        low, _, high = str(key).partition("..")
        try:
            lo, hi = Decimal(low), Decimal(high or low)
        except ArithmeticError:
            continue
        if lo <= value <= hi:
            return str(words)
    return ""
