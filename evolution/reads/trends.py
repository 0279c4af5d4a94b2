"""The loop's changes to an entity as the entity page's plots mark them: each merged cycle and each merged revert.

Registered with ``grading.trends`` by ``evolution.hooks``; one query, the newest
``MAX_MARKERS`` rounds, whatever the entity's history.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.urls import reverse

from evolution.models import Round
from grading.models import Entity
from grading.trends import MAX_MARKERS, TrendMarker


def trend_markers(entity: Entity, since: datetime) -> list[TrendMarker]:
    """Return a marker per cycle of ``entity`` merged since ``since`` and per revert of one merged since."""
    rows = (
        Round.objects.filter(cycle__entity=entity, status=Round.Status.MERGED)
        .filter(Q(cycle__merged_at__gte=since) | Q(revert_outcome="merged", revert_merged_at__gte=since))
        .order_by("-cycle__merged_at")
        .values_list(
            "cycle_id", "pr_number", "cycle__merged_at", "revert_outcome", "revert_pr_number", "revert_merged_at"
        )
    )[:MAX_MARKERS]
    markers = []
    for cycle_id, pr, merged_at, revert_outcome, revert_pr, reverted_at in rows:
        href = reverse("evolution:cycle", args=[cycle_id])
        if merged_at is not None:
            what = f"merged PR #{pr}" if pr else "merged"
            markers.append(TrendMarker(merged_at, f"cycle {cycle_id} {what}", "merge", href))
        if revert_outcome == "merged" and reverted_at is not None:
            what = f"merged PR #{revert_pr}" if revert_pr else "merged"
            markers.append(TrendMarker(reverted_at, f"revert of cycle {cycle_id} {what}", "revert", href))
    return markers
