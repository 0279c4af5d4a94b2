"""The inbox count every page's navigation shows."""

from typing import Any

from django.utils.functional import SimpleLazyObject

from hitl.models import Card


def inbox(request: Any) -> dict[str, Any]:
    """Return ``inbox_pending``: how many cards wait for a person (only for a signed-in user).

    Counted when a template first reads it, once a response: a partial that shows no navigation (the fleet's
    HTMX table every 10 s) sends no count."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_pending": SimpleLazyObject(lambda: Card.objects.filter(status=Card.Status.PENDING).count())}
