"""The entity page's Spend section and the fleet's month in headless Chromium (issue 16)."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from evolution.core import spend
from tests.browser.test_beings_browser import log_in
from tests.evolution.loop_helpers import looped
from tests.evolution.test_economics import CEILING, COUNTED, EVOLVED, REGRESSED, judged, shipped, spent_cycle
from tests.grading.grading_helpers import make_run

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path("/tmp/entity_spend.png")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def a_month_of_cycles():
    entity = looped("triage", manifest=CEILING)
    now = timezone.now()
    first = spend.month_of(now)[0]  # this month's cycles, whatever today is
    gain = shipped(entity, at=first, status="validated", record=EVOLVED, proposer="0.25")
    shipped(entity, at=first + timedelta(seconds=1), status="validated", record=COUNTED, proposer="0.5")
    shipped(
        entity, at=first + timedelta(seconds=2), status="regressed", record=REGRESSED, proposer="1", revert="merged"
    )
    spent_cycle(entity, at=first + timedelta(seconds=3), proposer="0.004", status="skipped")
    shipped(entity, at=now - timedelta(days=45), status="validated", record=COUNTED, proposer="2")
    judged(make_run(entity), cost="0.03", reason=f"exempt:watch:{gain.pk}", at=first + timedelta(seconds=4))
    return entity


def test_a_person_reads_what_the_loop_spent_on_an_entity_and_what_it_moved(page, live_server, alice) -> None:
    entity = a_month_of_cycles()
    log_in(page, live_server, entity.get_absolute_url())
    section = page.locator("#entity-spend")
    section.wait_for()
    text = section.inner_text()
    assert "This month the loop spent $1.78 on this entity, of the brain's monthly ceiling of $10.00" in text
    assert "accuracy 0.125 in [0.05, 0.2] at 90%" in text and "Reverted" in text
    assert section.locator("svg").count() == 1
    section.screenshot(path=str(SCREENSHOT))
    page.goto(f"{live_server.url}/evolution/")
    cell = page.locator("#entity-scenario-triage .month-spend").inner_text()
    assert "$1.78 of $10.00" in cell and "2 kept · 1 regressed · 4 cycles" in cell
    page.locator("#entity-scenario-triage").screenshot(path="/tmp/fleet_month.png")
