"""Template tags for chat roles: the role's episode list on its entity page, a duration as people read it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template

from grading.chat.shape import episodes_of, rows
from grading.models import Entity
from grading.ratings import human_metrics

register = template.Library()

#: The entity page lists at most this many of the role's newest episodes.
EPISODES_SHOWN = 30


@register.filter
def duration(value: timedelta | None) -> str:
    """Return a duration as people read it: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    if value is None:
        return ""
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes} min"
    if days < 1:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{days} d {hours % 24} h" if hours % 24 else f"{days} d"


@register.inclusion_tag("grading/partials/episodes.html")
def role_episodes(entity: Entity) -> dict[str, Any]:
    """The role's newest episodes: shape, grade, every number on the grade, people's ratings beside them."""
    from grading.views import rated_on_scale, show_metric

    specs = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    listed = rows(list(episodes_of(entity)[:EPISODES_SHOWN]))
    shown = [
        {
            "row": row,
            "metrics": [(mid, show_metric(specs.get(mid) or {}, value)) for mid, value in sorted(row.metrics.items())],
            "people": [(mid, rated_on_scale(specs.get(mid) or {}, value)) for mid, value in sorted(row.people.items())],
        }
        for row in listed
    ]
    return {"entity": entity, "rows": shown, "rateable": bool(human_metrics(entity))}
