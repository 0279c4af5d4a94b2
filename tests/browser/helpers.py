"""What browser tests share beyond the page fixture (tests/browser/conftest.py)."""

from __future__ import annotations


def log_in(page, live_server, path: str) -> None:
    """Sign in as alice on the login page ``path`` redirects to, and land on ``path``."""
    page.goto(f"{live_server.url}{path}")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}{path}")
