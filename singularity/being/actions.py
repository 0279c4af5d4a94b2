"""What people and processes do to beings: create, start under workers, stop.

Views, the API, commands and tasks all call these.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from singularity.being import lease
from singularity.being.framing import DEFAULT_SYSTEM_PROMPT
from singularity.being.lease import LeaseLost
from singularity.being.store import JOURNAL_FIELDS, Journal
from singularity.errors import ConfigError, StateError
from singularity.models import Being, Event, being_name_validator
from singularity.money import MoneyError, money_str, parse_money

MAX_STIMULUS_BYTES = 64 * 1024


def validate_stimulus(stimulus: str) -> str:
    """Refuse a stimulus over 64 KiB (UTF-8) or containing NUL; return it unchanged otherwise."""
    if "\x00" in stimulus:
        raise ConfigError("--stimulus: contains a NUL character")
    size = len(stimulus.encode("utf-8"))
    if size > MAX_STIMULUS_BYTES:
        raise ConfigError(f"--stimulus: {size} bytes is over the 65536-byte limit")
    return stimulus


def create_being(
    name: str,
    *,
    starting: Decimal | str | None = None,
    parent: Being | None = None,
    system_prompt: str | None = None,
    stimulus: str = "",
    model: str | None = None,
) -> Being:
    """Create a being with a fresh budget. Raises ConfigError naming what is wrong."""
    try:
        being_name_validator(name)
    except ValidationError:
        raise ConfigError(f"--name: {name!r} is not a valid being name (1-64 letters, digits, '.', '_', '-')") from None
    if starting is None:
        starting = settings.SINGULARITY_STARTING_BALANCE_USD
    try:
        amount = parse_money(starting, what="SINGULARITY_STARTING_BALANCE_USD", allow_negative=False)
    except MoneyError as exc:
        raise ConfigError(str(exc)) from None
    validate_stimulus(stimulus)
    try:
        with transaction.atomic():
            return Being.objects.create(
                name=name,
                starting=amount,
                remaining=amount,
                parent=parent,
                model=model or settings.BRAMA_MODEL,
                system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
                stimulus=stimulus,
            )
    except IntegrityError:
        raise ConfigError(f"--name: a being named {name!r} already exists (use --resume to continue it)") from None


@contextmanager
def _write_lock(being: Being, owner: str | None) -> Iterator[Being]:
    """Yield the being's row locked for update, in a transaction, once the lease allows ``owner`` to write.

    With an ``owner``: only while it holds the lease (``LeaseLost`` otherwise).
    Without: only while no living process holds a lease (``StateError`` naming the holder).
    """
    with transaction.atomic():
        locked = Being.objects.select_for_update().get(pk=being.pk)
        if owner is not None and locked.lease_owner != owner:
            raise LeaseLost(being)
        if owner is None and lease.is_live(locked):
            raise StateError(
                f"being {being.name} is held by {locked.lease_owner} until "
                f"{locked.lease_until:%Y-%m-%d %H:%M:%S %Z}; nothing written"
            )
        yield locked


def _append(locked: Being, kind: str, data: dict[str, Any], **fields: Any) -> None:
    """Append one event to a locked being and update ``fields`` with it."""
    journal = Journal(locked)
    journal.emit(kind, data)
    for name, value in fields.items():
        setattr(locked, name, value)
    locked.save(update_fields=[*JOURNAL_FIELDS, "updated_at", *fields])
    Event.objects.bulk_create(journal.events())


def start_on_workers(being: Being, *, by: str) -> Being:
    """Hand a being to the Celery workers: beat wakes it every cycle interval."""
    if being.status == Being.Status.RUNNING:
        raise StateError(f"being {being.name} is already running (on {being.get_host_display()})")
    if not being.solvent:
        raise StateError(f"being {being.name} is exhausted: its balance is {money_str(being.remaining)} USD")
    with _write_lock(being, None) as locked:
        _append(
            locked,
            Event.Kind.STARTED,
            {"host": "worker", "by": by},
            status=Being.Status.RUNNING,
            host=Being.Host.WORKER,
            next_cycle_at=timezone.now(),
            last_error="",
        )
    being.refresh_from_db()
    return being


def request_stop(being: Being, *, by: str) -> Being:
    """Stop a being. If a process is in a cycle now it finishes the step and stops; otherwise it stops here.

    A running process is only asked (its status becomes ``stopping``, which it
    reads between rounds and between cycles); it writes its own final event.
    """
    if being.status not in (Being.Status.RUNNING, Being.Status.STOPPING):
        raise StateError(f"being {being.name} is not running (status {being.status})")
    with transaction.atomic():
        locked = Being.objects.select_for_update().get(pk=being.pk)
        if lease.is_live(locked):
            Being.objects.filter(pk=being.pk).update(status=Being.Status.STOPPING)
        else:
            _append_stopped(locked, by=by)
    being.refresh_from_db()
    return being


def finish_stopped(
    being: Being, *, by: str, reason: str = "", owner: str | None = None, exhausted: bool = False
) -> None:
    """Persist the final status, stopped if still solvent, exhausted if not, with a final stopped event.

    ``exhausted`` says the run ended at the solvency stop while the balance is
    still above zero (it cannot cover the next call's reserved worst case).

    ``owner`` is the process finishing its own run: it writes only while it
    holds the lease (``LeaseLost`` otherwise); ``reason`` also becomes the row's
    ``last_error``. Without an owner nobody may hold the lease.
    """
    with _write_lock(being, owner) as locked:
        _append_stopped(locked, by=by, reason=reason, exhausted=exhausted)
    being.refresh_from_db()


def _append_stopped(locked: Being, *, by: str, reason: str = "", exhausted: bool = False) -> None:
    final = Being.Status.STOPPED if locked.solvent and not exhausted else Being.Status.EXHAUSTED
    data = {"status": final, "by": by}
    fields: dict[str, Any] = {"status": final, "host": Being.Host.NONE, "next_cycle_at": None}
    if reason:
        data["reason"] = reason
        fields["last_error"] = reason
    _append(locked, Event.Kind.STOPPED, data, **fields)
