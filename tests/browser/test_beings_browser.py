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
    assert tiles["balance"] == "$9.98"
    assert summary.locator(".stat .value .money").nth(1).get_attribute("title") == "9.9843 USD"  # exact on hover
    assert tiles["api spent"] == "$0.02"
    assert tiles["net profit"] == "-$0.02"

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


def test_the_being_page_follows_a_living_being_without_a_reload(page, live_server, alice) -> None:
    being = start_on_workers(create_being("lively", starting="10"), by="alice")
    log_in(page, live_server, "/beings/lively/")
    assert page.locator("#cycles").get_by_text("No cycles yet.").is_visible()
    assert page.locator("#plots svg").first.locator("text").text_content() == "No cycles yet"
    page.evaluate("window.__not_reloaded = true")

    # A worker runs two cycles and the being remembers something: written behind the page's back.
    start = timezone.now() - timedelta(seconds=20)
    balance = Decimal(10)
    for number, spent in enumerate(["0.0052", "0.0049"], start=1):
        balance -= Decimal(spent)
        Cycle.objects.create(
            being=being,
            number=number,
            status=Cycle.Status.COMPLETED,
            rounds=2,
            spent=Decimal(spent),
            balance_after=balance,
            started_at=start + timedelta(seconds=number),
            finished_at=start + timedelta(seconds=number + 2),
        )
    Being.objects.filter(pk=being.pk).update(
        cycle=2, remaining=balance, api_spent=Decimal("0.0101"), memories={"sales": "none yet; check again"}
    )

    page.locator("#cycles table.cycles tbody tr").nth(1).wait_for(timeout=10000)
    rows = page.locator("#cycles table.cycles tbody tr")
    assert rows.first.locator("td").first.inner_text() == "2"
    spent = rows.first.locator("td").nth(4).locator(".money")
    assert spent.inner_text() == "$0.0049" and spent.get_attribute("title") == "0.0049 USD"
    balance_chart = page.locator("#plots svg").first
    balance_chart.locator("circle").nth(2).wait_for(state="attached", timeout=10000)
    ticks = [t.text_content() for t in balance_chart.locator('.axis text[text-anchor="end"]').all()]
    assert ticks and all(t.startswith("$9.9") or t == "$10.00" for t in ticks), ticks  # fits the spend
    page.locator("#mind").get_by_text("none yet; check again").wait_for(timeout=10000)
    assert page.locator("#summary .stat .value .money").nth(1).inner_text() == "$9.99"
    assert page.evaluate("window.__not_reloaded") is True
    page.screenshot(path="/tmp/being_live.png", full_page=True)
