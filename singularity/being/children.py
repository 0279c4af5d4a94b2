"""A being's children: funded by a transfer from the parent's balance, and capped in number.

By default a child's whole balance is moved from its parent's ``remaining``:
the parent names the amount, both sides journal a ``transfer`` and the
parent's save is guarded by its lease, all in one transaction. So a lineage
never holds more than its origin started with plus trusted revenue. With
``SINGULARITY_CHILD_FRESH_BALANCE`` a child starts instead with the
configured ``SINGULARITY_CHILD_STARTING_BALANCE_USD`` (the origin's way),
and only ``SINGULARITY_MAX_LIVE_CHILDREN`` bounds what that mints.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import transaction

from singularity.being.actions import create_being
from singularity.being.ledger import ledger_limit
from singularity.being.store import JOURNAL_FIELDS, Journal
from singularity.errors import ConfigError, StateError
from singularity.models import Being, Event
from singularity.money import EXACT, MoneyError, money_str, parse_money, quantize


def _transfer_amount(value: str | None) -> Decimal:
    """The amount a parent names, exact to the ledger's quantum; raises ``ConfigError`` saying what is wrong."""
    if value is None:
        raise ConfigError("balance_usd: required (a child is funded from your own remaining balance)")
    try:
        amount = parse_money(value, what="balance_usd")
    except MoneyError as exc:
        raise ConfigError(str(exc)) from None
    if amount <= 0:
        raise ConfigError(f"balance_usd: must be positive, got {value!r}")
    if amount > ledger_limit():
        raise ConfigError(f"balance_usd: {value!r} is beyond the ledger's range")
    if quantize(amount) != amount:
        raise ConfigError(f"balance_usd: more than 12 decimal places in {value!r}")
    return amount


def _check_room(parent: Being) -> None:
    cap = settings.SINGULARITY_MAX_LIVE_CHILDREN
    live = parent.children.filter(remaining__gt=0).count()
    if live >= cap:
        raise StateError(
            f"{parent.name} already has {live} live children, the most allowed; a child counts until it is exhausted"
        )


def spawn_child(parent: Being, *, name: str, prompt: str, balance_usd: str | None) -> Being:
    """Create a child of ``parent``, funded as configured; returns it.

    Raises ``ConfigError`` or ``StateError`` (nothing created, nothing moved)
    for a bad name or amount, a parent that cannot pay, a full family, or —
    ``LeaseLost`` — a parent whose process no longer holds its lease.
    """
    _check_room(parent)
    if settings.SINGULARITY_CHILD_FRESH_BALANCE:
        if balance_usd is not None:
            raise ConfigError(
                "balance_usd: children start with the configured balance here (SINGULARITY_CHILD_FRESH_BALANCE); "
                "leave it out"
            )
        return create_being(
            name, parent=parent, system_prompt=prompt, starting=settings.SINGULARITY_CHILD_STARTING_BALANCE_USD
        )
    amount = _transfer_amount(balance_usd)
    if amount > parent.remaining:
        raise StateError(f"cannot pay {money_str(amount)} USD: your balance is {money_str(parent.remaining)} USD")
    return _spawn_funded(parent, name=name, prompt=prompt, amount=amount)


def _spawn_funded(parent: Being, *, name: str, prompt: str, amount: Decimal) -> Being:
    """Create the child and move ``amount`` to it in one transaction guarded by the parent's lease."""
    journal = Journal(parent)
    before = parent.remaining
    parent.remaining = EXACT.subtract(before, amount)
    try:
        with transaction.atomic():
            child = create_being(name, parent=parent, system_prompt=prompt, starting=amount)
            child_journal = Journal(child)
            child_journal.emit(
                Event.Kind.TRANSFER,
                {"direction": "in", "from": parent.name, "amount": money_str(amount), "remaining": money_str(amount)},
            )
            child.save(update_fields=[*JOURNAL_FIELDS, "updated_at"])
            Event.objects.bulk_create(child_journal.events())
            journal.emit(
                Event.Kind.TRANSFER,
                {
                    "direction": "out",
                    "to": child.name,
                    "amount": money_str(amount),
                    "remaining": money_str(parent.remaining),
                },
            )
            journal.save(owner=parent.lease_owner)
    except BaseException:
        parent.remaining = before
        journal.discard()
        raise
    return child
