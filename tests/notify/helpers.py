"""Destinations pointed at the loopback receivers, and a day of time travel."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from singularity.celery import app as celery_app
from singularity.notify.models import Destination

SECRET = "shared-secret-for-tests"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def slack_destination(url: str, name: str = "ops", **fields) -> Destination:
    return Destination.objects.create(name=name, kind=Destination.Kind.SLACK, url=url, **fields)


def webhook_destination(url: str, name: str = "ci", secret: str = SECRET, **fields) -> Destination:
    return Destination.objects.create(name=name, kind=Destination.Kind.WEBHOOK, url=url, secret=secret, **fields)


@contextmanager
def eager() -> Iterator[None]:
    """Run enqueued tasks inline (the after-commit send), as a worker would at once."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = before
