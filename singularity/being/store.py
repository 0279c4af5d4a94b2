"""Durable saves for a running being: one short transaction per step.

A save writes the being's budget and mind, the current cycle and the journal
events of that step together, guarded by the lease: a worker that lost its
lease writes nothing. The number of queries per save is constant whatever the
length of the journal.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from singularity.being.chain import line_hash
from singularity.being.export import event_line
from singularity.being.lease import LeaseLost
from singularity.models import Being, Cycle, Event

#: Columns a running being writes; ``status`` changes only through explicit transitions.
RUNTIME_FIELDS = (
    "cycle",
    "remaining",
    "api_spent",
    "instance_spent",
    "total_tokens",
    "earned",
    "model",
    "system_prompt",
    "rules",
    "learnings",
    "memories",
    "recent_actions",
    "event_seq",
    "event_hash",
    "reserved_api",
    "reserved_instance",
)

#: The being's columns that move with every event appended (the counter and the chain's head).
JOURNAL_FIELDS = ("event_seq", "event_hash")


class Journal:
    """Events of one step, numbered from the being's counter and written on ``save``."""

    def __init__(self, being: Being) -> None:
        self.being = being
        self.pending: list[Event] = []

    def emit(self, kind: str, data: dict[str, Any] | None = None, *, cycle: int | None = None) -> Event:
        """Number the event, link it to the chain's head and hash it; it is written on ``save``."""
        self.being.event_seq += 1
        event = Event(
            being=self.being,
            seq=self.being.event_seq,
            cycle=self.being.cycle if cycle is None else cycle,
            kind=kind,
            data=data or {},
            created_at=timezone.now(),
            prev_hash=self.being.event_hash,
        )
        event.hash = line_hash(event_line(event))
        self.being.event_hash = event.hash
        self.pending.append(event)
        return event

    def save(
        self,
        *,
        owner: str,
        cycle: Cycle | None = None,
        cycle_fields: tuple[str, ...] = (),
        fields: tuple[str, ...] = RUNTIME_FIELDS,
    ) -> None:
        """Write the being (its ``fields``, all it runs on unless told), the cycle and the pending events at once.

        Raises ``LeaseLost`` (nothing written) when ``owner`` no longer holds the lease.
        """
        being = self.being
        now = timezone.now()
        values = {name: getattr(being, name) for name in fields}
        values["lease_until"] = now + timedelta(seconds=settings.SINGULARITY_LEASE_SECS)
        values["updated_at"] = now
        with transaction.atomic():
            updated = Being.objects.filter(pk=being.pk, lease_owner=owner).update(**values)
            if updated != 1:
                raise LeaseLost(being)
            if cycle is not None:
                if cycle.pk is None:
                    cycle.save(force_insert=True)
                elif cycle_fields:
                    cycle.save(update_fields=cycle_fields)
            if self.pending:
                Event.objects.bulk_create(self.pending)
        being.lease_until = values["lease_until"]
        self.pending = []

    def discard(self) -> None:
        """Forget unsaved events and give their numbers and the chain's head back."""
        if self.pending:
            self.being.event_seq -= len(self.pending)
            self.being.event_hash = self.pending[0].prev_hash
        self.pending = []
