"""The inbox count every page's navigation shows."""

from typing import Any

from hitl.models import Card


def inbox(request: Any) -> dict[str, Any]:
    """Return ``inbox_pending``: how many cards wait for a person (only for a signed-in user)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_pending": Card.objects.filter(status=Card.Status.PENDING).count()}
