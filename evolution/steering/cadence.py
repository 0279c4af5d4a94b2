"""The cadence and the windows that wait (seed 003 "Looking on a schedule", "A window that waits — on a person, or
on nothing").

The hourly sweep (``evolution.loop.trigger.sweep``) looks at every entity in
the loop that declares ``loop.trigger.every`` (hours) and whose cadence has
come round (``due``); a look that opens nothing costs nothing but a line in
the log.

The cadence's clock is the entity's last trigger sample
(``WaitingWindow.sampled_at``, written by ``record_window`` whenever the
trigger samples the window: a scheduled look, a landing grade whose window
was sampled, Analyze now). A look is due once that sample is at least
``every`` hours old; the engine looks once an hour, so an ``every`` below 1
is looked at hourly (``manage.py doctor``'s "Loop cadence" says so).

``record_window`` keeps ``WaitingWindow``: what a not-ready window waits on
(its progress, ``awaitingPerson``, its reason) and when its count last moved;
any ready answer ends the wait. Each write lands only over an older sample.
A not-ready window whose ``progress.have`` has not moved for
``loop.windowStalledAfterHours`` (default 336; 0 never) is a stall
(``stalled``). ``check_window`` refuses a ready window that names
``awaitingPerson`` (a load error: ``RuleError``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from evolution.core import cycles, periods
from evolution.core.errors import RuleError
from evolution.models import Cycle, WaitingWindow
from grading.models import Entity

log = logging.getLogger(__name__)

#: The sweep's own cadence: the floor on how fine a trigger.every is honoured.
SWEEP_HOURS = 1.0
#: A look is due this much early, so an hourly sweep that fires a little early never skips an hour.
SLACK = timedelta(minutes=5)
#: loop.windowStalledAfterHours when no tier says (the engine default is the same).
STALL_HOURS = 336
#: awaitingPerson.what is one short sentence for a person.
MAX_WHAT_CHARS = 200


# --- Reading the terms --------------------------------------------------------------


def every_hours(entity: Entity) -> float | None:
    """The entity's resolved ``loop.trigger.every`` in hours, or None when it declares none (or an unreadable one)."""
    every = (cycles.loop_terms(entity).get("trigger") or {}).get("every")
    if every is None or isinstance(every, bool):
        return None
    try:
        hours = float(every)
    except (TypeError, ValueError):
        return None
    return hours if hours > 0 else None


def period(entity: Entity) -> timedelta | None:
    """How often the sweep looks at ``entity``: its every, but never finer than the sweep's hour (None: never)."""
    hours = every_hours(entity)
    if hours is None:
        return None
    return timedelta(hours=max(hours, SWEEP_HOURS))


def stall_after(entity: Entity) -> timedelta | None:
    """``loop.windowStalledAfterHours`` as a span (default 336 h), or None when it is 0 (never a stall)."""
    hours = cycles.loop_terms(entity).get("windowStalledAfterHours", STALL_HOURS)
    if hours is None:
        hours = STALL_HOURS
    hours = float(hours)
    return timedelta(hours=hours) if hours > 0 else None


# --- Waiting windows ----------------------------------------------------------------


def check_window(entity: Entity, window: Any) -> None:
    """Raise RuleError naming window() when its answer cannot be recorded.

    A ready window carrying ``awaitingPerson`` is a load error, and so is an
    ``awaitingPerson`` that is not {what (one sentence, at most 200
    characters), url?} or a ``progress`` that is not {have, need, unit?}
    with whole numbers.
    """
    if not isinstance(window, dict):
        raise RuleError(f"{entity}: window() must answer an object, not {window!r}")
    owed = periods.problem(entity.terms or {}, window)
    if owed:
        raise RuleError(f"{entity}: {owed}")
    awaiting = window.get("awaitingPerson")
    if awaiting is not None:
        if window.get("ready") is not False:
            raise RuleError(
                f"{entity}: window() answered ready with awaitingPerson ({awaiting!r}): "
                "awaitingPerson belongs on a not-ready answer only"
            )
        what = awaiting.get("what") if isinstance(awaiting, dict) else None
        if not isinstance(what, str) or not what.strip():
            raise RuleError(f"{entity}: window() awaitingPerson must be {{what, url?}}, not {awaiting!r}")
        if len(what.strip()) > MAX_WHAT_CHARS:
            raise RuleError(
                f"{entity}: window() awaitingPerson.what is {len(what.strip())} characters "
                f"(at most {MAX_WHAT_CHARS}: one short sentence)"
            )
        url = awaiting.get("url")
        if url is not None and not isinstance(url, str):
            raise RuleError(f"{entity}: window() awaitingPerson.url must be a string, not {url!r}")
    progress = window.get("progress")
    if progress is not None:
        if not isinstance(progress, dict):
            raise RuleError(f"{entity}: window() progress must be {{have, need, unit}}, not {progress!r}")
        for key in ("have", "need"):
            value = progress.get(key)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RuleError(
                    f"{entity}: window() progress.{key} must be a whole number of at least 0, not {value!r}"
                )


def _waiting_fields(window: dict[str, Any]) -> dict[str, Any]:
    """What a not-ready window's record keeps: have, need, unit, reason, awaiting_person."""
    progress = window.get("progress") or {}
    awaiting = window.get("awaitingPerson")
    if isinstance(awaiting, dict):
        awaiting = {"what": awaiting["what"].strip(), **({"url": awaiting["url"]} if awaiting.get("url") else {})}
    return {
        "have": int(progress.get("have", 0)),
        "need": int(progress.get("need", 0)),
        "unit": str(progress.get("unit") or "")[:100],
        "reason": str(window.get("reason") or ""),
        "awaiting_person": awaiting or None,
    }


def record_window(entity: Entity, window: dict[str, Any], now: datetime | None = None) -> WaitingWindow | None:
    """Record what the trigger's window answered at ``now``; return the entity's record (None when none is kept).

    A not-ready answer opens a wait or updates it (``moved_at`` moves only
    when ``progress.have`` changed, or when a cycle started since the wait's
    clock did: a new wait after a cycle starts its own clock); a ready answer
    ends any wait. The record also stamps the sample (``sampled_at``: the
    cadence's clock). A sample older than the one recorded changes nothing.
    Raises RuleError (see ``check_window``) before writing anything.
    """
    check_window(entity, window)
    now = now or timezone.now()
    ready = window.get("ready") is not False
    fields = _waiting_fields(window) if not ready else {}
    with transaction.atomic():
        row = WaitingWindow.objects.select_for_update().filter(entity=entity).first()
        if row is None:
            created = _create(entity, fields, ready=ready, now=now)
            if created is not None:
                return created
            row = WaitingWindow.objects.select_for_update().get(entity=entity)
        if row.sampled_at > now:
            log.debug("loop: %s: a window sampled at %s lands behind a newer one; kept", entity, now)
            return row
        update: dict[str, Any] = {"sampled_at": now}
        if ready:
            if row.ended_at is None:
                update["ended_at"] = now
        else:
            fresh = row.ended_at is not None or _cycle_since(entity, row.moved_at, now)
            if fresh or fields["have"] != row.have:
                update["moved_at"] = now
            update.update(fields, ended_at=None)
        WaitingWindow.objects.filter(pk=row.pk).update(**update)
        for name, value in update.items():
            setattr(row, name, value)
    return row


def _create(entity: Entity, fields: dict[str, Any], *, ready: bool, now: datetime) -> WaitingWindow | None:
    """The entity's first record (a ready sample is kept ended: it still stamps the cadence), or None on a race."""
    try:
        with transaction.atomic():
            return WaitingWindow.objects.create(
                entity=entity, moved_at=now, sampled_at=now, ended_at=now if ready else None, **fields
            )
    except IntegrityError:
        return None  # a rival sampler wrote the entity's record first; the caller updates it


def _cycle_since(entity: Entity, since: datetime, now: datetime) -> bool:
    """Whether a cycle of ``entity`` whose analysis ran started after ``since`` (and by ``now``)."""
    return Cycle.objects.filter(entity=entity, analysed=True, started_at__gt=since, started_at__lte=now).exists()


def waiting(row: WaitingWindow | None) -> bool:
    """Whether ``row`` records a wait still standing."""
    return row is not None and row.ended_at is None


def stalled(entity: Entity, row: WaitingWindow | None, now: datetime) -> bool:
    """Whether the entity's standing wait has not moved for longer than windowStalledAfterHours.

    Never for a wait that names a person (that one is the person's), one
    with no progress to count, or when the knob is 0.
    """
    if not waiting(row) or row.awaiting_person or not row.need:
        return False
    after = stall_after(entity)
    return after is not None and now - row.moved_at > after


def drop_stale(now: datetime | None = None) -> int:
    """Drop the records of entities out of the loop or gone, and end the waits of paused or held entities.

    A pause never counts toward a stall: the next not-ready sample after it
    starts a new wait. Returns how many records were dropped or ended.
    """
    from evolution.steering import autonomy, supervision

    now = now or timezone.now()
    gone, _ = WaitingWindow.objects.exclude(entity__loop_enabled=True, entity__present=True).delete()
    standing = [row.entity for row in WaitingWindow.objects.filter(ended_at__isnull=True).select_related("entity")]
    paused = sorted(set(autonomy.paused_many(standing)) | set(supervision.holds_many(standing))) if standing else []
    ended = WaitingWindow.objects.filter(entity_id__in=paused, ended_at__isnull=True).update(ended_at=now)
    if gone or ended:
        log.info(
            "loop: the sweep dropped %d waiting windows (out of the loop or gone) and ended %d (paused)", gone, ended
        )
    return gone + ended


# --- The scheduled look -------------------------------------------------------------


def due(now: datetime | None = None) -> list[Entity]:
    """The entities in the loop whose trigger.every has come round at ``now``, in a fixed number of queries."""
    now = now or timezone.now()
    entities = Entity.objects.filter(loop_enabled=True, present=True).select_related("waiting_window").order_by("pk")
    answer = []
    for entity in entities:
        span = period(entity)
        if span is None:
            continue
        row = window_of(entity)
        if row is None or row.sampled_at <= now - span + SLACK:
            answer.append(entity)
    return answer


def window_of(entity: Entity) -> WaitingWindow | None:
    """The entity's waiting-window record (read through ``select_related("waiting_window")``), or None."""
    try:
        return entity.waiting_window
    except WaitingWindow.DoesNotExist:
        return None
