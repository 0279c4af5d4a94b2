"""A field's value as its column takes it, for the being's saves written without the ORM (``store``).

The ORM sends ``field.get_db_prep_save(value, connection)``: a few microseconds a value (its checks, ``to_python``
again, the backend's adaptation), and a step's save sends some twenty. ``preparer(field)`` returns a function of
``(value, connection)`` giving the same result quicker for the values a save writes — an int into an integer column
or a key (on SQLite), a string into a text column, an aware datetime — and ``get_db_prep_save``'s own answer for anything else
(``tests/singularity/test_being_columns.py`` holds the two equal on every column a save writes).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import models

Preparer = Callable[[Any, Any], Any]


@lru_cache(maxsize=256)
def preparer(field: models.Field) -> Preparer:
    """A function ``(value, connection)`` equal to ``field.get_db_prep_save``, quicker for the common values."""
    slow = field.get_db_prep_save
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    if isinstance(target, models.IntegerField):
        # ``int(value)`` and SQLite's integer adaptation, which is the value itself (Postgres wraps it in a typed
        # integer, its own way); a bool or an enum goes the ORM's way.
        return lambda value, connection: (
            value if type(value) is int and connection.vendor == "sqlite" else slow(value, connection)
        )
    if isinstance(field, models.CharField | models.TextField):
        # ``to_python`` returns a string (or a ``str`` enum) unchanged.
        return lambda value, connection: value if isinstance(value, str) else slow(value, connection)
    if type(field) is models.DateTimeField:
        return _datetime_preparer(slow)
    return slow


def _datetime_preparer(slow: Preparer) -> Preparer:
    def prepare(value: Any, connection: Any) -> Any:
        # An aware datetime with time zones on: Postgres takes it as it is; SQLite takes the text of its naive form
        # in the connection's time zone (``timezone.make_naive``, then ``str``). Anything else goes the ORM's way.
        if type(value) is datetime and settings.USE_TZ and value.utcoffset() is not None:
            vendor = connection.vendor
            if vendor == "postgresql":
                return value
            if vendor == "sqlite":
                return str(value.astimezone(connection.timezone).replace(tzinfo=None))
        return slow(value, connection)

    return prepare
