"""The loop in headless Chromium on the demo brain: a proposal card in the inbox, Accept, the PR's Merge button,
the watch settling, and the lesson on the cycle story."""

from __future__ import annotations

import os
import shutil

import pytest

from evolution.models import Cycle, Round
from hitl.models import Card
from tests.evolution.demo_helpers import drive_until_card, run, tickets, triage, wrong

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def test_a_person_accepts_merges_and_reads_the_lesson(page, live_server, alice, embedded) -> None:
    card, failed = drive_until_card(tickets())
    assert card.kind == Card.Kind.DECIDE
    page.goto(f"{live_server.url}/inbox/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/inbox/")
    assert "Optimizing: accuracy" in page.inner_text("main")
    page.click("button:has-text('Accept')")
    page.wait_for_selector("text=Accept", state="attached")

    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    # The click's POST, the apply and the pre-merge check's replays run on the live server's thread: wait for the
    # check to answer (a loaded machine is slow).
    for _ in range(900):
        cycle.refresh_from_db()
        if cycle.phase not in (Cycle.Phase.DECIDING, Cycle.Phase.APPLYING, Cycle.Phase.CHECKING):
            break
        page.wait_for_timeout(100)
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and cycle.phase == Cycle.Phase.MERGE_WAIT, (rnd.error, cycle.reason)
    page.goto(f"{live_server.url}/evolution/cycles/{cycle.pk}/")
    assert "held-out" in page.inner_text("#chapter-check")
    page.goto(f"{live_server.url}/evolution/pulls/{rnd.pr_number}/")
    text = page.inner_text("main")
    assert "singularity/diff-gate" in text and "singularity/validation" in text
    if page.locator("#merge-anyway-button").count():
        page.click("#merge-anyway-button")  # the check could not show it works: a person merges on their word
    else:
        page.click("#merge-button")
    page.wait_for_selector("text=Merged PR")
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING

    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason
    page.goto(f"{live_server.url}/evolution/cycles/{cycle.pk}/")
    story = page.inner_text("main")
    assert "Learn" in story and "Improvement" in story
    assert rnd.hypothesis[:40] in story
    page.screenshot(path="/tmp/loop_story.png", full_page=True)
