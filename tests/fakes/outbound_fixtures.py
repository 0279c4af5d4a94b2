"""Pytest fixtures for the loopback Slack and webhook receivers (``tests/conftest.py`` loads them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.outbound import FakeSlack, FakeWebhook


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def fake_webhook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as fake:
        yield fake
