"""Accuracy of the support urgency: the run's label against the ticket's own.

Every ticket the demo driver sends carries its expected label under
``_expected`` in the input, so a live run and a replay of it are graded
the same way.
"""

from __future__ import annotations

from typing import Any


def _label(value: Any) -> str:
    """The label as compared: trimmed, lower case; empty when there is none."""
    return value.strip().lower() if isinstance(value, str) else ""


def measure(run: Any) -> list[dict[str, Any]]:
    """Return [{"id": "accuracy", "value": 1.0 or 0.0}]; [] when the ticket carries no label.

    An unlabelled ticket cannot be scored, and returning nothing makes the
    grading say so instead of inventing a value.
    """
    expected = _label((run.input or {}).get("_expected"))
    if not expected:
        return []
    output = run.output if isinstance(run.output, dict) else {}
    answered = _label(output.get("result"))
    return [{"id": "accuracy", "value": 1.0 if answered == expected else 0.0}]
