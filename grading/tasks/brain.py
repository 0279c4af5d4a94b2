"""Celery task: keep the Entity rows in step with the brain's repository."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from grading import sync


@shared_task(ignore_result=True)
def sync_brain() -> dict[str, Any]:
    """Fetch and load the brain's head, write the entity rows; return the sync's summary."""
    return sync.sync_brain().summary()
