"""Ideas: a person's hypothesis for one entity, queued first in first out (issue 6; owned by the ideas engineer)."""

from __future__ import annotations

from typing import Any


def next_idea(entity: Any) -> Any | None:
    """The entity's oldest queued, approved idea, or None."""
    return None


def hear_back(cycle: Any) -> None:
    """Tell an idea's author how its cycle settled (called by cycles.settle)."""
    return None
