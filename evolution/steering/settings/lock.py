"""One settings writer at a time across processes (an advisory lock on Postgres, a lock file on SQLite)."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from evolution.steering.settings.base import ADVISORY_KEY, CONFLICT, LOCK_SECS, SettingsRefusal


def _lock_secs() -> float:
    return float(getattr(settings, "LOOP_SETTINGS_LOCK_SECS", LOCK_SECS))


def _lock_busy() -> SettingsRefusal:
    return SettingsRefusal(
        CONFLICT, f"another loop-settings write held the lock for more than {_lock_secs():g}s: try again"
    )


@contextmanager
def settings_lock() -> Iterator[None]:
    """Hold the one lock of loop-settings writes: every process, every worker; SettingsRefusal(conflict) after
    settings.LOOP_SETTINGS_LOCK_SECS of waiting.

    On Postgres a transaction-scoped advisory lock (shared by every machine
    on the database; the block runs in that transaction); on SQLite, an
    exclusive file lock under settings.VAR_DIR.
    """
    deadline = time.monotonic() + _lock_secs()
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                while True:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
                    if cursor.fetchone()[0]:
                        break
                    if time.monotonic() > deadline:
                        raise _lock_busy()
                    time.sleep(0.05)
            yield
        return
    path = Path(getattr(settings, "LOOP_SETTINGS_LOCK", Path(settings.VAR_DIR) / "loop-settings.lock"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _lock_busy() from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
