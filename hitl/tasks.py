"""Celery tasks: thin wrappers over the actions, run by beat every 30 seconds (see singularity/schedule.py)."""

from celery import shared_task

from hitl.actions import expire_due_cards, run_unhandled_handlers
from hitl.sender import send_pending


@shared_task(ignore_result=True)
def expire_cards() -> int:
    """Close cards past their deadline, then call any handler an after-commit call missed; return how many closed."""
    expired = expire_due_cards()
    run_unhandled_handlers()
    return expired


@shared_task(ignore_result=True, soft_time_limit=60)
def send_deliveries() -> int:
    """Send due Telegram messages and edits; return how many were tried."""
    return send_pending()
