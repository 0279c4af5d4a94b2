"""Shared fixtures: named users (alice the owner, bob a teammate, charlie with no access)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.fakes.mcp_fixtures",
    "tests.fakes.telegram_fixtures",
    "tests.fakes.github_fixtures",
    "tests.fakes.outbound_fixtures",
    "tests.evolution.demo_helpers",
    "tests.crawl_helpers",
]


@pytest.fixture(autouse=True, scope="session")
def _compiled_once_keys_checked() -> None:
    """Every statement compiled once a process (``singularity.written``) is compiled afresh too and must match:
    a key that misses an input fails the test that changes the input."""
    from singularity import written

    written.CHECK_KEYS = True


@pytest.fixture(autouse=True)
def _notify_destinations_read_afresh() -> None:
    """A test starts with no destination: the process's cached read (``singularity.notify.events``) is set so,
    since a rolled-back test sends no signal (a destination the test saves drops it again)."""
    from singularity.notify.events import prime

    prime([])


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_superuser("alice", "alice@example.org", "alice-password")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob", "bob@example.org", "bob-password", is_staff=True)


@pytest.fixture
def charlie(db) -> User:
    return User.objects.create_user("charlie", "charlie@example.org", "charlie-password")


# --- The Postgres-only tests say where they ran ----------------------------------------------------------------

#: Outcomes of the tests marked ``postgres`` (real parallel workers), by node id: skipped on SQLite, run in CI's
#: Postgres pass (``.ci/run``). The summary says which, so a pass that skipped them all is never silent.
_POSTGRES_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report) -> None:
    if "postgres" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _POSTGRES_OUTCOMES[report.nodeid] = report.outcome


def _database_vendor() -> str:
    from django.db import connection

    return connection.vendor


def postgres_summary() -> tuple[str, bool]:
    """The summary line of the ``postgres``-marked tests, and whether the run broke its promise (on Postgres, one
    of them was skipped or failed to run)."""
    vendor = _database_vendor()
    ran = sum(1 for outcome in _POSTGRES_OUTCOMES.values() if outcome == "passed")
    skipped = sum(1 for outcome in _POSTGRES_OUTCOMES.values() if outcome == "skipped")
    failed = len(_POSTGRES_OUTCOMES) - ran - skipped
    line = f"postgres-marked tests: {ran} passed on {vendor}, {skipped} skipped, {failed} failed"
    if vendor != "postgresql" and skipped:
        line += " (they run in CI's Postgres pass: .ci/run)"
    return line, vendor == "postgresql" and skipped > 0


def pytest_terminal_summary(terminalreporter) -> None:
    if not _POSTGRES_OUTCOMES:
        return
    line, broken = postgres_summary()
    terminalreporter.write_sep("-", line, red=broken, green=not broken)
    if broken:
        terminalreporter.write_line("a postgres-marked test was skipped on Postgres: the run fails")


def pytest_sessionfinish(session, exitstatus) -> None:
    if _POSTGRES_OUTCOMES and postgres_summary()[1] and session.exitstatus == 0:
        session.exitstatus = 1
