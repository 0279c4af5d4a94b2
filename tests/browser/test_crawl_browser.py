"""The crawl in headless Chromium at a laptop's width (1366 px) and a phone's (390 px).

The same demo and the same pages as tests/test_crawl.py (the main navigation
and one level of links from it). Every page must open without a console
error or a page error, and at either width no page may scroll sideways
(``document.documentElement.scrollWidth > window.innerWidth``): a wide table
scrolls inside its own box. At 390 px the navigation is one menu button with
the needs-you count beside it, and the decide card's buttons are a thumb's
size (as wide as the card, at least 44 px tall). Screenshots of a few pages are kept under ``$CRAWL_SHOTS`` when set.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from django.test import Client

from hitl.actions import open_card
from hitl.models import Card
from tests.browser.helpers import log_in
from tests.crawl_helpers import client_get, crawl

CHROMIUM = "/usr/bin/chromium"
WIDTHS = (1366, 390)
#: Where to keep screenshots (outside the repository), e.g. CRAWL_SHOTS=/tmp/shots; none kept when unset.
SHOTS = os.environ.get("CRAWL_SHOTS", "")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]

#: The scrollWidth of the page and each element wider than the window that does not scroll in its own box.
OVERFLOW = """() => {
  const width = window.innerWidth;
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.right > width + 1 && box.width > 0) {
      let inside = false;
      for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
        const style = getComputedStyle(up);
        if (['auto', 'scroll', 'hidden'].includes(style.overflowX)) { inside = true; break; }
      }
      if (!inside) wide.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
        (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
        ' ' + Math.round(box.right) + 'px');
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, wide: wide.slice(0, 4)};
}"""


def pending_decide_card() -> Card:
    """A pending decide card with the demo's words (the demo's own was accepted), for the inbox at a phone's width."""
    accepted = Card.objects.filter(kind=Card.Kind.DECIDE).order_by("-created_at").first()
    assert accepted is not None
    return open_card(
        producer=accepted.producer,
        kind=accepted.kind,
        key=f"{accepted.key}:crawl",
        title=accepted.title,
        subject=accepted.subject,
        subject_url=accepted.subject_url,
        text=accepted.text,
        options=accepted.options,
        expires_at=accepted.expires_at,
    )


def crawled_paths(alice) -> list[str]:
    """The pages tests/test_crawl.py reaches, read through a test client (fast), in the order it found them."""
    client = Client()
    client.force_login(alice)
    pages = crawl(client_get(client), "/evolution/")
    return [url for url, page in pages.items() if page.status < 400 and page.links is not None]


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways_or_logs_an_error(demo, alice, live_server, page, width) -> None:
    card = pending_decide_card()
    paths = crawled_paths(alice)
    assert "/inbox/" in paths and len(paths) > 40
    page.set_viewport_size({"width": width, "height": 844 if width < 500 else 900})
    errors: list[str] = []
    here = {"path": ""}
    page.on("console", lambda m: m.type == "error" and errors.append(f"{here['path']}: console: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"{here['path']}: page error: {e}"))
    log_in(page, live_server, "/evolution/")

    wide: list[str] = []
    for path in paths:
        here["path"] = path
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        found = page.evaluate(OVERFLOW)
        if found["scroll"] > found["width"]:
            wide.append(f"{path}: {found['scroll']} px wide at {found['width']}: {', '.join(found['wide'])}")
    for path, name in (("/inbox/", "inbox"), ("/evolution/", "fleet"), ("/evolution/rate/", "rate")):
        page.goto(f"{live_server.url}{path}")
        shot(page, f"{name}-{width}.png")
    cycle = next(p for p in paths if p.startswith("/evolution/cycles/"))
    entity = next(p for p in paths if re.fullmatch(r"/evolution/entities/[^/]+/[^/]+/", p))
    for path, name in ((cycle, "cycle"), (entity, "entity")):
        page.goto(f"{live_server.url}{path}")
        shot(page, f"{name}-{width}.png")
    assert errors == [], "\n".join(errors)
    assert wide == [], "\n".join(wide)

    # The decide card and the rating card, answerable with one thumb: each button as wide as the card, 44 px tall.
    page.goto(f"{live_server.url}/inbox/")
    article = page.locator(f"#card-{card.pk}")
    article.scroll_into_view_if_needed()
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        article.screenshot(path=str(Path(SHOTS) / f"decide-card-{width}.png"))
    rating = page.locator("article.hitl-card.pending").filter(has=page.locator(".badge.kind", has_text="rating"))
    assert rating.count() == 1
    if SHOTS:
        rating.screenshot(path=str(Path(SHOTS) / f"rating-card-{width}.png"))
    for each in (article, rating):
        buttons = each.locator("form button[type=submit]")
        assert buttons.count() >= 2
        card_box = each.bounding_box()
        for n in range(buttons.count() if width < 500 else 0):
            box = buttons.nth(n).bounding_box()
            assert box["height"] >= 44, f"button {n} is {box['height']} px tall"
            assert box["width"] >= card_box["width"] * 0.8, f"button {n} is {box['width']} of {card_box['width']} px"


def test_at_a_phone_width_the_navigation_is_one_menu_button_with_the_needs_you_count(
    demo, alice, live_server, page
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "/evolution/")
    nav = page.locator("nav[aria-label=main]")
    assert not page.get_by_role("link", name="Pull requests").is_visible()
    bar = page.locator("header.topbar").bounding_box()
    assert bar["height"] <= 64, f"the bar is {bar['height']} px tall"
    assert page.locator("header.topbar .needs-you-bar").is_visible()
    assert "need" in page.locator("header.topbar .needs-you-bar").inner_text().lower()  # "Needs you", "1 needs you"
    page.get_by_text("Menu").click()
    page.get_by_role("link", name="Pull requests").wait_for(state="visible")
    nav.get_by_role("link", name="Pull requests").click()
    page.wait_for_url(f"{live_server.url}/evolution/pulls/")


def test_rating_a_run_on_rate_runs_logs_no_console_error(demo, alice, live_server, page) -> None:
    """Each rateable run's row swaps in place and its entity's calibration out of band, with a target there or not."""
    page.set_viewport_size({"width": 390, "height": 844})
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    log_in(page, live_server, "/evolution/rate/")
    rows = page.locator(".rate-run")
    assert rows.count() >= 2
    rated = 0
    for n in range(rows.count()):
        row = rows.nth(n)
        button = row.locator(".choices button").first
        if not button.count():
            continue
        row_id = row.get_attribute("id")
        button.click()
        page.locator(f"#{row_id} .answer").wait_for(timeout=8000)
        rated += 1
    assert rated >= 2
    page.wait_for_timeout(300)
    assert errors == [], "\n".join(errors)
