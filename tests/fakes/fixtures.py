"""Pytest fixtures for the fakes, loaded by ``tests/conftest.py`` through ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.gateway import FakeGateway


@pytest.fixture
def fake_gateway() -> Iterator[FakeGateway]:
    """Yield a started FakeGateway on loopback; it is stopped after the test."""
    with FakeGateway() as fake:
        yield fake
