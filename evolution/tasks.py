"""Celery tasks for the loop: thin wrappers over the phase machine, the trigger and the steering modules."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from kombu.exceptions import OperationalError as BrokerError

from evolution.loop import aa, machine, recovery

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def analyse_round(round_id: int) -> bool:
    """Brief the proposer for one round and put its answer before the decide gate."""
    return machine.analyse(round_id) is not None


@shared_task(ignore_result=True)
def apply_round(round_id: int) -> bool:
    """Apply one accepted round once this worker holds its claim: diff gate, commit, pull request."""
    return recovery.run_apply(round_id) is not None


def hand_over(task: Any, name: str, round_id: int) -> bool:
    """Send ``task`` for ``round_id``; a broker that cannot be reached is logged, never raised.

    The step is already due in the database (the transaction that asked for it
    committed), so the tick's due-step sweep (``evolution.loop.recovery``)
    hands it over once the broker answers again: an Accept answered while the
    broker is down is not a failed Accept.
    """
    try:
        task.delay(round_id)
    except (BrokerError, OSError) as exc:
        log.warning("loop: %s %s could not reach the broker (%s); the tick's sweep resends it", name, round_id, exc)
        return False
    return True


@shared_task(ignore_result=True)
def run_replay(replay_id: int) -> bool:
    """Run one replay of a pre-merge check (it acts on nothing), then read the check."""
    machine.replay(replay_id)
    return True


@shared_task(ignore_result=True)
def run_aa(report_id: int) -> bool:
    """Run one A/A calibration report (issue 31) when it is still due and nobody holds it."""
    return aa.run(report_id) is not None


aa.register_sender(lambda report_id: run_aa.delay(report_id))


machine.register_step("analyse", lambda round_id: hand_over(analyse_round, "analyse", round_id))
machine.register_step("apply", lambda round_id: hand_over(apply_round, "apply", round_id))
machine.register_step("replay", lambda replay_id: run_replay.delay(replay_id))


@shared_task(ignore_result=True)
def tick() -> dict[str, Any]:
    """The loop's clock: poll pull requests that are due, read every watch, recover lost rounds and lost steps."""
    return recovery.tick()


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


@shared_task(ignore_result=True, soft_time_limit=1800)
def check_person_pr(number: int) -> str:
    """The pre-merge check of a PR a pull request event announced (``LOOP_CHECK_PULLS``); return its verdict."""
    from evolution.prcheck import check_if_persons

    return check_if_persons(number)
