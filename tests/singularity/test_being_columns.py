"""The being's saves send each value as the ORM would (``singularity.being.columns.preparer`` against
``get_db_prep_save``), on every column a save writes, for the values it writes and the ones it hands back."""

from __future__ import annotations

import warnings
import zoneinfo
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from singularity.being.columns import preparer
from singularity.being.store import EVENT_FIELDS, RUNTIME_FIELDS
from singularity.models import Being, Cycle, Event

NOW = datetime(2026, 12, 6, 22, 30, 1, 123456, tzinfo=UTC)
SAMPLES = [
    0,
    7,
    2**62,
    True,
    Being.Status.RUNNING,
    Event.Kind.COST_DEBITED,
    "",
    "é text\\u0000",
    None,
    Decimal("0"),
    Decimal("12.345678901234"),
    Decimal("-0.0000000000005"),
    Decimal("999999.1234567890125"),
    NOW,
    NOW.replace(microsecond=0),
    NOW.astimezone(zoneinfo.ZoneInfo("Asia/Kolkata")),
    NOW.astimezone(zoneinfo.ZoneInfo("America/St_Johns")) + timedelta(days=180),
    NOW.replace(tzinfo=None),
    {"a": 1, "b": [1, "x"]},
    ["k:success"],
    [],
]

COLUMNS = [
    *((Being, name) for name in (*RUNTIME_FIELDS, "lease_until", "updated_at", "lease_owner", "id")),
    *((Cycle, name) for name in ("rounds", "spent", "messages", "tool_calls", "earned", "status", "finished_at")),
    *((Cycle, name) for name in ("balance_after", "final_content", "error")),
    *((Event, name) for name in EVENT_FIELDS),
]


def orm(field, value):
    """What the ORM sends, or the error it raises."""
    try:
        with warnings.catch_warnings(record=True):
            return ("ok", field.get_db_prep_save(value, connection))
    except (ArithmeticError, AttributeError, TypeError, ValueError, ValidationError) as exc:
        return ("error", type(exc))


def ours(field, value):
    try:
        with warnings.catch_warnings(record=True):
            return ("ok", preparer(field)(value, connection))
    except (ArithmeticError, AttributeError, TypeError, ValueError, ValidationError) as exc:
        return ("error", type(exc))


def comparable(result):
    """A JSON adapter (Postgres) compares by what it wraps."""
    kind, value = result
    return (kind, getattr(value, "obj", value))


@pytest.mark.django_db
@pytest.mark.parametrize(("model", "name"), COLUMNS, ids=[f"{m.__name__}.{n}" for m, n in COLUMNS])
def test_every_column_a_save_writes_gets_what_the_orm_would_send(model, name):
    field = model._meta.get_field(name)
    for value in SAMPLES:
        expected, got = orm(field, value), ours(field, value)
        assert comparable(got) == comparable(expected), (name, value)
        if expected[0] == "ok":
            assert type(got[1]) is type(expected[1]), (name, value)


@pytest.mark.django_db
def test_datetimes_follow_the_connections_time_zone(settings):
    # SQLite stores a naive text in the connection's zone; with time zones off the ORM's own way is taken.
    field = Being._meta.get_field("updated_at")
    assert comparable(ours(field, NOW)) == comparable(orm(field, NOW))
    settings.USE_TZ = False
    try:
        naive = NOW.replace(tzinfo=None)
        assert comparable(ours(field, naive)) == comparable(orm(field, naive))
        assert comparable(ours(field, NOW)) == comparable(orm(field, NOW))
    finally:
        settings.USE_TZ = True
