"""loop_backtest over REST and from a shell: today's policy beside a proposed one, bad input refused naming it."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import ActionLog, Backtest
from grading.models import Entity
from singularity.models import ApiToken
from tests.evolution.loop_helpers import graded
from tests.evolution.settings_helpers import DIGEST, DIGEST_TEXT, settings_brain

pytestmark = pytest.mark.django_db

URL = "/api/loop/backtest/"
TARGET = {"targetKind": "scenario", "targetId": "digest"}
#: Two days of digest runs, one every 20 minutes: bad in bursts of two and of four.
PATTERN = "ggbbgggbbbbgggggbgbbgg" * 7


@pytest.fixture
def digest(tmp_path, settings) -> Entity:
    sb = settings_brain(tmp_path, settings)
    entity = Entity.objects.get(target_kind="scenario", slug="digest")
    start = timezone.now() - timedelta(days=3)
    for index, mark in enumerate(PATTERN):
        graded(entity, bad=mark == "b", at=start + timedelta(minutes=20 * index))
    entity.sb = sb
    return entity


@pytest.fixture
def api(alice) -> APIClient:
    _, key = ApiToken.issue(alice, "script", is_agent=False)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_a_stricter_trigger_is_backtested_beside_todays_policy_and_both_are_kept(digest, api) -> None:
    head = digest.sb.head()
    body = {**TARGET, "since": "7d", "changes": [{"key": "loop.trigger.minFailures", "value": 4}]}
    response = api.post(URL, body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    current, proposed = answer["current"], answer["proposed"]
    assert current["policy"] == "current" and proposed["policy"] == "proposed"
    assert current["gradedRuns"] == proposed["gradedRuns"] == len(PATTERN)
    assert 0 < proposed["opened"] < current["opened"]
    assert answer["summary"] == (
        f"Would have opened {proposed['opened']} cycles instead of {current['opened']} in the last 7 days "
        f"({len(PATTERN)} graded runs replayed)."
    )
    assert isinstance(current["spend"]["totalUsd"], str)
    assert current["reproduction"]["reallyOpened"] == 0 and "reproduction" not in proposed
    kept = Backtest.objects.get(pk=proposed["id"])
    assert kept.compared_with_id == current["id"] and kept.changes == [
        {"key": "loop.trigger.minFailures", "op": "set", "value": 4}
    ]
    # A dry run: the brain and the action log are as they were.
    assert digest.sb.head() == head and digest.sb.show(DIGEST) == DIGEST_TEXT and not ActionLog.objects.exists()


def test_two_keys_of_one_wholesale_block_are_both_made(digest, api) -> None:
    body = {
        **TARGET,
        "since": "7d",
        "changes": [
            {"key": "loop.trigger.windowRuns", "value": 10},
            {"key": "loop.trigger.minFailures", "value": 8},
        ],
    }
    response = api.post(URL, body, format="json")
    # minFailures 8 alone over a window of 5 would not load; windowRuns 10 alone would open as often as today.
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["proposed"]["opened"] < answer["current"]["opened"]


@pytest.mark.parametrize(
    ("body", "status", "code", "words"),
    [
        ({"targetKind": "scenario", "targetId": "nobody"}, 404, "not_found", "scenario:nobody names no entity"),
        ({**TARGET, "since": "soon"}, 400, "invalid", "since: 'soon'"),
        ({**TARGET, "changes": [{"key": "trigger.minFailures", "value": 3}]}, 400, "invalid", "key:"),
        ({**TARGET, "changes": [{"key": "loop.trigger.minFailures", "op": "bump"}]}, 400, "invalid", "changes[0].op"),
        ({"targetKind": "scenario"}, 400, "invalid", "targetId"),
        ({**TARGET, "changes": [{"key": "loop.trigger.minFailures", "value": 9}]}, 403, "refused", "minFailures"),
    ],
)
def test_bad_input_is_refused_naming_what_and_where(digest, api, body, status, code, words) -> None:
    response = api.post(URL, body, format="json")
    assert response.status_code == status, response.json()
    answer = response.json()
    assert answer["error"] == code and words in answer["detail"], answer
    assert not Backtest.objects.exists()


def test_the_schema_documents_loop_backtest(api) -> None:
    schema = api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/loop/backtest/"]["post"]
    assert operation["operationId"] == "loop_backtest"
    assert set(operation["responses"]) >= {"200", "400", "403", "404"}


def test_the_command_prints_both_policies_and_the_comparison(digest) -> None:
    out = io.StringIO()
    call_command(
        "loop", "backtest", "scenario:digest", "--since", "7d", "--set", "loop.trigger.minFailures=4", stdout=out
    )
    text = out.getvalue()
    assert "current policy (repair):" in text and "proposed policy (repair):" in text
    assert "Would have opened" in text and "instead of" in text
    assert Backtest.objects.count() == 2


def test_the_command_answers_json_and_refuses_bad_input_in_words(digest) -> None:
    out = io.StringIO()
    call_command("loop", "backtest", "digest", "--since", "3d", "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["proposed"] is None and body["current"]["graded_runs"] > 0
    with pytest.raises(CommandError, match="since"):
        call_command("loop", "backtest", "digest", "--since", "yesterday")
    with pytest.raises(CommandError, match="KEY=VALUE"):
        call_command("loop", "backtest", "digest", "--set", "loop.trigger.minFailures")
    with pytest.raises(CommandError, match="no such entity"):
        call_command("loop", "backtest", "scenario:nobody")
