"""Fixtures of the ops tests."""

from __future__ import annotations

import pytest
from kombu import pools

from singularity.celery import app as celery_app
from tests.ops.broker import URL


@pytest.fixture
def redis_broker(settings):
    """Celery and the settings pointed at Redis, emptied before and after."""
    import redis

    client = redis.Redis.from_url(URL)
    client.flushdb()
    before = celery_app.conf.broker_url

    def fresh_pools() -> None:
        """Forget the connection and producer pools made for the other broker (Celery makes them lazily again)."""
        pools.reset()  # kombu's pools, by connection: closed and forgotten
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    fresh_pools()
    celery_app.conf.broker_url = URL
    settings.CELERY_BROKER_URL = URL
    yield client
    fresh_pools()
    celery_app.conf.broker_url = before
    client.flushdb()
