"""Celery tasks that run entities: a scheduled tick, and a run someone asked for. Thin wrappers over grading.runners."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

logger = logging.getLogger("grading.tasks.runs")


@shared_task(ignore_result=True)
def run_scheduled_entity(entity_id: int) -> str | None:
    """Run the entity on its schedule; return the execution id, or None when it may not run (logged)."""
    from grading.models import Entity
    from grading.runners import run_entity
    from grading.schedules import switched_off
    from singularity.errors import ConfigError

    entity = Entity.objects.filter(pk=entity_id).first()
    if entity is None or not entity.schedule:
        logger.warning("scheduled run of entity %s skipped: it is gone or has no schedule any more", entity_id)
        return None
    if switched_off(entity):
        logger.info("scheduled run of %s skipped: it is switched off (enabled: false)", entity)
        return None
    try:
        return str(run_entity(entity, source="schedule").pk)
    except ConfigError as exc:
        logger.warning("scheduled run of %s refused: %s", entity, exc)
        return None


@shared_task(ignore_result=True)
def run_entity_task(entity_id: int, input: dict[str, Any] | None, source: str, user_id: int | None) -> str | None:
    """Run the entity once for whoever asked; return the execution id, or None when it may not run (logged)."""
    from django.contrib.auth import get_user_model

    from grading.models import Entity
    from grading.runners import run_entity
    from singularity.errors import ConfigError

    entity = Entity.objects.filter(pk=entity_id).first()
    if entity is None:
        logger.warning("run of entity %s skipped: it is gone", entity_id)
        return None
    user = get_user_model().objects.filter(pk=user_id).first() if user_id is not None else None
    try:
        return str(run_entity(entity, input=input, source=source, user=user).pk)
    except ConfigError as exc:
        logger.warning("run of %s refused: %s", entity, exc)
        return None
