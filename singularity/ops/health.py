"""``/healthz`` (the process answers; touches nothing) and ``/readyz`` (every part the work needs, each named).

Readiness asks, in turn: the database answers and every migration is
applied; the broker answers; the brain checkout is present; beat ticked
within READY_BEAT_STALE_SECS; every queue has a worker whose pulse is
fresher than READY_WORKER_STALE_SECS (``singularity.pulse``). 200 when all
hold, else 503 — both with the parts by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from singularity import pulse
from singularity.queues import QUEUES, broker_reachable

Check = Callable[[], tuple[bool, str]]

_migrated = {"done": False}


def database() -> tuple[bool, str]:
    """The database answers a query and has no migration left to apply."""
    from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
    from django.db.migrations.executor import MigrationExecutor

    connection = connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if not _migrated["done"]:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
            if plan:
                return False, f"{len(plan)} migrations not applied: run manage.py migrate"
            _migrated["done"] = True  # applied migrations stay applied while the process lives
    except OperationalError as exc:
        return False, "DATABASE_URL: " + " ".join(str(exc).split())[:200]
    return True, "answers; migrations applied"


def broker() -> tuple[bool, str]:
    """The Celery broker accepts a connection."""
    reason = broker_reachable()
    return (True, "answers") if reason is None else (False, f"CELERY_BROKER_URL: {reason}")


def brain() -> tuple[bool, str]:
    """The brain checkout is on disk (``brain sync`` made it)."""
    checkout = settings.BRAIN_CHECKOUT
    if (checkout / ".git").exists():
        return True, "checked out"
    return False, "BRAIN_CHECKOUT: no checkout yet; run manage.py brain sync (or wait for the worker's sync)"


def beat() -> tuple[bool, str]:
    """Beat ticked recently."""
    try:
        age = pulse.beat_age()
    except Exception as exc:  # noqa: BLE001 - the pulse store unreachable: beat's tick is unknown, so not ready
        return False, f"pulse unreadable: {type(exc).__name__}"
    if age is None:
        return False, "never ticked: start celery beat"
    if age > settings.READY_BEAT_STALE_SECS:
        return False, f"last ticked {age:.0f} s ago (more than {settings.READY_BEAT_STALE_SECS:g} s)"
    return True, f"ticked {age:.0f} s ago"


def workers() -> tuple[bool, str]:
    """Every queue has a live worker."""
    try:
        alive = pulse.alive_queues(stale=settings.READY_WORKER_STALE_SECS)
    except Exception as exc:  # noqa: BLE001 - the pulse store unreachable: no worker can be seen
        return False, f"pulse unreadable: {type(exc).__name__}"
    missing = [queue for queue in QUEUES if not alive.get(queue)]
    if missing:
        return False, "no live worker on " + ", ".join(missing)
    return True, ", ".join(f"{queue}: {len(alive[queue])}" for queue in QUEUES)


CHECKS: dict[str, Check] = {
    "database": database,
    "broker": broker,
    "brain": brain,
    "beat": beat,
    "workers": workers,
}


def readiness() -> tuple[bool, dict[str, Any]]:
    """Run every check; return whether all hold and the parts by name (``{"ok", "detail"}`` each)."""
    parts: dict[str, Any] = {}
    for name, check in CHECKS.items():
        ok, detail = check()
        parts[name] = {"ok": ok, "detail": detail}
    ready = all(part["ok"] for part in parts.values())
    return ready, parts
