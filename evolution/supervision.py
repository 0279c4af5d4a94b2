"""Holds, releases, re-arms and dismissed failures (issue 6; owned by the supervision engineer)."""

from __future__ import annotations

from typing import Any


def hold_refusal(entity: Any) -> str | None:
    """The sentence when a hold stands on the entity (or a lock group it is in), else None."""
    return None
