"""Shared fixtures: named users (alice the owner, bob a teammate, charlie with no access)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.fakes.mcp_fixtures",
    "tests.fakes.telegram_fixtures",
    "tests.fakes.github_fixtures",
    "tests.evolution.demo_helpers",
    "tests.crawl_helpers",
]


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_superuser("alice", "alice@example.org", "alice-password")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob", "bob@example.org", "bob-password", is_staff=True)


@pytest.fixture
def charlie(db) -> User:
    return User.objects.create_user("charlie", "charlie@example.org", "charlie-password")
