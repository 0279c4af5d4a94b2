"""The demo driver's periodic task (scheduled in singularity.schedule)."""

from __future__ import annotations

from celery import shared_task

from grading.demo import drive_demo


@shared_task(name="grading.tasks.drive_demo", ignore_result=True)
def drive_demo_task() -> int:
    """Start the next demo runs; return how many were started."""
    return drive_demo()
