"""Celery tasks for the loop: thin wrappers over the phase machine, the trigger and the steering modules."""

from __future__ import annotations

from celery import shared_task

from evolution.loop import machine


@shared_task(ignore_result=True)
def analyse_round(round_id: int) -> bool:
    """Brief the proposer for one round and put its answer before the decide gate."""
    return machine.analyse(round_id) is not None


@shared_task(ignore_result=True)
def apply_round(round_id: int) -> bool:
    """Apply one accepted round: diff gate, commit, pull request."""
    return machine.apply(round_id) is not None


machine.register_step("analyse", lambda round_id: analyse_round.delay(round_id))
machine.register_step("apply", lambda round_id: apply_round.delay(round_id))


@shared_task(ignore_result=True)
def tick() -> dict[str, int]:
    """The loop's clock: poll pull requests that are due, read every watch, recover lost rounds."""
    return machine.tick()


@shared_task(ignore_result=True)
def pull_moved(number: int) -> None:
    """A forge said PR ``number`` moved (GitHub's webhook): wake the wait that follows it, which reads it."""
    from evolution.forges.base import pull_event

    pull_event(number)


@shared_task(ignore_result=True)
def sweep_lessons() -> int:
    """Delete lessons older than the brain-wide lessons.retentionDays."""
    from evolution.loop import lessons

    return lessons.sweep()


@shared_task(ignore_result=True)
def grades_landed(grade_ids: list[str]) -> int:
    """Hear grades that settled (the trigger and the watch)."""
    from evolution.loop import trigger

    return trigger.on_landed(grade_ids)


@shared_task(ignore_result=True)
def hourly_sweep() -> int:
    """The loop's hourly sweep: queued ideas, stale waiting windows, and every trigger.every that came round."""
    from evolution.loop import trigger

    return trigger.sweep()


@shared_task(ignore_result=True)
def needs_you_digest() -> bool:
    """Post the daily notice listing every wait on a person; return whether one was posted (none when nothing waits)."""
    from evolution.steering import needs_you

    return needs_you.digest() is not None
