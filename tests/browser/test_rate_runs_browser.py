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


def current_is(page, run_id, metric: str) -> None:
    """Wait until the outlined metric (the one a number key answers) is ``metric`` of run ``run_id``."""
    page.wait_for_function(
        "([id, metric]) => document.querySelector(`#run-${id} tr[data-metric=${metric}]`)"
        "?.classList.contains('kbd-current')",
        arg=[str(run_id), metric],
        timeout=8000,
    )


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="Postgres' jsonb stores the declared metrics shorter key first, so Rate runs lists helpful before "
    "layout_fit there (declaration order on SQLite): this walk follows the declared order; see the closing note",
)
def test_a_person_rates_runs_by_keyboard_and_moves_to_the_next_run(page, live_server, alice) -> None:
    entity = make_entity("storyboard", name="Storyboard")  # layout_fit on a 1–5 rubric, helpful 👎/👍
    now = timezone.now()
    newer, older = (make_run(entity, completed_at=now - timedelta(minutes=m)) for m in (5, 10))
    for run in (newer, older):
        make_grade(run, metrics={"layout_fit": 0.75, "quality": 0.8})

    log_in(page, live_server, "/evolution/rate/")
    assert page.locator("#rate-keys").is_visible()  # the script says which keys work
    current_is(page, newer.id, "layout_fit")

    page.keyboard.press("4")  # 4 · Good on the rubric; then the run's next metric
    page.locator(f"#run-{newer.id} .answer.ok").wait_for(timeout=8000)
    current_is(page, newer.id, "helpful")
    page.keyboard.press("1")  # 👍; then the next run
    current_is(page, older.id, "layout_fit")
    mine = {r.metric_id: r.value for r in Rating.objects.filter(execution=newer, user=alice)}
    assert mine == {"layout_fit": 4, "helpful": 1}

    # A note first (n): typed keys stay in it, Escape leaves it; then the number answers with the note.
    page.keyboard.press("n")
    page.keyboard.type("2 scenes overlap")
    page.keyboard.press("Escape")
    page.keyboard.press("2")
    current_is(page, older.id, "helpful")
    rating = Rating.objects.get(execution=older, user=alice, metric_id="layout_fit")
    assert (rating.value, rating.note) == (2, "2 scenes overlap")
    assert page.url == f"{live_server.url}/evolution/rate/"

    # k goes back a metric at a time, j forward; 5 changes the first run's rating.
    for key, run, metric in [
        ("k", older, "layout_fit"),
        ("k", newer, "helpful"),
        ("j", older, "layout_fit"),
        ("k", newer, "helpful"),
        ("k", newer, "layout_fit"),
    ]:
        page.keyboard.press(key)
        current_is(page, run.id, metric)
    page.keyboard.press("5")
    page.locator(f"#run-{newer.id} tr[data-metric=layout_fit] button[aria-pressed=true]").filter(has_text="5").wait_for(
        timeout=8000
    )
    assert Rating.objects.get(execution=newer, user=alice, metric_id="layout_fit").value == 5


def test_a_person_narrows_rate_runs_to_one_entity_from_its_select(page, live_server, alice) -> None:
    first, second = make_entity("storyboard", name="Storyboard"), make_entity("poster", name="Poster")
    now = timezone.now()
    runs = {}
    for entity in (first, second):
        runs[entity.slug] = make_run(entity, completed_at=now - timedelta(minutes=5))
        make_grade(runs[entity.slug], metrics={"layout_fit": 0.5, "quality": 0.7})

    log_in(page, live_server, "/evolution/rate/")
    assert page.locator(f"#run-{runs['storyboard'].id}").count() == 1
    assert page.locator(f"#run-{runs['poster'].id}").count() == 1
    page.select_option("select[name=entity]", label="Poster")
    page.click("form[aria-label=entities] button[type=submit]")
    page.wait_for_url("**/evolution/rate/?entity=scenario%3Aposter&metric=")  # the metric filter: every metric
    assert page.locator(f"#run-{runs['poster'].id}").count() == 1
    assert page.locator(f"#run-{runs['storyboard'].id}").count() == 0
    assert page.locator("select[name=entity] option:checked").inner_text() == "Poster"
    page.click("form[aria-label=entities] a")  # "all": every entity again
    page.wait_for_url(f"{live_server.url}/evolution/rate/")
    assert page.locator(f"#run-{runs['storyboard'].id}").count() == 1


TICKET = "I was charged twice for my March subscription, please fix it."


def test_a_person_sees_the_ticket_the_chosen_and_expected_labels_then_rates_by_keyboard_and_skips(
    page, live_server, alice, bob
) -> None:
    """Issue 28: Rate runs shows the run itself — the ticket the triage read, the label it chose, the label
    expected and the judge's reasons — and the keyboard rating still works; a skip takes a run out of the queue."""
    from grading.models import RateSkip
    from tests.grading.rating_helpers import THUMBS, metric

    helpfulness = metric(kind="reported", direction="max", unit="share", role="observe", aggregate="mean",
                         criterion="The label sends the ticket to the team that can answer it", scale=THUMBS)  # fmt: skip
    accuracy = metric(kind="computed", direction="max", unit="share", role="objective", aggregate="mean")
    entity = make_entity(
        "triage", kind="pipeline", name="Support triage", metrics={"accuracy": accuracy, "helpfulness": helpfulness}
    )
    now = timezone.now()
    runs = []
    for n, (text, label, expected) in enumerate(
        [(TICKET, "technical", "billing"), ("What are your support hours on weekends?", "general", "general")]
    ):
        run = make_run(entity, completed_at=now - timedelta(minutes=5 + n))
        run.input, run.output = {"text": text, "_expected": expected}, {"result": label, "tasks": {}}
        run.save()
        make_grade(
            run,
            metrics={"accuracy": 1.0 if label == expected else 0.0},
            criteria=[
                {
                    "criterion": "The label fits the ticket",
                    "scope": "run",
                    "passed": label == expected,
                    "reasoning": f"The ticket asks about {expected}",
                }
            ],  # fmt: skip
        )
        runs.append(run)
    first, second = runs
    Rating.objects.create(execution=second, metric_id="helpfulness", user=bob, value=1, normalized=1.0, note="right")

    log_in(page, live_server, "/evolution/rate/")
    row = page.locator(f"#run-{first.id}")
    assert TICKET in row.locator(".run-input").inner_text()
    assert row.locator(".run-output").inner_text().endswith("technical")
    assert row.locator(".run-expected").inner_text().endswith("billing")
    assert "The ticket asks about billing" in row.locator(".run-verdicts").inner_text()
    for part in (".run-input", ".run-output", ".run-expected"):
        assert row.locator(part).is_visible()
    assert "bob: 1 · 👍 — right" in page.locator(f"#run-{second.id} td.people").inner_text()
    assert page.locator("#rate-waiting").inner_text().startswith("2 of 2 runs wait for you")
    page.screenshot(path="/tmp/rate_runs_issue28.png", full_page=True)
    # On a phone the run's parts stack and wrap inside their row (the page's own layout is the phone work's).
    page.set_viewport_size({"width": 390, "height": 844})
    widest = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('.run-view')].map(v => v.scrollWidth - v.clientWidth))"
    )
    assert widest <= 0, f"a run's view scrolls sideways by {widest} px at 390 px"
    page.screenshot(path="/tmp/rate_runs_issue28_390.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 1100})

    # The keyboard: 0 is 👎 on the outlined metric of the first run; the count follows.
    current_is(page, first.id, "helpfulness")
    page.keyboard.press("0")
    page.locator(f"#run-{first.id} .answer.ok").wait_for(timeout=8000)
    assert Rating.objects.get(execution=first, user=alice).value == 0
    page.wait_for_function(
        "() => document.querySelector('#rate-waiting').innerText.startsWith('1 of 2 runs wait')", timeout=8000
    )

    # s skips the outlined run (the second, now): it leaves the page and the queue, remembered for alice alone.
    current_is(page, second.id, "helpfulness")
    assert page.locator(f"#run-{second.id}").get_by_role("button", name="Skip this run").is_visible()
    page.keyboard.press("s")
    page.locator(f"#run-{second.id}").wait_for(state="detached", timeout=8000)
    assert RateSkip.objects.filter(user=alice, execution=second).exists()
    assert page.locator("#rate-waiting").inner_text().startswith("0 of 2 runs wait for you")
    assert not Rating.objects.filter(execution=second, user=alice).exists()
