"""When an idle evolve entity's next cycle can open, in its cadence's two clocks: the grades its window still needs
and the hours to its next scheduled look — "7 of 10 graded runs since the previous cycle's window; next look in
3 grades / 2 h" (seed 003, "Improving what already works": trigger.windowRuns is the cadence, trigger.every puts
the same look on a clock).

What the fleet, the entity page and loop_status say of an evolve entity no cycle holds. The count is the preset's
(every grade since the previous cycle's mark, as ``evolve.evolve_window`` counts it); read for the rows shown, in
one query for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from math import ceil

from django.db.models import Count, Q

from evolution.presets import evolve
from evolution.presets.resolve import preset_of
from evolution.steering import cadence, groups
from grading.cards import observed
from grading.models import Entity, Grade


def next_looks(entities: Iterable[Entity], *, now: datetime) -> dict[int, str]:
    """For each evolve entity among ``entities``: its window's count and its next look, as one sentence."""
    evolving = [e for e in entities if preset_of(e) == "evolve"]
    if not evolving:
        return {}
    marks = evolve.marks([e.pk for e in evolving])
    starts: dict[int, datetime | None] = {}
    for entity in evolving:
        start, changed = marks.get(entity.pk), groups.changed_at(entity)
        starts[entity.pk] = changed if changed is not None and (start is None or changed > start) else start
    since = Q()
    for pk, start in starts.items():
        since |= Q(entity_id=pk, graded_at__gt=start) if start is not None else Q(entity_id=pk)
    grades = Grade.objects.filter(since, status=Grade.Status.GRADED, execution__loop_launched=False, graded_at__lte=now)
    counts = dict(observed(grades, now=now).values("entity_id").annotate(n=Count("pk")).values_list("entity_id", "n"))
    return {e.pk: sentence(e, min(counts.get(e.pk, 0), evolve.WINDOW_BOUND), now=now) for e in evolving}


def sentence(entity: Entity, have: int, *, now: datetime) -> str:
    """The window's count, then what opens the next cycle: the grades still to land and the scheduled look."""
    need = evolve.cadence(entity.terms or {})
    counted = f"{have} of {need} graded runs since the previous cycle's window"
    if have >= need:
        return f"{counted}: the window is ready, and the next grade or look opens a cycle."
    grades = need - have
    clocks = [f"{grades} grade{'s' if grades != 1 else ''}"]
    hours = _hours_to_look(entity, now)
    if hours is not None:
        clocks.append(hours)
    return f"{counted}; next look in {' / '.join(clocks)}.".replace("/ the next", "/ at the next")


def _hours_to_look(entity: Entity, now: datetime) -> str | None:
    """The time to the entity's next scheduled look (``trigger.every``), or None when it looks on grades only."""
    span = cadence.period(entity)
    if span is None:
        return None
    row = cadence.window_of(entity)
    left = (row.sampled_at + span - now) if row is not None else timedelta(0)
    if left <= timedelta(minutes=1):
        return "the next hourly sweep"
    if left < timedelta(hours=1):
        return f"{ceil(left.total_seconds() / 60)} min"
    if left < timedelta(hours=48):
        return f"{ceil(left.total_seconds() / 3600)} h"
    return f"{ceil(left.total_seconds() / 86400)} d"
