"""Celery tasks for grading: thin wrappers over grading.booking and grading.grade."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def grade_execution(grade_id: str) -> bool:
    """Grade one due booking; return whether this worker did the grading."""
    from grading.grade import grade_by_id

    return grade_by_id(grade_id)


@shared_task(ignore_result=True)
def sweep_due() -> int:
    """Enqueue grading for every booking whose time has come."""
    from grading import booking

    return booking.sweep_due()


@shared_task(ignore_result=True)
def sweep_lost() -> int:
    """Re-send lost grading jobs, re-run gradings whose worker died, fail as lost what stays lost (grading.booking)."""
    from grading import booking

    return booking.sweep_lost()


@shared_task(ignore_result=True)
def assemble_traces() -> int:
    """Make runs of the OTLP traces whose root span's grace has passed, and close those whose root never came."""
    from grading import otlp_assemble

    return otlp_assemble.sweep()
