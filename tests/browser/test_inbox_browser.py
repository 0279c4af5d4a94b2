"""The inbox in headless Chromium: log in, answer a card inline, see the handler's notice and the card in history."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hitl.models import Card, Notice
from tests.hitl.helpers import RATING_FORM, Recorder, make_card, recording_handler

# Playwright's sync API runs an event loop in this thread; the ORM calls in the test are still synchronous.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
BEFORE = Path("/tmp/inbox_before.png")
AFTER = Path("/tmp/inbox_after.png")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


@pytest.fixture
def handler() -> Iterator[Recorder]:
    with recording_handler() as recorder:
        yield recorder


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}{next_path}")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}{next_path}")


def test_a_person_answers_a_card_in_the_inbox(page, live_server, alice, handler) -> None:
    handler.post_notices = True
    card = make_card(key="decide:browser", title="Shorter triage rules", hours=5)
    make_card(kind="rating", key="rating:browser", title="Rate run 42", subject="run 42", options=RATING_FORM)
    log_in(page, live_server, "/inbox/")

    assert page.locator("#inbox-count").inner_text() == " (2)"
    article = page.locator(f"#card-{card.pk}")
    assert "answer by " in article.inner_text()
    assert article.locator("time").nth(1).get_attribute("title").startswith("in 4 h · ")
    page.screenshot(path=str(BEFORE), full_page=True)

    article.locator("input[name=note]").fill("off-brand")
    article.get_by_role("button", name="Skip").click()

    # HTMX swaps the card in place, and the handler's notice and the count out of band.
    page.locator(f"#card-{card.pk} .answer-line").wait_for(timeout=8000)
    assert "Answered by alice: Skip" in page.locator(f"#card-{card.pk} .answer-line").inner_text()
    page.locator("#notices").get_by_text("Heard: Shorter triage rules — Skip").wait_for(timeout=8000)
    assert page.locator("#inbox-count").inner_text() == " (1)"
    # Without a reload the answered card has moved to History and the count follows (issue 15).
    assert page.locator("#pending-count").inner_text() == "1"
    assert "Shorter triage rules" in page.locator("#history").inner_text()
    assert "Shorter triage rules" not in page.locator("#pending").inner_text()

    card.refresh_from_db()
    assert (card.status, card.answer["note"], card.responded_by) == ("answered", "off-brand", alice)
    assert handler.calls == [(card.pk, "answered", card.answer, "alice")]
    assert Notice.objects.filter(title__startswith="Heard:").count() == 1

    # After a reload the answered card sits in the history, the rating still waits.
    page.reload()
    assert "Shorter triage rules" in page.locator("#history").inner_text()
    assert "Shorter triage rules" not in page.locator("#pending").inner_text()
    assert "Rate run 42" in page.locator("#pending").inner_text()
    page.screenshot(path=str(AFTER), full_page=True)
    assert Card.objects.filter(status="pending").count() == 1


def test_a_person_pages_the_waiting_cards_and_answers_one_on_the_second_page(page, live_server, alice, handler) -> None:
    """22 cards wait: 20 on the first page, 2 older on the second; one answered there leaves 21 waiting."""
    cards = [make_card(key=f"decide:paged{i}", title=f"Waiting card {i:02d}") for i in range(1, 23)]
    log_in(page, live_server, "/inbox/")

    assert page.locator("#pending-count").inner_text() == "22"
    assert page.locator("#pending article.pending").count() == 20
    page.locator("#pending nav.pager").get_by_role("link", name="Older →").click()
    page.wait_for_url(f"{live_server.url}/inbox/?pending=2")
    assert page.locator("#pending article.pending").count() == 2
    assert "Showing 21–22, the newest first." in page.locator("#pending").inner_text()

    oldest = page.locator(f"#card-{cards[0].pk}")
    oldest.get_by_role("button", name="Accept").click()
    page.locator("#history").get_by_text("Waiting card 01").wait_for(timeout=8000)
    assert page.locator("#pending-count").inner_text() == "21"
    assert page.locator("#inbox-count").inner_text() == " (21)"
    assert page.locator("#pending article.pending").count() == 1
    assert Card.objects.filter(status="pending").count() == 21
