"""The Policy view's Backtest: a stricter trigger's backtest beside its diff before Confirm, and the panel of reports."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from evolution.models import ActionLog, Backtest
from grading.models import Entity
from tests.evolution.loop_helpers import graded
from tests.evolution.settings_helpers import DIGEST, DIGEST_TEXT, settings_brain

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
PREVIEW = "/evolution/settings/preview/"
POLICY = "/evolution/entities/scenario/digest/policy/"
PANEL = "/evolution/entities/scenario/digest/backtest/"
TARGET = {"targetKind": "scenario", "targetId": "digest"}
PATTERN = "ggbbgggbbbbgggggbgbbgg" * 7


@pytest.fixture
def sb(tmp_path, settings):
    sb = settings_brain(tmp_path, settings)
    entity = Entity.objects.get(target_kind="scenario", slug="digest")
    start = timezone.now() - timedelta(days=3)
    for index, mark in enumerate(PATTERN):
        graded(entity, bad=mark == "b", at=start + timedelta(minutes=20 * index))
    return sb


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def opened(text: str, which: str) -> int:
    return int(re.search(rf'class="backtest-opened-{which}">(\d+)<', text).group(1))


def test_a_stricter_trigger_shows_its_backtest_beside_the_diff_before_confirm(sb, web) -> None:
    head = sb.head()
    body = {**TARGET, "key": "loop.trigger.minFailures", "op": "set", "value": "4"}
    text = web.post(PREVIEW, body, **HX).content.decode()
    assert "minFailures: 4" in text and "Confirm" in text  # the diff and the Confirm are there
    now, then = opened(text, "current"), opened(text, "proposed")
    assert then < now
    assert f"Would have opened {then} cycles instead of {now} in the last 30 days" in text
    assert text.index('id="preview-backtest"') < text.index("Confirm")
    assert "With loop.trigger.minFailures = 4" in text
    # Nothing written: the brain, the action log; the two reports are kept for the panel.
    assert sb.head() == head and sb.show(DIGEST) == DIGEST_TEXT and not ActionLog.objects.exists()
    assert Backtest.objects.filter(label="proposed", compared_with__isnull=False).count() == 1
    page = web.get(POLICY).content.decode()
    assert 'id="backtest-panel"' in page and f"Would have opened {then} cycles instead of {now}" in page


def test_a_knob_no_backtest_reads_shows_none(sb, web) -> None:
    body = {**TARGET, "key": "loop.maxChangedLines", "op": "set", "value": "120"}
    text = web.post(PREVIEW, body, **HX).content.decode()
    assert "Confirm" in text and "preview-backtest" not in text and not Backtest.objects.exists()


def test_the_panel_backtests_todays_policy_or_one_knob_over_a_period(sb, web) -> None:
    text = web.post(PANEL, {"since": "7d"}, **HX).content.decode()
    assert "Today&#x27;s policy would have opened" in text and "the last 7 days" in text
    text = web.post(PANEL, {"since": "7d", "key": "loop.trigger.minFailures", "value": "3"}, **HX).content.decode()
    assert "instead of" in text and "With loop.trigger.minFailures = 3" in text
    assert text.count('class="backtest-compare"') == 2  # the newest pair first, today's lone report after it


def test_the_panel_says_what_was_wrong_with_a_value_or_a_period(sb, web) -> None:
    text = web.post(PANEL, {"since": "7d", "key": "loop.trigger.minFailures", "value": "many"}, **HX).content.decode()
    assert 'id="backtest-error"' in text and "loop.trigger.minFailures: &#x27;many&#x27; is not a number" in text
    text = web.post(PANEL, {"since": "forever"}, **HX).content.decode()
    assert "since: &#x27;forever&#x27;" in text and not Backtest.objects.exists()


def test_without_javascript_the_panel_redirects_to_the_entity(sb, web) -> None:
    response = web.post(PANEL, {"since": "30d"})
    assert response.status_code == 302 and Backtest.objects.count() == 1


def test_running_a_backtest_is_for_staff(sb, client, charlie) -> None:
    client.force_login(charlie)
    assert client.post(PANEL, {"since": "30d"}).status_code == 403
    assert client.get(PANEL).status_code == 200 and not Backtest.objects.exists()
