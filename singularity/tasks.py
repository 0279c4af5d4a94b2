"""Celery tasks: thin wrappers that take ids and call actions."""

from celery import shared_task

from singularity.being.worker import run_worker_cycle, wake_due_beings


@shared_task(ignore_result=True)
def wake_beings() -> int:
    """Enqueue one cycle for every worker-hosted being that is due."""
    ids = wake_due_beings()
    for being_id in ids:
        run_being_cycle.delay(being_id)
    return len(ids)


@shared_task(ignore_result=True)
def run_being_cycle(being_id: int) -> bool:
    return run_worker_cycle(being_id)
