"""Rate runs in headless Chromium: log in, rate a run inline, see people's median and the calibration change."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from grading.models import Rating
from tests.grading.rating_helpers import make_entity, make_grade, make_run

# Playwright's sync API runs an event loop in this thread; the ORM calls in the test are still synchronous.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path("/tmp/rate_runs.png")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}{next_path}")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}{next_path}")


def test_a_person_rates_a_run_and_sees_the_median_and_calibration_change(page, live_server, alice, bob) -> None:
    entity = make_entity("storyboard", name="Storyboard")
    now = timezone.now()
    # Four runs bob already rated in agreement with the judge: one pair short of minPairs 5.
    for n in range(4):
        run = make_run(entity, completed_at=now - timedelta(hours=10 - n))
        make_grade(run, metrics={"layout_fit": 0.75, "quality": 0.8})
        Rating.objects.create(execution=run, metric_id="layout_fit", user=bob, value=4, normalized=0.75)
    newest = make_run(entity, completed_at=now - timedelta(minutes=5))
    make_grade(newest, metrics={"layout_fit": 0.5, "quality": 0.7})

    log_in(page, live_server, "/evolution/rate/")
    calibration = page.locator(f"#calibration-{entity.pk} tr[data-metric=layout_fit]")
    assert calibration.locator(".badge").inner_text() == "low"
    assert "4 of 5 pairs" in calibration.inner_text()

    row = page.locator(f"#run-{newest.id}")
    cell = row.locator("tr[data-metric=layout_fit]")
    assert cell.locator("td.judge").inner_text() == "3 · Acceptable"
    assert cell.locator("td.people").inner_text() == "—"

    cell.locator("input[name=note]").fill("scenes hold together")
    cell.get_by_role("button", name="4 · Good").click()

    # The row and the calibration swap in place (no navigation).
    page.locator(f"#run-{newest.id} .answer.ok").wait_for(timeout=8000)
    assert page.url == f"{live_server.url}/evolution/rate/"
    cell = page.locator(f"#run-{newest.id} tr[data-metric=layout_fit]")
    assert cell.locator("td.people").inner_text().startswith("4 · Good")
    assert cell.get_by_role("button", name="4 · Good").get_attribute("aria-pressed") == "true"
    calibration = page.locator(f"#calibration-{entity.pk} tr[data-metric=layout_fit]")
    calibration.locator(".badge.ok").wait_for(timeout=8000)
    assert "5 of 5 pairs agree" in calibration.inner_text()
    assert calibration.locator("td.num").nth(1).inner_text() == "100%"

    rating = Rating.objects.get(execution=newest, user=alice)
    assert (rating.value, rating.note) == (4, "scenes hold together")

    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # Changing one's mind replaces the rating: 1 of 1–5 (0.0) is now a pair that disagrees with the judge's 0.5.
    cell.get_by_role("button", name="1 · Unusable").click()
    page.locator(f"#run-{newest.id} tr[data-metric=layout_fit] button[aria-pressed=true]").filter(
        has_text="1 · Unusable"
    ).wait_for(timeout=8000)
    assert Rating.objects.filter(execution=newest, user=alice).get().value == 1
    assert "4 of 5 pairs agree" in page.locator(f"#calibration-{entity.pk} tr[data-metric=layout_fit]").inner_text()


def test_the_entity_and_run_pages_show_plots_calibration_and_the_grade(page, live_server, alice, bob) -> None:
    entity = make_entity("storyboard", name="Storyboard")
    now = timezone.now()
    runs = []
    for n, (judge, people) in enumerate([(0.5, 0.5), (0.75, 0.5), (0.75, 1.0), (1.0, 0.75), (0.25, 0.25)]):
        run = make_run(entity, completed_at=now - timedelta(hours=10 - n), cost_usd=f"0.01{n}")
        make_grade(
            run,
            metrics={"layout_fit": judge, "quality": 0.6 + n / 20, "cost_usd": f"0.01{n}", "duration_ms": 3000 + n},
            criteria=[
                {
                    "criterion": "The report names every blocked task",
                    "scope": "run",
                    "passed": True,
                    "score": 0.9,
                    "reasoning": "All three are named",
                    "evidence": "output.summary",
                }
            ],  # fmt: skip
        )
        Rating.objects.create(execution=run, metric_id="layout_fit", user=bob, value=1 + 4 * people, normalized=people)
        runs.append(run)

    log_in(page, live_server, entity.get_absolute_url())
    plot = page.locator("figure.plot[data-metric=layout_fit] svg")
    assert plot.is_visible()
    assert plot.locator(".hline").first.text_content().startswith("Target: 0.5")
    assert plot.locator("circle").count() == 10  # the judge's five and people's five
    assert page.locator("figure.plot[data-metric=cost_usd] svg circle title").last.text_content().endswith("$0.014")
    assert "5 of 5 pairs" in page.locator(f"#calibration-{entity.pk}").inner_text()
    page.screenshot(path="/tmp/entity_detail.png", full_page=True)

    page.goto(f"{live_server.url}{runs[-1].get_absolute_url()}")
    assert "The report names every blocked task" in page.locator("table.criteria").inner_text()
    vector = page.locator("table.vector")
    assert vector.locator("tr[data-metric=cost_usd] td.judge").inner_text() == "$0.014"
    assert vector.locator("tr[data-metric=duration_ms] td.judge").inner_text() == "3.004 s"
    assert vector.locator("tr[data-metric=layout_fit] td.people").inner_text() == "2 · Poor"
    page.screenshot(path="/tmp/run_detail.png", full_page=True)
