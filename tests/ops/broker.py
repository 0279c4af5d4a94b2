"""Redis for the tests that need a real broker: its URL (db 6, or the one ``CELERY_BROKER_URL`` names) and whether it
answers (the ``redis_broker`` fixture, in conftest, points Celery and the settings at it)."""

from __future__ import annotations

import os
import socket

import pytest

URL = (
    os.environ.get("CELERY_BROKER_URL", "")
    if os.environ.get("CELERY_BROKER_URL", "").startswith("redis://")
    else ("redis://127.0.0.1:6379/6")
)


def redis_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


needs_redis = pytest.mark.skipif(not redis_answers(), reason="needs Redis on 127.0.0.1:6379")
