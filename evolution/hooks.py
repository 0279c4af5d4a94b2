"""Where the loop plugs into the layers below it (called once from AppConfig.ready)."""

from __future__ import annotations


def connect() -> None:
    """Register the loop's listeners with grading and its card handlers with hitl."""
