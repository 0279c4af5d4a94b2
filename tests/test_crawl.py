"""Every page a person reaches from the navigation on a make-run-like demo opens and reads in people's words.

The demo brain synced, its triage run until the loop asks, the proposal
accepted (its PR open and checked on the local forge), a Pulse tick graded and
waiting for a rating, the demo being created: then the crawl logs in and
follows every link of the main navigation and one level of links from each of
those pages (tests/crawl_helpers.py).
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.crawl_helpers import client_get, crawl

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_every_page_reachable_from_the_navigation_opens_without_an_error_or_a_raw_word(demo, client: Client) -> None:
    assert client.post("/accounts/login/", {"username": "alice", "password": "alice-password"}).status_code == 302

    pages = crawl(client_get(client), "/evolution/")
    wrong = [f"{page.url}: {', '.join(page.problems)}" for page in pages.values() if page.problems]
    assert wrong == [], "\n".join(wrong)
    reached = set(pages)
    for expected in ("/evolution/pulls/", "/inbox/", "/evolution/rate/", "/evolution/needs-you/", "/admin/"):
        assert expected in reached, f"{expected} not reached ({len(reached)} pages)"
    assert any(re.fullmatch(r"/evolution/cycles/\d+/", url) for url in reached)
    assert any(re.fullmatch(r"/evolution/pulls/\d+/", url) for url in reached)
    assert len(reached) > 40


def test_no_link_inside_the_dashboard_points_at_the_public_address(demo, alice, client: Client) -> None:
    """Links inside the dashboard are relative: one at SINGULARITY_PUBLIC_URL would leave the session's host."""
    client.force_login(alice)
    for path in ("/evolution/", "/inbox/", "/evolution/needs-you/", "/evolution/pulls/"):
        html = client.get(path).content.decode()
        assert "http://dash.example" not in html, path
    inbox = client.get("/inbox/").content.decode()
    assert re.search(r'whole run: <a href="/evolution/go/run:[0-9a-f-]+/">/evolution/go/run:', inbox)  # the card's link
