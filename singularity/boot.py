"""Boot errors that name their variable: a database or broker that cannot be reached is one line and exit 2.

``manage.py`` passes any error a command ends on through ``explain``: a
connection that failed is told as the variable that points at it and what to
do, instead of the driver's traceback. ``up`` asks ``check_database`` and
``check_broker`` before it starts anything.
"""

from __future__ import annotations

from typing import Any

EXIT_CODE = 2

_DB_HINTS = (
    ("does not exist", "create it (createdb, or CREATE DATABASE) or point DATABASE_URL at one that exists"),
    ("password authentication failed", "fix the user or password in DATABASE_URL"),
    ("role", "create that role in Postgres or fix the user in DATABASE_URL"),
    ("unable to open database file", "make the folder of the SQLite file in DATABASE_URL exist and be writable"),
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())[:300]


def database_line(exc: BaseException) -> str:
    """One line naming DATABASE_URL, the driver's reason and what to do about it."""
    reason = _first_line(exc)
    lowered = reason.lower()
    todo = next((hint for key, hint in _DB_HINTS if key in lowered), None)
    if todo is None:
        todo = "start the database server or point DATABASE_URL at one that is running"
    return f"DATABASE_URL: cannot connect to the database ({reason}); {todo}"


def broker_line(reason: str) -> str:
    """One line naming CELERY_BROKER_URL, the reason and what to do about it."""
    return (
        f"CELERY_BROKER_URL: cannot reach the broker ({reason}); "
        "start Redis or point CELERY_BROKER_URL at a broker that is running"
    )


def explain(exc: BaseException) -> str | None:
    """Return the one line for an error that is a failed connection to the database, else None."""
    from django.db import OperationalError as DjangoOperationalError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DjangoOperationalError) and _is_connect_error(current):
            return database_line(current)
        current = current.__cause__ or current.__context__
    return None


def _is_connect_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        any(
            key in text
            for key in (
                "connection",
                "could not connect",
                "does not exist",
                "password authentication",
                "unable to open database file",
                "no route to host",
                "name or service not known",
                "could not translate host name",
            )
        )
        and "relation" not in text
        and "column" not in text
    )


def check_database(alias: str = "default") -> str | None:
    """Connect to the database; return None, or the one line that says why it failed."""
    from django.db import OperationalError, connections

    connection = connections[alias]
    try:
        connection.ensure_connection()
    except OperationalError as exc:
        return database_line(exc)
    return None


def check_broker(app: Any | None = None) -> str | None:
    """Connect to the broker; return None, or the one line that says why it failed."""
    from singularity.queues import broker_reachable

    reason = broker_reachable(app)
    return None if reason is None else broker_line(reason)
