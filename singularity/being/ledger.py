"""Changes to the budget, in memory; the journal's save makes them durable."""

from __future__ import annotations

from decimal import Decimal

from singularity.errors import StateError
from singularity.models import TOKENS_MAX, Being
from singularity.money import Debit


def add_tokens(total: int, more: int) -> int:
    """Lifetime tokens saturate at the column's maximum instead of overflowing."""
    return min(TOKENS_MAX, total + max(0, more))


def apply_debit(being: Being, debit: Debit, tokens: int) -> None:
    being.api_spent += debit.api
    being.instance_spent += debit.instance
    being.remaining -= debit.total
    being.total_tokens = add_tokens(being.total_tokens, tokens)


def apply_credit(being: Being, amount: Decimal) -> None:
    """Credit revenue. Revenue cannot be negative: a non-positive credit is a hard state error."""
    if amount <= 0:
        raise StateError(f"being {being.name}: revenue must be positive, refused credit of {amount}")
    being.earned += amount
    being.remaining += amount
