"""How the loop points at itself: dashboard addresses, and a proposed file as a card or a page lists it."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def absolute(path: str) -> str:
    """Return a dashboard path on SINGULARITY_PUBLIC_URL ("" base: the path as given); a full URL unchanged."""
    if not path or "://" in path:
        return path
    return (settings.SINGULARITY_PUBLIC_URL or "").rstrip("/") + path


def cycle_path(cycle_id: int) -> str:
    """The cycle's short address on the dashboard (``/evolution/go/cycle:<id>/``)."""
    return f"/evolution/go/cycle:{cycle_id}/"


def file_change(file: dict[str, Any]) -> dict[str, Any]:
    """One proposed file as the card and the story list it: path, its new line count, or deleted."""
    content = file.get("content")
    if content is None:
        return {"path": str(file.get("path", "")), "lines": None, "deleted": True}
    text = str(content)
    return {"path": str(file.get("path", "")), "lines": len(text.splitlines()), "deleted": False}
