"""Celery tasks for chat roles: thin wrappers over grading.chat."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def close_idle_episodes() -> int:
    """Close the episodes whose idle pause ran out and finish the closed ones that are due; return how many."""
    from grading.chat.episodes import close_idle_episodes as sweep

    return sweep()


@shared_task(ignore_result=True)
def telegram_turn(role_id: int, chat_id: int, message: dict) -> str:
    """Run one Telegram message's turn with its role and send the reply to the chat; return what happened."""
    from grading.chat.telegram import run_turn

    return run_turn(role_id, chat_id, message)
