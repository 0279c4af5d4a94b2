"""The being pages in headless Chromium: log in, read the budget and plot, watch the journal, press Stop."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from singularity.being.actions import create_being, start_on_workers
from singularity.models import Being, Cycle, Event

# Playwright's sync API runs an event loop in this thread; the ORM calls in the test are still synchronous.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path("/tmp/being_detail.png")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def running_being() -> Being:
    """A being with three finished cycles, handed to the workers (nothing runs it in the test)."""
    being = create_being("nova", starting="10")
    start = timezone.now() - timedelta(minutes=10)
    balance = Decimal(10)
    for number, spent in enumerate(["0.0052", "0.0049", "0.0056"], start=1):
        balance -= Decimal(spent)
        Cycle.objects.create(
            being=being,
            number=number,
            status=Cycle.Status.COMPLETED,
            rounds=1,
            spent=Decimal(spent),
            balance_after=balance,
            started_at=start + timedelta(minutes=number),
            finished_at=start + timedelta(minutes=number, seconds=3),
        )
    Being.objects.filter(pk=being.pk).update(cycle=3, remaining=balance, api_spent=Decimal("0.0157"))
    being.refresh_from_db()
    return start_on_workers(being, by="alice")


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}{next_path}")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}{next_path}")


def test_a_person_reads_a_being_and_stops_it(page, live_server, alice) -> None:
    being = running_being()
    log_in(page, live_server, "/beings/nova/")

    summary = page.locator("#summary")
    assert summary.locator(".badge").inner_text() == "running"
    tiles = {
        t.locator(".label").inner_text().lower(): t.locator(".value").inner_text()
        for t in summary.locator(".stat").all()
    }
    assert tiles["starting"] == "$10.00"
    assert tiles["balance"] == "$9.9843"
    assert tiles["api spent"] == "$0.0157"
    assert tiles["net profit"] == "-$0.0157"

    balance, flow = page.locator("figure.plot svg").all()
    assert balance.is_visible() and flow.is_visible()
    assert balance.get_attribute("role") == "img"
    assert balance.locator("circle").count() == 4  # cycles 0-3
    assert flow.locator("circle").count() == 8  # spent and earned over cycles 0-3
    assert flow.locator("circle title").last.text_content() == "Earned to date at cycle 3: $0.00"

    # The journal polls: an event written now shows up without a reload.
    Being.objects.filter(pk=being.pk).update(event_seq=being.event_seq + 1)
    Event.objects.create(being=being, seq=being.event_seq + 1, cycle=3, kind="warning", data={"message": "late news"})
    page.locator("#journal").get_by_text("late news").wait_for(timeout=8000)

    page.screenshot(path=str(SCREENSHOT), full_page=True)

    page.get_by_role("button", name="Stop").click()
    page.wait_for_url(f"{live_server.url}/beings/nova/")
    assert page.locator("#summary .badge").inner_text() == "stopped"
    assert page.get_by_role("button", name="Resume").is_visible()
    assert "nova is stopped." in page.locator(".messages").inner_text()
    being.refresh_from_db()
    assert being.status == "stopped"


def test_the_list_creates_a_being_from_the_form(page, live_server, alice) -> None:
    log_in(page, live_server, "/beings/")
    page.fill("input[name=name]", "scout")
    page.fill("input[name=starting_usd]", "1.25")
    page.click("form.stacked button[type=submit]")
    page.wait_for_url(f"{live_server.url}/beings/scout/")
    assert page.locator("#summary .badge").inner_text() == "created"
    assert Being.objects.get(name="scout").starting == Decimal("1.25")
    page.goto(f"{live_server.url}/beings/")
    assert page.locator("table.beings tbody tr").first.locator("td").nth(4).inner_text() == "$1.25"
    page.screenshot(path="/tmp/being_list.png", full_page=True)
