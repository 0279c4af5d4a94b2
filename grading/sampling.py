"""Which finished executions get graded: ``sample.rate`` by a hash of the id, ``sample.maxPerDay`` per entity per day.

The rate verdict is a pure function of the execution id (SHA-256 of its text,
first 8 bytes as an unsigned integer, sampled when below ``rate × 2^64``), so
a retry or a replay asking again gets the same answer. The ceiling is one
``SampleDay`` row per entity per calendar day in ``settings.TIME_ZONE``,
taken with a conditional ``UPDATE … WHERE booked < cap`` (a batch locks the
row once and raises it by what fits, ``take_slots``): two workers booking at
once can never exceed it. An unattended entity (a scheduled scenario, a
heartbeat, a chat role) graded by a judge owes a ceiling; with none at any
tier it is not graded at all.
"""

from __future__ import annotations

import hashlib
import zoneinfo
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from grading.models import Entity, Execution, SampleDay

Sampling = Execution.Sampling

_SPACE = 2**64


def in_rate(execution_id: Any, rate: float | int | Decimal | None) -> bool:
    """Return True when the execution falls inside ``rate`` (0..1); the same id always gets the same answer."""
    share = Decimal(1) if rate is None else Decimal(repr(rate)) if isinstance(rate, float) else Decimal(rate)
    if share >= 1:
        return True
    if share <= 0:
        return False
    digest = hashlib.sha256(str(execution_id).encode()).digest()
    return Decimal(int.from_bytes(digest[:8], "big")) < share * _SPACE


def calendar_day(moment: datetime | None = None) -> date:
    """Return the calendar day of ``moment`` (default now) in the configured time zone."""
    moment = moment or timezone.now()
    return moment.astimezone(zoneinfo.ZoneInfo(settings.TIME_ZONE)).date()


def max_per_day(entity: Entity) -> int | None:
    """Return the resolved ``evaluation.sample.maxPerDay`` of the entity, or None when no tier sets one."""
    cap = (entity.evaluation().get("sample") or {}).get("maxPerDay")
    return None if cap is None else int(cap)


def method_of(entity: Entity) -> str:
    """Return the resolved ``evaluation.method`` name ("default" when unset)."""
    return str(entity.evaluation().get("method") or "default")


def owes_ceiling(entity: Entity) -> bool:
    """Return True when the entity must declare ``maxPerDay`` to be graded: unattended and graded by a judge."""
    return entity.unattended and method_of(entity) != "none"


def take_slot(entity: Entity, day: date, cap: int | None) -> bool:
    """Count one booking on ``day`` for the entity; return False (counting nothing) when ``cap`` is reached.

    With no cap the booking is counted all the same, so a ceiling added later
    in the day sees what was already booked.
    """
    with transaction.atomic():
        if not SampleDay.objects.filter(entity=entity, day=day).exists():
            try:
                with transaction.atomic():
                    SampleDay.objects.create(entity=entity, day=day, booked=0)
            except IntegrityError:
                pass  # Another booking created the row first; the UPDATE below counts against it.
        rows = SampleDay.objects.filter(entity=entity, day=day)
        if cap is not None:
            rows = rows.filter(booked__lt=cap)
        return rows.update(booked=F("booked") + 1) == 1


def free_slot(entity_id: int, day: date) -> bool:
    """Give back one booking on ``day``; return False when there was none to give back."""
    return SampleDay.objects.filter(entity_id=entity_id, day=day, booked__gt=0).update(booked=F("booked") - 1) == 1


def booked_on(entity: Entity, day: date) -> int:
    """Return how many slots the entity has booked on ``day``."""
    row = SampleDay.objects.filter(entity=entity, day=day).first()
    return row.booked if row else 0


def take_slots(entity: Entity, day: date, cap: int | None, wanted: int) -> int:
    """Count up to ``wanted`` bookings on ``day`` for the entity at once; return how many it counted.

    The batch form of ``take_slot``: the day's row is locked once
    (``SELECT … FOR UPDATE``, inside the caller's transaction) and raised
    once by what fits under ``cap`` — so concurrent batches, and single
    bookings taking one slot meanwhile, never exceed it. With no cap every
    booking is counted.
    """
    if wanted <= 0:
        return 0
    with transaction.atomic(savepoint=False):
        row = SampleDay.objects.select_for_update().filter(entity=entity, day=day).first()
        if row is None:
            try:
                with transaction.atomic():
                    SampleDay.objects.create(entity=entity, day=day, booked=0)
            except IntegrityError:
                pass  # Another booking created the row first; lock the row it made.
            row = SampleDay.objects.select_for_update().get(entity=entity, day=day)
        granted = wanted if cap is None else max(0, min(wanted, cap - row.booked))
        if granted:
            SampleDay.objects.filter(pk=row.pk).update(booked=F("booked") + granted)
        return granted


def rate_verdict(execution: Execution, entity: Entity) -> str | None:
    """Return the verdict ``decide`` reaches before the ceiling, or None when the run is in the sample and needs a slot.

    OFF, LOOP_LAUNCHED, SKIPPED_NO_CEILING or SKIPPED_RATE — the rules of
    ``decide`` up to ``maxPerDay``, with no query.
    """
    if not entity.evaluation_enabled:
        return Sampling.OFF
    if execution.loop_launched:
        return Sampling.LOOP_LAUNCHED
    if max_per_day(entity) is None and owes_ceiling(entity):
        return Sampling.SKIPPED_NO_CEILING
    rate = (entity.evaluation().get("sample") or {}).get("rate")
    if not in_rate(execution.pk, rate):
        return Sampling.SKIPPED_RATE
    return None


def decide(execution: Execution, entity: Entity | None = None, *, day: date | None = None) -> str:
    """Return the ``Execution.Sampling`` verdict for a finished execution, taking a ``maxPerDay`` slot when SAMPLED.

    OFF when grading is off, LOOP_LAUNCHED for the loop's own replays (their
    cycle books them), SKIPPED_NO_CEILING for an unattended judged entity with
    no ceiling at any tier, SKIPPED_RATE outside ``sample.rate``, SKIPPED_CAP
    when the day's ceiling is reached, SAMPLED otherwise (one slot counted on
    ``day``, default today in the configured time zone). Call it inside the
    transaction that books the grade, so the slot and the booking commit together.
    """
    entity = entity or execution.entity
    verdict = rate_verdict(execution, entity)
    if verdict is not None:
        return verdict
    if not take_slot(entity, day or calendar_day(), max_per_day(entity)):
        return Sampling.SKIPPED_CAP
    return Sampling.SAMPLED
