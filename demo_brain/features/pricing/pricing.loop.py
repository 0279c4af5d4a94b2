"""Revenue, conversion and margin of one pricing run, read off the run's own output."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def measure(run: Any) -> list[dict[str, Any]]:
    """Return revenue (USD), conversion (0..1) and margin (share of the price kept); [] when the run has no output."""
    output = run.output if isinstance(run.output, dict) else None
    if not output or "revenue" not in output:
        return []
    revenue = float(Decimal(str(output["revenue"])))
    customers = int(output.get("customers") or 0)
    values = [{"id": "revenue", "value": revenue}]
    if customers > 0:
        values.append({"id": "conversion", "value": int(output["buyers"]) / customers})
    if "margin" in output:
        values.append({"id": "margin", "value": float(Decimal(str(output["margin"])))})
    return values
