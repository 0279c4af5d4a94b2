"""Celery tasks: thin wrappers over ``deliver`` and ``alerts`` (the beat's entries are in singularity/schedule.py)."""

from celery import shared_task

from singularity.notify import alerts, deliver


@shared_task(ignore_result=True, soft_time_limit=60)
def send(delivery_id: str) -> bool:
    """Try one delivery now; return whether it was due and tried."""
    return deliver.send_one(delivery_id)


@shared_task(ignore_result=True, soft_time_limit=120)
def sweep() -> int:
    """Send every delivery due (retries, lost messages); return how many were tried."""
    return deliver.sweep()


@shared_task(ignore_result=True, soft_time_limit=120)
def evaluate_alerts() -> int:
    """Evaluate every active alert rule; return how many changed level."""
    return alerts.evaluate_all()
