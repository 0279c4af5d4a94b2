"""Celery tasks for the loop: thin wrappers over evolution.rounds, merge, watch and lessons."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def analyse_round(round_id: int) -> bool:
    """Brief the proposer for one round and put its answer before the decide gate."""
    from evolution import rounds

    return rounds.analyse(round_id) is not None


@shared_task(ignore_result=True)
def apply_round(round_id: int) -> bool:
    """Apply one accepted round: diff gate, commit, pull request."""
    from evolution import rounds

    return rounds.apply(round_id) is not None


@shared_task(ignore_result=True)
def tick() -> dict[str, int]:
    """The loop's clock: poll pull requests that are due, close watches past their deadline, recover lost rounds."""
    from evolution import merge, rounds, watch

    return {"polled": merge.poll_due(), "watches": watch.tick(), "lost": rounds.sweep_lost()}


@shared_task(ignore_result=True)
def sweep_lessons() -> int:
    """Delete lessons older than the brain-wide lessons.retentionDays."""
    from evolution import lessons

    return lessons.sweep()


@shared_task(ignore_result=True)
def grades_landed(grade_ids: list[str]) -> int:
    """Hear grades that settled (the trigger and the watch)."""
    from evolution import trigger

    return trigger.on_landed(grade_ids)


@shared_task(ignore_result=True)
def hourly_sweep() -> int:
    """The loop's hourly sweep: queued ideas, stale waiting windows, and every trigger.every that came round."""
    from evolution import cadence

    return cadence.sweep()


@shared_task(ignore_result=True)
def needs_you_digest() -> bool:
    """Post the daily notice listing every wait on a person; return whether one was posted (none when nothing waits)."""
    from evolution import needs_you

    return needs_you.digest() is not None
