"""Durable saves for a running being: one short transaction per step.

A save writes the being's budget and mind, the current cycle and the journal
events of that step together, guarded by the lease and by the journal's head:
a worker that lost its lease, or whose being's journal someone else appended
to since its last save, writes nothing. The number of statements per save is
constant whatever the length of the journal.

The chain's head lives in memory, in the one process that holds the lease; the
database is its check, not its source (the save's UPDATE matches only while
the row still holds the counter and head this process last wrote). A step's
save is written without the ORM, as few statements as the database allows:
on Postgres one statement (the being's UPDATE, the cycle's and the events'
INSERT as data-modifying parts of one ``WITH``, each conditional on the
guarded UPDATE), committed on its own; on SQLite one ``BEGIN IMMEDIATE``
transaction of an UPDATE, an UPDATE and one multi-row INSERT.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from singularity.being.chain import line_hash
from singularity.being.columns import Preparer, preparer
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

#: The event columns a save inserts, in order.
EVENT_FIELDS = ("being", "seq", "cycle", "kind", "data", "created_at", "prev_hash", "hash")

#: In a cycle's fields to write: its messages, by appending the ones its row does not hold yet (``_write_step``).
MESSAGES_APPENDED = "messages+"

#: Most events in one INSERT on SQLite (8 values each, under its oldest limit of 999 variables).
SQLITE_ROWS_PER_INSERT = 100


class JournalMoved(LeaseLost):
    """The being's journal was appended to by someone else since this process last saved: nothing was written."""

    def __init__(self, being: Being, seq: int, head: str) -> None:
        super().__init__(
            being,
            f"being {being.name}: its journal no longer ends at event {seq} (head {head[:12] or 'empty'}) as this "
            "process last wrote it; another writer appended to it, so nothing was saved",
        )


class Pending:
    """An event numbered, linked and hashed but not yet written: an ``Event``'s columns without a model instance
    (building one costs more than the rest of ``emit``); ``event()`` makes the model when one is wanted."""

    __slots__ = ("being_id", "seq", "cycle", "kind", "data", "created_at", "prev_hash", "hash")

    def __init__(
        self, being_id: int, seq: int, cycle: int | None, kind: str, data: dict[str, Any], prev_hash: str
    ) -> None:
        self.being_id, self.seq, self.cycle, self.kind, self.data = being_id, seq, cycle, kind, data
        self.created_at = timezone.now()
        self.prev_hash, self.hash = prev_hash, ""
        self.hash = line_hash(event_line(self))  # type: ignore[arg-type]  # the line reads an Event's attributes

    def event(self) -> Event:
        return Event(**{name: getattr(self, name) for name in self.__slots__})


class Journal:
    """Events of one step, numbered from the being's counter and written on ``save``."""

    def __init__(self, being: Being) -> None:
        self.being = being
        self.pending: list[Pending] = []
        #: The cycle whose messages this journal last wrote, the list written and how many it held then.
        self._stored_messages: tuple[Cycle, list[Any], int] | None = None

    def emit(self, kind: str, data: dict[str, Any] | None = None, *, cycle: int | None = None) -> Pending:
        """Number the event, link it to the chain's head and hash it; it is written on ``save``."""
        being = self.being
        being.event_seq += 1
        event = Pending(
            being.pk, being.event_seq, being.cycle if cycle is None else cycle, kind, data or {}, being.event_hash
        )
        being.event_hash = event.hash
        self.pending.append(event)
        return event

    def events(self) -> list[Event]:
        """The pending events as model instances, for a caller writing them itself (``bulk_create``)."""
        return [pending.event() for pending in self.pending]

    def saved_head(self) -> tuple[int, str]:
        """The journal's counter and head as the database holds them now, if no one else wrote: before ``pending``."""
        if self.pending:
            return self.pending[0].seq - 1, self.pending[0].prev_hash
        return self.being.event_seq, self.being.event_hash

    def save(
        self,
        *,
        owner: str,
        cycle: Cycle | None = None,
        cycle_fields: tuple[str, ...] = (),
        fields: tuple[str, ...] = RUNTIME_FIELDS,
    ) -> None:
        """Write the being (its ``fields``, all it runs on unless told), the cycle and the pending events at once.

        Raises ``LeaseLost`` (nothing written) when ``owner`` no longer holds
        the lease, and ``JournalMoved`` (nothing written) when the stored
        journal no longer ends where this process last left it.
        """
        being = self.being
        now = timezone.now()
        values = {name: getattr(being, name) for name in fields}
        values["lease_until"] = now + timedelta(seconds=settings.SINGULARITY_LEASE_SECS)
        values["updated_at"] = now
        seq, head = self.saved_head()
        wrote_messages = cycle is not None and (cycle.pk is None or "messages" in cycle_fields)
        if cycle is not None and cycle.pk is None:
            # A cycle's first save inserts its row (and needs its id back): once a cycle, through the ORM.
            with transaction.atomic():
                updated = Being.objects.filter(pk=being.pk, lease_owner=owner, event_seq=seq, event_hash=head).update(
                    **values
                )
                if updated != 1:
                    raise self._refused(owner, seq, head)
                cycle.save(force_insert=True)
                if self.pending:
                    Event.objects.bulk_create(self.events())
        else:
            step = cycle if cycle is not None and cycle_fields else None
            appended = self._appendable(step) if step is not None and "messages" in cycle_fields else None
            if not _write_step(being, values, (owner, seq, head), step, cycle_fields, self.pending, appended):
                raise self._refused(owner, seq, head)
        if wrote_messages and cycle is not None:
            # Committed now unless an enclosing transaction may yet roll it back: then not counted on.
            written = not connections[DEFAULT_DB_ALIAS].in_atomic_block
            self._stored_messages = (cycle, cycle.messages, len(cycle.messages)) if written else None
        being.lease_until = values["lease_until"]
        self.pending = []

    def _appendable(self, cycle: Cycle) -> int | None:
        """How many of ``cycle.messages`` its row holds, when the save may append the rest instead of writing the
        whole conversation again: this journal wrote that many of this very list, committed, and it has grown since.
        The conversation is append-only (the agent loop only appends to it), so the row's messages stay the list's.
        """
        stored = self._stored_messages
        if stored is None or stored[0] is not cycle or stored[1] is not cycle.messages:
            return None
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return None
        return stored[2] if 0 < stored[2] < len(cycle.messages) else None

    def _refused(self, owner: str, seq: int, head: str) -> LeaseLost:
        """Why a guarded save matched no row: the lease went elsewhere, or the journal moved under it."""
        if Being.objects.filter(pk=self.being.pk, lease_owner=owner).exists():
            return JournalMoved(self.being, seq, head)
        return LeaseLost(self.being)

    def discard(self) -> None:
        """Forget unsaved events and give their numbers and the chain's head back."""
        if self.pending:
            self.being.event_seq -= len(self.pending)
            self.being.event_hash = self.pending[0].prev_hash
        self.pending = []


def _write_step(
    being: Being,
    values: dict[str, Any],
    guard: tuple[str, int, str],
    cycle: Cycle | None,
    cycle_fields: tuple[str, ...],
    events: list[Pending],
    appended: int | None = None,
) -> bool:
    """Write one step's save (the being's ``values``, the ``cycle``'s fields, the ``events``); False, with nothing
    written, when the being's row does not match ``guard`` (its lease owner, event counter and head).

    With ``appended``, the cycle's row holds that many of its messages already, and only the rest is sent.
    """
    db = connections[DEFAULT_DB_ALIAS]
    names = tuple(values)
    being_params = [_prep(Being, name)(value, db) for name, value in values.items()]
    being_params += [being.pk, *guard]
    cycle_names = cycle_fields if cycle is not None else ()
    if appended is not None:
        cycle_names = tuple(MESSAGES_APPENDED if name == "messages" else name for name in cycle_names)
    cycle_params = [_cycle_value(cycle, name, db, appended) for name in cycle_names]
    if cycle is not None:
        cycle_params.append(cycle.pk)
    event_fields = _event_preparers()
    event_params = [prep(getattr(event, attname), db) for event in events for attname, prep in event_fields]
    vendor = db.vendor
    if vendor == "postgresql":
        # One statement, so one round trip: on its own it is its own transaction, inside an atomic block a part.
        with db.cursor() as cursor:
            cursor.execute(
                _postgres_step(vendor, names, cycle_names, len(events)), being_params + cycle_params + event_params
            )
            return cursor.fetchone()[0] == 1
    statements = [(_being_update(vendor, names), being_params)]
    if cycle is not None:
        statements.append((_cycle_update(vendor, cycle_names), cycle_params))
    width = len(EVENT_FIELDS)
    for start in range(0, len(events), SQLITE_ROWS_PER_INSERT):
        rows = min(SQLITE_ROWS_PER_INSERT, len(events) - start)
        statements.append((_event_insert(vendor, rows), event_params[start * width : (start + rows) * width]))
    if _direct(db):
        return _sqlite_direct(db, statements)
    with transaction.atomic(), db.cursor() as cursor:
        cursor.execute(*statements[0])
        if cursor.rowcount != 1:
            return False
        for statement in statements[1:]:
            cursor.execute(*statement)
    return True


def _cycle_value(cycle: Cycle, name: str, db: Any, appended: int | None) -> Any:
    if name != MESSAGES_APPENDED:
        return _prep(Cycle, name)(getattr(cycle, name), db)
    new = _prep(Cycle, "messages")(cycle.messages[appended:], db)
    if db.vendor == "postgresql":
        return new  # jsonb: ``messages || new``
    # SQLite's text: the stored ``[a, b]`` loses its ``]`` and gains ``, c, d]``, which makes ``[a, b, c, d]``: the
    # very text the whole list's JSON is (``json.dumps`` separates items with ``, ``).
    return ", " + new[1:]


def _direct(db: Any) -> bool:
    """Whether a SQLite step may go to the driver itself: connected, in autocommit (no transaction to join), and
    nothing to see its statements (no query log, no execute wrapper), which then pass through Django's cursor."""
    db.close_if_health_check_failed()
    return (
        db.connection is not None
        and not db.in_atomic_block
        and not db.queries_logged
        and not db.execute_wrappers
        and db.get_autocommit()
    )


def _sqlite_direct(db: Any, statements: list[tuple[str, list[Any]]]) -> bool:
    """Run ``statements`` in one ``BEGIN <transaction_mode>`` … ``COMMIT`` on the driver's connection, as Django's
    atomic block and cursor would, without their cost (the placeholders turned to SQLite's once per statement, not
    on every call); the driver's errors become Django's. False, with nothing written, when the first (the being's
    guarded UPDATE) matches no row."""
    raw = db.connection
    with db.wrap_database_errors:
        cursor = raw.cursor()
        try:
            cursor.execute("BEGIN" if db.transaction_mode is None else f"BEGIN {db.transaction_mode}")
            try:
                first, *rest = statements
                if cursor.execute(_qmark(first[0]), first[1]).rowcount != 1:
                    cursor.execute("ROLLBACK")
                    return False
                for sql, params in rest:
                    cursor.execute(_qmark(sql), params)
                cursor.execute("COMMIT")
            except BaseException:
                if raw.in_transaction:
                    with suppress(db.Database.Error):  # the first error is the one to raise
                        cursor.execute("ROLLBACK")
                raise
        finally:
            cursor.close()
    return True


@lru_cache(maxsize=256)
def _qmark(sql: str) -> str:
    """``sql``'s ``%s`` placeholders as SQLite's ``?`` (the statements here hold no other ``%``)."""
    assert "%" not in sql.replace("%s", ""), sql
    return sql.replace("%s", "?")


@lru_cache(maxsize=128)
def _field(model: type, name: str) -> Any:
    return model._meta.get_field(name)


@lru_cache(maxsize=128)
def _prep(model: type, name: str) -> Preparer:
    """A function ``(value, connection)`` making a value of ``model``'s field ``name`` what the ORM would send."""
    return preparer(_field(model, name))


@lru_cache(maxsize=1)
def _event_preparers() -> tuple[tuple[str, Preparer], ...]:
    """Each inserted event column's attribute and preparer, in ``EVENT_FIELDS`` order."""
    return tuple((_field(Event, name).attname, _prep(Event, name)) for name in EVENT_FIELDS)


def _column(model: type, name: str) -> str:
    return connection.ops.quote_name(_field(model, name).column)


# The statements depend only on the database's kind (the first argument, their cache key) and their shape.


@lru_cache(maxsize=64)
def _being_update(vendor: str, names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{_column(Being, name)} = %s" for name in names)
    guard = " AND ".join(f"{_column(Being, name)} = %s" for name in ("id", "lease_owner", "event_seq", "event_hash"))
    return f"UPDATE {connection.ops.quote_name(Being._meta.db_table)} SET {sets} WHERE {guard}"


@lru_cache(maxsize=64)
def _cycle_update(vendor: str, names: tuple[str, ...]) -> str:
    sets = ", ".join(_cycle_set(vendor, name) for name in names)
    return f"UPDATE {connection.ops.quote_name(Cycle._meta.db_table)} SET {sets} WHERE {_column(Cycle, 'id')} = %s"


def _cycle_set(vendor: str, name: str) -> str:
    if name != MESSAGES_APPENDED:
        return f"{_column(Cycle, name)} = %s"
    column = _column(Cycle, "messages")
    if vendor == "postgresql":
        return f"{column} = {column} || %s"
    return f"{column} = substr({column}, 1, length({column}) - 1) || %s"


@lru_cache(maxsize=64)
def _event_insert(vendor: str, rows: int) -> str:
    columns = ", ".join(_column(Event, name) for name in EVENT_FIELDS)
    row = "(" + ", ".join(["%s"] * len(EVENT_FIELDS)) + ")"
    return f"INSERT INTO {connection.ops.quote_name(Event._meta.db_table)} ({columns}) VALUES {', '.join([row] * rows)}"


@lru_cache(maxsize=64)
def _postgres_step(vendor: str, names: tuple[str, ...], cycle_names: tuple[str, ...], rows: int) -> str:
    """``WITH b AS (guarded UPDATE being … RETURNING 1), c AS (UPDATE cycle … AND EXISTS b), e AS (INSERT events …
    WHERE EXISTS b) SELECT count(*) FROM b``: the whole step or nothing, in one statement."""
    parts = [f"b AS ({_being_update(vendor, names)} RETURNING 1)"]
    if cycle_names:
        parts.append(f"c AS ({_cycle_update(vendor, cycle_names)} AND EXISTS (SELECT 1 FROM b))")
    if rows:
        # Typed placeholders: a VALUES list under a SELECT would otherwise read its untyped literals as text.
        types = [Event._meta.get_field(name).db_type(connection) for name in EVENT_FIELDS]
        row = "(" + ", ".join(f"CAST(%s AS {kind})" for kind in types) + ")"
        columns = ", ".join(_column(Event, name) for name in EVENT_FIELDS)
        parts.append(
            f"e AS (INSERT INTO {connection.ops.quote_name(Event._meta.db_table)} ({columns}) SELECT * FROM (VALUES "
            f"{', '.join([row] * rows)}) AS v WHERE EXISTS (SELECT 1 FROM b))"
        )
    return f"WITH {', '.join(parts)} SELECT count(*) FROM b"
