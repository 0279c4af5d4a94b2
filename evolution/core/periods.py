"""What a ready window owes its period metrics (seed 003, "Period metrics"; CONFORMANCE R5.15, R14.15).

A number that belongs to the entity over a period (``scope: period``) is measured by window(), once per window,
laid over the window's vector. So a READY window that leaves out a declared period id is a load error naming it —
exactly as a measure() that skips a run-scoped id fails the grading — and a window that lays a run-scoped id over
the median is refused too (that number belongs to each run, not to the window).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grading.metrics import specs


def laid_ids(window: Mapping[str, Any]) -> list[str]:
    """The metric ids a window lays over its vector (a list of {id, value} or a mapping)."""
    metrics = window.get("metrics")
    if isinstance(metrics, dict):
        return [str(k) for k in metrics]
    if isinstance(metrics, list):
        return [str(item["id"]) for item in metrics if isinstance(item, dict) and item.get("id") is not None]
    return []


def problem(terms: Mapping[str, Any], window: Any) -> str | None:
    """Why a ready ``window`` cannot be read against the declared metrics, in words naming the ids; None when it
    can (or when it is not ready: only the window a phase acts on owes its period values)."""
    if not isinstance(window, Mapping) or window.get("ready") is False:
        return None
    declared = specs(terms)
    laid = laid_ids(window)
    run_scoped = sorted(mid for mid in laid if mid in declared and declared[mid].get("scope") != "period")
    if run_scoped:
        return (
            f"window() laid run-scoped metric {', '.join(run_scoped)} over the window's vector: a run metric is "
            "measured on each run (measure()), never once per window"
        )
    missing = sorted(mid for mid, spec in declared.items() if spec.get("scope") == "period" and mid not in laid)
    if missing:
        return (
            f"a ready window left out period metric {', '.join(missing)} (declared scope: period): window() "
            "measures it once per window, and the preset's own sampler measures none"
        )
    return None
