"""Beat's scheduler: django-celery-beat's database scheduler, which also writes beat's pulse at each tick."""

from __future__ import annotations

from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler

from singularity import pulse


class Scheduler(DatabaseScheduler):
    """The database scheduler, saying it is alive (``singularity.pulse``) each time it ticks."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        pulse.beat_ticked()
        return super().tick(*args, **kwargs)
