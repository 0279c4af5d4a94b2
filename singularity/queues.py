"""The Celery queues: which task goes where, how deep each queue is, and whether the broker answers.

Grading, the loop and the beings each have a queue of their own, so a
grading backlog never starves the loop's tick or a being's cycle; everything
else (brain sync, cards, deliveries, sweeps of the lower apps) goes to the
default queue. ``manage.py up`` starts one worker per queue.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

DEFAULT = "celery"
#: Every queue ``up`` starts a worker for, in start order.
QUEUES = ("grading", "loop", "beings", DEFAULT)

#: Task-name prefixes → queue (Celery's ``task_routes``, glob patterns). Imported by settings: no Django here.
ROUTES: dict[str, dict[str, str]] = {
    # Grading's jobs alone: its sweeps run on the default queue, so a backlog never holds them up.
    "grading.tasks.grading.grade_execution": {"queue": "grading"},
    "evolution.tasks.*": {"queue": "loop"},
    "singularity.tasks.*": {"queue": "beings"},
}

#: How long a readiness probe waits for the broker before it calls it unreachable.
BROKER_TIMEOUT_SECS = 2.0


def _connection(app: Any) -> Any:
    from django.conf import settings

    # The URL as settings hold it now (a test may point it elsewhere); the transport options from the app.
    return app.connection_for_read(url=settings.CELERY_BROKER_URL, connect_timeout=BROKER_TIMEOUT_SECS)


def broker_reachable(app: Any | None = None) -> str | None:
    """Return None when the broker accepts a connection within a couple of seconds, else the reason it does not."""
    app = app or _app()
    try:
        with _connection(app) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_SECS)
    except Exception as exc:  # noqa: BLE001 - any transport's failure means the same to a probe: unreachable
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return None


def depth(queue: str, app: Any | None = None) -> int | None:
    """Return how many messages ``queue`` holds in the broker — waiting, or taken by a worker and not yet acknowledged
    (``reserved``) — 0 for a queue never declared, None when the broker is unreachable."""
    app = app or _app()
    try:
        with _connection(app) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_SECS)
            channel = conn.default_channel
            try:
                waiting = int(channel.queue_declare(queue=queue, passive=True).message_count)
            except conn.channel_errors:
                waiting = 0  # never declared: nothing waiting
            return waiting + reserved(queue)
    except Exception as exc:  # noqa: BLE001 - unreachable, whatever the transport says
        log.debug("queue depth of %s unknown: %s", queue, exc)
        return None


def reserved(queue: str) -> int:
    """Messages of ``queue`` a worker has taken and not yet acknowledged (Redis keeps them in its ``unacked`` hash).

    A worker prefetches a few messages beyond those it runs: they have left the queue's list but are still the
    broker's until acknowledged (redelivered if the worker dies). 0 for a broker other than Redis.
    """
    import json

    from django.conf import settings

    url = str(settings.CELERY_BROKER_URL)
    if not url.startswith(("redis://", "rediss://")):
        return 0
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=BROKER_TIMEOUT_SECS, socket_timeout=BROKER_TIMEOUT_SECS)
    count = 0
    for raw in client.hvals("unacked"):  # kombu's Redis transport: [message, exchange, routing key]
        try:
            if json.loads(raw)[2] == queue:  # each queue is bound by its own name (settings.CELERY_TASK_QUEUES)
                count += 1
        except (ValueError, IndexError, TypeError):
            continue
    return count


def depths(app: Any | None = None) -> dict[str, int | None]:
    """Return every queue's depth (None for each when the broker is unreachable)."""
    app = app or _app()
    return {queue: depth(queue, app) for queue in QUEUES}


def _app() -> Any:
    from singularity.celery import app

    return app
