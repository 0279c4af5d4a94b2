"""Who answers the two gates: autonomy, the circuit breaker, calibration holds, auto-accept grants (issue 6)."""

from __future__ import annotations

from typing import Any


def paused(entity: Any) -> str | None:
    """The sentence when the breaker has paused the entity (both gates a person's until a re-arm), else None."""
    return None
