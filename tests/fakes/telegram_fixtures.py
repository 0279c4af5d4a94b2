"""Pytest fixtures for the fake Telegram, loaded by ``tests/conftest.py`` through ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from singularity.celery import app as celery_app
from tests.fakes.telegram import CHAT_ID, TOKEN, FakeTelegram

WEBHOOK_SECRET = "webhook-secret-for-tests"


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    """Yield a started fake Bot API on loopback; it is stopped after the test."""
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture
def telegram_on(settings: Any, fake_telegram: FakeTelegram) -> Iterator[FakeTelegram]:
    """Turn Telegram on against the fake (no send pacing) and run enqueued tasks inline; yield the fake."""
    settings.TELEGRAM_BOT_TOKEN = TOKEN
    settings.TELEGRAM_CHAT_ID = str(CHAT_ID)
    settings.TELEGRAM_API_URL = fake_telegram.api_url
    settings.TELEGRAM_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.TELEGRAM_USERS = ""
    settings.TELEGRAM_SEND_PER_SECOND = 1000.0
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield fake_telegram
    finally:
        celery_app.conf.task_always_eager = eager
