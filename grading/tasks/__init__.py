"""Celery tasks of the grading app, one module per topic; Celery finds them through this package."""

from grading.demo_tasks import drive_demo_task  # noqa: F401
from grading.tasks import brain, cards, chat, grading, runs  # noqa: F401
