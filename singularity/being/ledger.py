"""Changes to the budget, in memory; the journal's save makes them durable."""

from __future__ import annotations

from decimal import Decimal

from django.db import connection

from singularity.errors import StateError
from singularity.fields import MOST
from singularity.models import TOKENS_MAX, Being
from singularity.money import EXACT, QUANTUM, Debit, money_str, quantize


class CreditRefused(StateError):
    """A credit the ledger will not make (off its range, or nothing left after rounding); nothing changed."""


def ledger_limit() -> Decimal:
    """The largest amount a budget field holds on the configured database."""
    return MOST.get(connection.vendor, MOST["postgresql"])


def add_tokens(total: int, more: int) -> int:
    """Lifetime tokens saturate at the column's maximum instead of overflowing."""
    return min(TOKENS_MAX, total + max(0, more))


def apply_debit(being: Being, debit: Debit, tokens: int) -> None:
    # The exact context: the default one keeps 28 digits, fewer than a 30-digit money column.
    being.api_spent = EXACT.add(being.api_spent, debit.api)
    being.instance_spent = EXACT.add(being.instance_spent, debit.instance)
    being.remaining = EXACT.subtract(being.remaining, EXACT.add(debit.api, debit.instance))
    being.total_tokens = add_tokens(being.total_tokens, tokens)


def apply_credit(being: Being, amount: Decimal) -> Decimal:
    """Credit revenue rounded once, half-even, to the quantum; return the amount credited.

    Revenue cannot be negative: a non-positive credit is a hard ``StateError``.
    Raises ``CreditRefused`` when ``earned`` or ``remaining`` would leave the
    ledger's range, or the amount rounds to zero; the being is unchanged then.
    """
    if amount <= 0:
        raise StateError(f"being {being.name}: revenue must be positive, refused credit of {amount}")
    limit = ledger_limit()
    # The bare comparison first: a sum past the context's exponent range would raise, not compare.
    if amount > limit or EXACT.add(being.earned, amount) > limit or EXACT.add(being.remaining, amount) > limit:
        raise CreditRefused(
            f"a credit of {amount} USD would take the balance beyond the ledger's range "
            f"({money_str(limit)} USD); nothing credited"
        )
    rounded = quantize(amount)
    if rounded == 0:
        raise CreditRefused(f"a credit of {amount} USD rounds to 0 at the ledger's quantum of {QUANTUM} USD")
    being.earned = EXACT.add(being.earned, rounded)
    being.remaining = EXACT.add(being.remaining, rounded)
    return rounded
