"""Issue 27: an agent's write that loosens spend, the pre-merge check or the watch waits on a person's card.

A person's token makes the same write at once; a tightening is made at once
whoever asks; an agent's asks waiting on people are capped, and the next one
is refused naming the cap and how many wait.
"""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from evolution.models import ActionLog
from evolution.steering import settings as sw
from evolution.steering.settings.loosening import KNOBS, knob_loosenings, loosens
from hitl.actions import answer_card, run_handler
from hitl.models import Card
from singularity.brain import defaults as D
from singularity.models import ApiToken
from tests.evolution.settings_helpers import DIGEST, MANIFEST, MANIFEST_TEXT, PULSE, settings_brain

pytestmark = pytest.mark.django_db

#: The test brain with a monthly ceiling and a daily grading ceiling to loosen.
CEILINGS = MANIFEST_TEXT.replace(
    "  sample: { rate: 1 }     # grade every run\n", "  sample: { rate: 0.5, maxPerDay: 20 }\n"
).replace(
    "  cooldownHours: 6   # between cycles\n",
    "  cooldownHours: 6   # between cycles\n  budget:\n    maxUsdPerMonth: 50\n",
)


def client_for(user, *, agent: bool = False, name: str = "") -> APIClient:
    _, key = ApiToken.issue(user, name or ("bot" if agent else "script"), is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings, {MANIFEST: CEILINGS})


@pytest.fixture
def agent(alice) -> APIClient:
    return client_for(alice, agent=True)


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


BRAIN = {"targetKind": None, "targetId": None}
DIGEST_TARGET = {"targetKind": "scenario", "targetId": "digest"}


def manifest_of(sb) -> dict:
    return yaml.safe_load(sb.show(MANIFEST))


def approve(card_id: str, user) -> None:
    result = answer_card(card_id, user=user, is_agent=False, choice=sw.APPROVE, via="dashboard")
    assert result.ok, result.detail
    run_handler(card_id)  # the handler runs after commit; here, by hand


def held(sb, response, head: str) -> Card:
    """The 202 pending answer's card, with nothing written."""
    assert response.status_code == 202, response.json()
    answer = response.json()
    assert answer["pending"] and answer["cardId"] and answer["commit"] is None
    assert sb.head() == head and not ActionLog.objects.exists()
    card = Card.objects.get(pk=answer["cardId"])
    assert (card.producer, card.kind, card.status) == ("loop-settings", "widen", "pending")
    return card


# --- The directions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "old", "new", "loosened"),
    [
        ("loop.budget.maxUsdPerMonth", "50", "1000000", True),
        ("loop.budget.maxUsdPerMonth", "50", None, True),  # the ceiling removed
        ("loop.budget.maxUsdPerMonth", None, "50", False),  # a ceiling where there was none
        ("loop.budget.maxUsdPerMonth", "50", "10", False),
        ("loop.maxAnalysesPerDay", 3, None, True),
        ("loop.maxAnalysesPerDay", 3, 2, False),
        ("evaluation.sample.rate", 0.5, 1, True),
        ("evaluation.sample.maxPerDay", 20, 40, True),
        ("evaluation.sample.maxPerDay", None, 40, False),
        ("loop.check.mode", None, "none", True),
        ("loop.check.mode", "replay", None, True),  # derived may be none
        ("loop.check.mode", "none", None, False),
        ("loop.check.inputs", 5, 2, True),
        ("loop.check.trials", 2, 1, True),
        ("evaluation.metricTolerance.judged", 0.05, 0.2, True),
        ("loop.watch.mode", "observe", "none", True),
        ("loop.watch.deadlineHours", 336, 24, True),
        ("loop.watch.deadlineHours", 336, 500, False),
        ("loop.watch.minFailures", 2, 4, True),
    ],
)
def test_each_knob_loosens_one_way(key, old, new, loosened) -> None:
    (knob,) = [k for k in KNOBS if k.key == key]
    assert loosens(knob, old, new) is loosened
    assert not (loosened and loosens(knob, new, old))  # a loosening undone is never one


def _terms(**loop) -> dict:
    import copy

    terms = {"evaluation": copy.deepcopy(D.EVALUATION), "loop": copy.deepcopy(D.LOOP)}
    for dotted, value in loop.items():
        node = terms
        *path, leaf = dotted.split("__")
        for name in path:
            node = node[name]
        node[leaf] = value
    return terms


def test_the_watch_window_falls_back_to_the_triggers_so_a_smaller_trigger_window_loosens_the_watch() -> None:
    before, after = _terms(), _terms(loop__trigger__windowRuns=2)
    (found,) = knob_loosenings("scenario:x", before, after)
    assert (found["knob"], found["family"], found["from"], found["to"]) == ("loop.watch.windowRuns", "watch", 5, 2)
    # The watch naming its own window is not moved by the trigger's.
    own = _terms(loop__watch__windowRuns=5, loop__trigger__windowRuns=2)
    assert knob_loosenings("scenario:x", _terms(loop__watch__windowRuns=5), own) == []


def test_a_metrics_own_wider_band_is_named_on_the_metric() -> None:
    before = _terms(evaluation__metrics={"quality": {"kind": "judged", "tolerance": 0.05}})
    after = _terms(evaluation__metrics={"quality": {"kind": "judged", "tolerance": 0.3}})
    (found,) = knob_loosenings("scenario:x", before, after)
    assert found["knob"] == "evaluation.metrics.quality.tolerance" and found["family"] == "check"


# --- The REST API: an agent's loosening waits on a person -----------------------------------------------


def test_an_agents_budget_raise_is_a_card_and_nothing_changes_until_a_person_approves(sb, agent, bob) -> None:
    head = sb.head()
    body = {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 1000000}
    response = agent.post("/api/loop/set/", body, format="json")
    card = held(sb, response, head)
    loosened = response.json()["loosened"]
    assert {"subject": MANIFEST, "knob": "loop.budget.maxUsdPerMonth", "family": "spend", "from": "50",
            "to": "1000000"} in loosened  # fmt: skip
    assert "loop.budget.maxUsdPerMonth" in card.text and "This loosens (spend)" in card.text
    assert manifest_of(sb)["loop"]["budget"] == {"maxUsdPerMonth": 50}
    # The agent cannot answer its own card.
    assert agent.post(f"/api/cards/{card.pk}/answer/", {"choice": "approve"}, format="json").status_code == 403
    approve(card.pk, bob)
    card.refresh_from_db()
    assert card.handler_error == ""
    assert manifest_of(sb)["loop"]["budget"] == {"maxUsdPerMonth": 1000000}
    row = ActionLog.objects.get()
    assert (row.op, row.actor, row.subject) == ("loop_set", "alice (approved by bob)", MANIFEST)


def test_an_agents_null_removes_no_ceiling_without_a_card(sb, agent) -> None:
    head = sb.head()
    response = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": None},
                          format="json")  # fmt: skip
    held(sb, response, head)
    assert response.json()["loosened"][0]["to"] is None
    removed = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget", "op": "remove"}, format="json")
    held(sb, removed, head)


def test_an_agents_check_mode_none_is_a_card(sb, agent) -> None:
    head = sb.head()
    response = agent.post("/api/loop/set/", {**DIGEST_TARGET, "key": "loop.check.mode", "value": "none"},
                          format="json")  # fmt: skip
    held(sb, response, head)
    (entry,) = response.json()["loosened"]
    assert entry == {"subject": "scenario:digest", "knob": "loop.check.mode", "family": "check", "from": None,
                     "to": "none"}  # fmt: skip
    assert "check.mode" not in sb.show(DIGEST)


def test_an_agents_loop_widen_of_a_loosening_alone_is_a_card_too(sb, agent) -> None:
    head = sb.head()
    response = agent.post("/api/loop/widen/", {**DIGEST_TARGET, "key": "loop.watch.mode", "value": "none"},
                          format="json")  # fmt: skip
    held(sb, response, head)
    assert response.json()["widened"] == [] and response.json()["loosened"][0]["family"] == "watch"


def test_an_agents_tightening_is_made_at_once(sb, agent) -> None:
    body = {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 10}
    response = agent.post("/api/loop/set/", body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert not answer["pending"] and answer["commit"] == sb.head() and answer["loosened"] == []
    assert manifest_of(sb)["loop"]["budget"] == {"maxUsdPerMonth": 10}
    assert not Card.objects.exists()


def test_a_persons_loosening_is_made_at_once(sb, person) -> None:
    body = {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 1000000}
    response = person.post("/api/loop/set/", body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert not answer["pending"] and answer["commit"] == sb.head()
    assert answer["loosened"][0]["knob"] == "loop.budget.maxUsdPerMonth"
    assert manifest_of(sb)["loop"]["budget"] == {"maxUsdPerMonth": 1000000}
    assert not Card.objects.exists()


def test_an_agents_dry_run_names_the_loosening_and_opens_nothing(sb, agent) -> None:
    body = {**BRAIN, "key": "evaluation.sample.rate", "value": 1, "dryRun": True}
    response = agent.post("/api/loop/set/", body, format="json")
    assert response.status_code == 200
    assert response.json()["loosened"][0]["knob"] == "evaluation.sample.rate"
    assert not Card.objects.exists()


def test_an_agents_join_that_raises_the_daily_ceiling_waits_on_a_person(sb, agent, bob) -> None:
    head = sb.head()
    body = {"targetKind": "heartbeat", "targetId": "pulse", "dailyCap": 100}
    response = agent.post("/api/loop/join/", body, format="json")
    card = held(sb, response, head)
    assert response.json()["loosened"][0]["knob"] == "evaluation.sample.maxPerDay"
    approve(card.pk, bob)
    front = yaml.safe_load(sb.show(PULSE).split("---\n")[1])
    assert front["enabled"] is True and front["evaluation"]["sample"] == {"maxPerDay": 100}
    assert ActionLog.objects.get().op == "loop_join"


def test_an_agents_join_under_the_ceiling_is_made_at_once(sb, agent) -> None:
    response = agent.post("/api/loop/join/", {"targetKind": "heartbeat", "targetId": "pulse", "dailyCap": 5},
                          format="json")  # fmt: skip
    assert response.status_code == 200, response.json()
    assert response.json()["commit"] == sb.head() and not Card.objects.exists()


# --- The cap on an agent's waiting asks ------------------------------------------------------------


def test_the_twenty_first_waiting_ask_is_refused_naming_the_cap(sb, agent, settings) -> None:
    assert settings.LOOP_AGENT_MAX_PENDING_CARDS == 20
    for n in range(20):
        response = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 100 + n},
                              format="json")  # fmt: skip
        assert response.status_code == 202, (n, response.json())
    assert Card.objects.filter(status="pending").count() == 20
    head = sb.head()
    refused = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 999},
                         format="json")  # fmt: skip
    assert refused.status_code == 429
    body = refused.json()
    assert body["error"] == "too_many_pending"
    assert "20 asks waiting" in body["detail"] and "the cap is 20" in body["detail"]
    assert "LOOP_AGENT_MAX_PENDING_CARDS" in body["detail"]
    assert Card.objects.count() == 20 and sb.head() == head
    # Asking again for one already waiting finds its card; a tightening still goes through.
    again = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 100},
                       format="json")  # fmt: skip
    assert again.status_code == 202 and Card.objects.count() == 20
    tighter = agent.post("/api/loop/set/", {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 5},
                         format="json")  # fmt: skip
    assert tighter.status_code == 200


def test_the_cap_counts_one_agent_not_another(sb, alice, settings) -> None:
    settings.LOOP_AGENT_MAX_PENDING_CARDS = 1
    first, second = client_for(alice, agent=True), client_for(alice, agent=True, name="bot-2")
    body = {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 100}
    assert first.post("/api/loop/set/", body, format="json").status_code == 202
    other = {**BRAIN, "key": "loop.budget.maxUsdPerMonth", "value": 200}
    assert first.post("/api/loop/set/", other, format="json").status_code == 429
    assert second.post("/api/loop/set/", other, format="json").status_code == 202
