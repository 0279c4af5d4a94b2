"""Schedules of the brain's entities, kept in django-celery-beat.

Every runnable entity with a ``schedule:`` (every heartbeat, a scheduled
scenario) owns one ``PeriodicTask`` named ``entity:<target_kind>:<slug>``
that enqueues ``grading.tasks.runs.run_scheduled_entity`` with the entity's
id on its cron, in the configured time zone. ``sync_schedules`` makes the
table match the entities: it creates and updates those tasks, removes the
ones whose entity lost its schedule, failed to load or left the brain, and
writes nothing when nothing changed (so the beat scheduler is not woken).
An invalid cron is the brain loader's error to report; here it is skipped
and logged.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from celery.schedules import crontab
from django.conf import settings
from django.db import IntegrityError, transaction
from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

from grading.models import Entity

logger = logging.getLogger("grading.schedules")

TASK = "grading.tasks.runs.run_scheduled_entity"
PREFIX = "entity:"
#: A tick not picked up within this long is dropped: a late heartbeat is not worth a pile of them.
EXPIRE_SECONDS = 300
CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


@dataclass
class ScheduleReport:
    """What one sync did: task names created, updated, removed, and entities skipped with why."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def task_name(entity: Entity) -> str:
    return f"{PREFIX}{entity.target_kind}:{entity.slug}"


def parse_cron(expression: str) -> dict[str, str]:
    """Return the five cron fields of ``expression`` by name; ``ValueError`` when it is not a valid 5-field cron."""
    parts = expression.split()
    if len(parts) != len(CRON_FIELDS):
        raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    fields = dict(zip(CRON_FIELDS, parts, strict=True))
    crontab(**fields)  # raises ValueError for a field celery cannot read
    return fields


def _crontab(fields: dict[str, str]) -> CrontabSchedule:
    """Return the crontab row for ``fields`` in the configured zone, the oldest when two workers made one each."""
    existing = CrontabSchedule.objects.filter(**fields, timezone=settings.TIME_ZONE).order_by("pk").first()
    return existing or CrontabSchedule.objects.create(**fields, timezone=settings.TIME_ZONE)


def switched_off(entity: Entity) -> bool:
    """Whether the entity's frontmatter says ``enabled: false`` (it neither runs nor is scheduled)."""
    return entity.switched_off


def scheduled_entities() -> list[Entity]:
    """Return the entities that may run on a schedule: present, loaded, switched on, with a schedule, not a chat role."""
    found = (
        Entity.objects.filter(present=True, load_error="")
        .exclude(schedule="")
        .exclude(kind=Entity.Kind.ROLE)
        .order_by("target_kind", "slug")
    )
    return [entity for entity in found if not switched_off(entity)]


def sync_schedules() -> ScheduleReport:
    """Make the ``entity:*`` periodic tasks match the entities' schedules; return what changed."""
    report = ScheduleReport()
    wanted: dict[str, tuple[Entity, dict[str, str]]] = {}
    for entity in scheduled_entities():
        name = task_name(entity)
        try:
            wanted[name] = (entity, parse_cron(entity.schedule))
        except ValueError as exc:
            report.skipped[name] = f"schedule {entity.schedule!r}: {exc}"
            logger.warning("%s: not scheduled: schedule %r: %s", entity, entity.schedule, exc)
    with transaction.atomic():
        existing = {
            task.name: task for task in PeriodicTask.objects.select_related("crontab").filter(name__startswith=PREFIX)
        }
        for name, (entity, fields) in wanted.items():
            args = json.dumps([entity.pk])
            task = existing.get(name)
            if task is None:
                try:
                    with transaction.atomic():
                        PeriodicTask.objects.create(
                            name=name,
                            task=TASK,
                            crontab=_crontab(fields),
                            args=args,
                            expire_seconds=EXPIRE_SECONDS,
                            description=f"Run {entity} on its schedule {entity.schedule!r}",
                        )
                except IntegrityError:
                    # Another worker's sync created it a moment ago; the next sync compares it.
                    logger.info("schedules: %s was created by another sync", name)
                    continue
                report.created.append(name)
                continue
            current = task.crontab
            same_cron = (
                current is not None
                and str(current.timezone) == settings.TIME_ZONE
                and all(getattr(current, key) == value for key, value in fields.items())
            )
            if same_cron and task.task == TASK and task.args == args and task.enabled:
                continue
            task.crontab = current if same_cron else _crontab(fields)
            task.task, task.args, task.enabled = TASK, args, True
            task.interval = task.solar = task.clocked = None
            task.expire_seconds = EXPIRE_SECONDS
            task.description = f"Run {entity} on its schedule {entity.schedule!r}"
            task.save()
            report.updated.append(name)
        gone = sorted(set(existing) - set(wanted))
        for name in gone:
            existing[name].delete()
        report.removed.extend(gone)
        if gone:
            PeriodicTasks.update_changed()
    if report.created or report.updated or report.removed:
        logger.info(
            "schedules: %d created, %d updated, %d removed",
            len(report.created),
            len(report.updated),
            len(report.removed),
        )
    return report
