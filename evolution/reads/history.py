"""loop_history: settled cycles newest first, filtered and paged by an opaque cursor (seed 003, "Reading the history")."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

from django.db.models import Prefetch, Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from evolution.models import Cycle, Lesson, Round
from evolution.reads.status import (
    _live_rounds,
    _newest_round,
    _pr,
    _pr_round,
    _rounds_prefetch,
    entity_named,
    grade_of,
    strength_of,
)
from grading.models import Entity
from singularity.apikit.pagination import PAGE_SIZE, page_size


def parse_instant(value: datetime | str, *, name: str = "since") -> datetime:
    """An ISO 8601 instant (or date, read as its midnight UTC); a naive one is UTC. ValueError naming ``name``."""
    if isinstance(value, datetime):
        instant = value
    else:
        text = str(value).strip()
        try:
            instant = parse_datetime(text)  # type: ignore[assignment]
            if instant is None and (day := parse_date(text)) is not None:
                instant = datetime(day.year, day.month, day.day)
        except ValueError:
            instant = None  # type: ignore[assignment]
        if instant is None:
            raise ValueError(f"{name}: {text!r} is not an ISO 8601 instant (e.g. 2026-09-01T00:00:00Z)")
    return instant if timezone.is_aware(instant) else instant.replace(tzinfo=UTC)


def encode_cursor(cycle: Cycle) -> str:
    """The opaque cursor after ``cycle``: base64 of its opening instant and id."""
    raw = f"{cycle.started_at.astimezone(UTC).isoformat()}|{cycle.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The (started_at, id) a cursor stands for; ValueError naming ``cursor`` when it is not one we gave."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode()).decode()
        instant, _, pk = text.rpartition("|")
        started = datetime.fromisoformat(instant)
        return (started if timezone.is_aware(started) else started.replace(tzinfo=UTC)), int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"cursor: {cursor!r} is not a cursor this history gave (pass nextCursor back)") from None


def history_row(cycle: Cycle) -> dict[str, Any]:
    """One loop_history row (rounds and lessons prefetched): the seed's columns."""
    newest = _newest_round(cycle)
    lessons = list(cycle.lessons.all())
    return {
        "id": cycle.pk,
        "targetKind": cycle.entity.target_kind,
        "targetId": cycle.entity.slug,
        "origin": cycle.origin,
        "status": cycle.status or None,
        "phase": cycle.phase,
        "reason": cycle.reason,
        "startedAt": cycle.started_at,
        "proposedAt": cycle.proposed_at,
        "appliedAt": cycle.applied_at,
        "completedAt": cycle.completed_at,
        "movedAt": cycle.moved_at,
        "rounds": len(_live_rounds(cycle)),
        "pr": _pr(_pr_round(cycle)),
        "decidedBy": newest.decided_by if newest else "",
        "strength": strength_of(cycle),
        "grade": grade_of(cycle),
        "lessonId": max((lesson.pk for lesson in lessons), default=None),
        "spentUsd": cycle.spent_usd,
    }


#: The filters loop_history reads; anything else is refused naming it, never ignored (R20.23).
FILTERS = ("targetKind", "targetId", "feature", "since", "limit", "cursor")


def unknown_filter(names: Any) -> str | None:
    """The refusal of the first parameter of ``names`` that is no loop_history filter, or None when all are."""
    for name in names:
        if name not in FILTERS and name != "format":  # ``format`` is DRF's choice of renderer
            return f"{name}: not a loop_history filter (the filters are {', '.join(FILTERS)})"
    return None


def history(
    target_kind: str | None = None,
    target_id: str | None = None,
    since: datetime | str | None = None,
    limit: Any = PAGE_SIZE,
    cursor: str | None = None,
    feature: str | None = None,
) -> dict[str, Any]:
    """loop_history: {cycles, count, nextCursor}, one row per cycle, newest opening first.

    ``targetKind`` alone narrows to that kind's entities, with ``targetId`` to
    one entity; ``feature`` to the entities the feature ships now (whose file
    is under ``features/<feature>/`` at the call: an entity moved between
    features takes its cycles with it). ``since`` keeps the cycles that moved
    (opened, advanced, settled) at or after it; ``cursor`` is a previous
    answer's ``nextCursor`` (the next, older page; null on the last). Raises
    ValueError naming the parameter (a limit that is no whole number 1–100, a targetId without
    its kind, a bad kind, instant or cursor) and NotFound for an entity that
    does not exist.
    """
    from grading.target_names import target_kind_named

    size = page_size(limit)
    cycles = Cycle.objects.select_related("entity").order_by("-started_at", "-id")
    if target_id:
        cycles = cycles.filter(entity=entity_named(target_kind, target_id))
    elif target_kind:
        cycles = cycles.filter(entity__target_kind=target_kind_named(target_kind))
    if feature not in (None, ""):
        name = str(feature).strip().strip("/")
        if not name or "/" in name:
            raise ValueError(f"feature: {str(feature)[:60]!r} is not a feature's name (the folder under features/)")
        cycles = cycles.filter(entity__path__startswith=f"features/{name}/")
    if since not in (None, ""):
        cycles = cycles.filter(moved_at__gte=parse_instant(since))  # type: ignore[arg-type]
    if cursor:
        started, pk = decode_cursor(cursor)
        cycles = cycles.filter(Q(started_at__lt=started) | Q(started_at=started, pk__lt=pk))
    cycles = cycles.prefetch_related(
        _rounds_prefetch(), Prefetch("lessons", queryset=Lesson.objects.only("pk", "cycle"))
    )
    page = list(cycles[: size + 1])
    more = len(page) > size
    page = page[:size]
    return {
        "cycles": [history_row(c) for c in page],
        "count": len(page),
        "nextCursor": encode_cursor(page[-1]) if more else None,
    }


#: What a history row reads of a cycle beside its entity (``history_row``, and its grade and strength through
#: ``outcomes``): the entity page's rows read no more (the frozen set, the window, the terms stay unread).
ROW_CYCLE_FIELDS = (
    "id",
    "entity",
    "origin",
    "phase",
    "status",
    "reason",
    "started_at",
    "proposed_at",
    "applied_at",
    "completed_at",
    "moved_at",
    "spent_usd",
    "watch_verdict",
    "watch_window",
    "confounded_by",
    "confounded_by_edit",
    "reverted_by_policy",  # status_label: a policy revert says so (R13.19)
)
#: What a history row reads of each round of its cycle: its PR, who decided, the merge and the check's record.
ROW_ROUND_FIELDS = (
    "id",
    "cycle",
    "number",
    "status",
    "pr_number",
    "pr_url",
    "decided_by",
    "merge_sha",
    "check_verdict",
    "check_run_ids",
)


def recent_cycles(entity: Entity, *, limit: int = 20) -> list[dict[str, Any]]:
    """The entity's newest cycles as history rows (the entity page's Cycles section), in three statements.

    Only what a row reads of the cycles and their rounds (``ROW_CYCLE_FIELDS``, ``ROW_ROUND_FIELDS``: no round's
    card, brief or files), and each cycle's entity is ``entity``, not read again with it: read whole, a page of
    them cost half as much again.
    """
    rounds = Round.objects.only(*ROW_ROUND_FIELDS).order_by("number")
    cycles = list(
        Cycle.objects.filter(entity=entity)
        .only(*ROW_CYCLE_FIELDS)
        .order_by("-started_at", "-id")
        .prefetch_related(
            Prefetch("rounds", queryset=rounds), Prefetch("lessons", queryset=Lesson.objects.only("pk", "cycle"))
        )[:limit]
    )
    for cycle in cycles:
        cycle.entity = entity
    return [history_row(c) for c in cycles]
