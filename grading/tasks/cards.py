"""Celery tasks for rating cards: thin wrappers over grading.cards."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def post_rating_card(execution_id: str) -> bool:
    """Open the rating card of a carded run (keyed: a second run opens nothing); return whether a card stands."""
    from grading.cards import post_card

    return post_card(execution_id) is not None


@shared_task(ignore_result=True)
def open_missing_rating_cards() -> int:
    """Open the card of every waiting run whose opening task was lost; return how many."""
    from grading.cards import open_missing_cards

    return open_missing_cards()
