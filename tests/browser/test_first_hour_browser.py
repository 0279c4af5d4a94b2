"""A person's first hour in headless Chromium (issue 15): the decide card shows the change before Accept, and the
links on cards, the needs-you list and the fleet keep the person logged in (they are relative, never at
SINGULARITY_PUBLIC_URL, which the demo fixture sets to another host)."""

from __future__ import annotations

import os
import shutil

import pytest

from grading.demo import TRIAGE_PATH
from hitl.models import Card
from tests.browser.helpers import log_in
from tests.evolution.demo_helpers import drive_until_card, tickets

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def still_in(page, live_server) -> None:
    assert page.url.startswith(live_server.url), page.url
    assert "/accounts/login/" not in page.url, page.url
    assert page.locator("nav[aria-label=main]").get_by_text("Inbox").is_visible()


def test_the_decide_card_shows_the_diff_and_its_links_keep_the_session(page, live_server, alice, embedded) -> None:
    card, _failed = drive_until_card(tickets())
    assert card.kind == Card.Kind.DECIDE
    log_in(page, live_server, "/inbox/")

    article = page.locator(f"#card-{card.pk}")
    text = article.locator(".card-text").inner_text()
    assert f"--- a/{TRIAGE_PATH}" in text and f"+++ b/{TRIAGE_PATH}" in text
    assert any(line.startswith("+-") and "->" in line for line in text.splitlines()), text  # a changed rule line
    assert article.get_by_role("button", name="Accept").is_visible()

    # The card's Full proposal link: the whole diff, and still logged in.
    assert "Full proposal" in text
    article.locator(".card-text a[href^='/evolution/go/cycle:']").first.click()
    page.wait_for_load_state()
    still_in(page, live_server)
    assert "The change" in page.inner_text("main")
    assert page.locator(".diff-add").count() >= 1

    # Needs you: the decide wait links to the cycle; the click keeps the session.
    page.goto(f"{live_server.url}/evolution/needs-you/")
    page.locator("main a[href*='/evolution/']").first.click()
    page.wait_for_load_state()
    still_in(page, live_server)

    # The fleet: the entity's link and its cycle's link keep the session.
    page.goto(f"{live_server.url}/evolution/")
    page.locator("main a[href^='/evolution/entities/scenario/triage/']").first.click()
    page.wait_for_load_state()
    still_in(page, live_server)
    assert "Support triage" in page.inner_text("main")


def test_a_browser_walks_every_navigation_link_logged_in(page, live_server, alice, embedded) -> None:
    drive_until_card(tickets())
    log_in(page, live_server, "/evolution/")
    hrefs = page.locator("nav[aria-label=main] a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert "/evolution/runs/" in hrefs and "/evolution/pulls/" in hrefs
    for href in hrefs:
        response = page.goto(f"{live_server.url}{href}")
        assert response is not None and response.status < 400, (href, response and response.status)
        if href.startswith(("/admin/", "/api/")):  # the admin and the API docs have navigations of their own
            assert "/accounts/login/" not in page.url and "/admin/login/" not in page.url, href
        else:
            still_in(page, live_server)
