"""What the Settings pages read: an entity's policy file, the action log, a write's family."""

from __future__ import annotations

from evolution.models import ActionLog
from evolution.steering.settings.base import JUDGED
from grading.models import Entity
from singularity.brain.loader import MANIFEST_PATH


def policy_path(target: Entity | None) -> str:
    """Where a person edits the tier: the entity's Policy view, or Settings → Policy defaults."""
    from django.urls import reverse

    if target is None:
        return reverse("evolution:settings")
    return reverse("evolution:entity-policy", args=[target.target_kind, target.slug])


def actions(target: Entity | None = None, *, manifest: bool = False, limit: int = 50) -> list[ActionLog]:
    """Action-log rows newest first: the entity's, the manifest's (``manifest=True``), or everyone's."""
    rows = ActionLog.objects.all()
    if target is not None:
        rows = rows.filter(entity=target)
    elif manifest:
        rows = rows.filter(subject=MANIFEST_PATH)
    return list(rows.order_by("-created_at", "-id")[:limit])


def widens_family(key: str) -> bool:
    """Whether the dashboard saves ``key`` through loop_widen's op (an autonomy, perimeter or switch knob)."""
    return key in JUDGED or key == "loop.enabled" or key.startswith("loop.autonomy.")
