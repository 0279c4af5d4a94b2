"""Side by side from the runs list in headless Chromium: tick two rows, press Compare the two, read both runs."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta

import pytest
from django.utils import timezone

from grading.models import Execution
from tests.browser.helpers import log_in
from tests.grading.rating_helpers import make_entity, make_grade, make_run

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]


def test_two_ticked_runs_open_side_by_side_and_one_is_refused(page, live_server, alice) -> None:
    entity = make_entity("digest")
    older = make_run(entity, completed_at=timezone.now() - timedelta(hours=2))
    newer = make_run(entity, completed_at=timezone.now() - timedelta(hours=1))
    for run, said in ((older, "Rain on Monday."), (newer, "Sunny all week.")):
        Execution.objects.filter(pk=run.pk).update(output={"text": said})
        make_grade(run, metrics={"layout_fit": 0.75})
    log_in(page, live_server, "/evolution/runs/")

    page.check(f"input[name=run][value='{newer.pk}']")
    page.get_by_role("button", name="Compare the two").click()
    page.wait_for_load_state()
    assert page.url == f"{live_server.url}/evolution/runs/"
    assert "Pick exactly two runs to compare (you picked 1)." in page.inner_text("body")

    page.check(f"input[name=run][value='{newer.pk}']")
    page.check(f"input[name=run][value='{older.pk}']")
    page.get_by_role("button", name="Compare the two").click()
    page.wait_for_url(f"{live_server.url}/evolution/runs/{newer.pk}/?compare={older.pk}")
    compare = page.locator("#compare")
    assert compare.get_by_role("heading", name="Side by side").is_visible()
    text = compare.inner_text()
    assert "Rain on Monday." in text and "Sunny all week." in text
