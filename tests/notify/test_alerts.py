"""Alert rules: a level reached is sent once, the way back to ok once; never on every tick."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from grading.models import Grade
from singularity.notify import alerts, deliver
from singularity.notify.models import AlertRule, AlertState, Delivery
from tests.evolution.watch_helpers import made_grade, pulse
from tests.grading.grading_helpers import make_run
from tests.notify.helpers import T0, slack_destination

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def _graded(entity, values: list[float], start) -> None:
    for index, value in enumerate(values):
        grade = made_grade(entity, start + index * MINUTE)
        Grade.objects.filter(pk=grade.pk).update(metrics={"accuracy": value}, passed=value >= 0.5)


def _objective_rule(**fields) -> AlertRule:
    return AlertRule.objects.create(
        name="pulse-accuracy",
        kind=AlertRule.Kind.OBJECTIVE,
        entity="heartbeat:pulse",
        metric="accuracy",
        runs=4,
        warning=Decimal("0.9"),
        alert=Decimal("0.7"),
        **fields,
    )


def test_an_objective_under_its_levels_fires_once_and_resolves_once(fake_slack):
    slack_destination(fake_slack.url)
    entity = pulse()
    rule = _objective_rule()
    _graded(entity, [1, 1, 1, 1], T0)
    assert alerts.evaluate_all(now=T0 + HOUR) == 0  # ok from the start: nothing to say
    _graded(entity, [0.8, 0.8], T0 + 10 * MINUTE)  # mean of the newest 4: 0.9 — not under warning
    assert alerts.evaluate(rule) is None
    _graded(entity, [0.6], T0 + 20 * MINUTE)  # 0.85: warning
    assert alerts.evaluate(rule) == AlertState.Level.WARNING
    assert alerts.evaluate(rule) is None and alerts.evaluate(rule) is None  # every tick after: silence
    _graded(entity, [0.2, 0.2], T0 + 30 * MINUTE)  # 0.45: alert
    assert alerts.evaluate(rule) == AlertState.Level.ALERT
    assert alerts.evaluate(rule) is None
    _graded(entity, [1, 1, 1, 1], T0 + 40 * MINUTE)
    assert alerts.evaluate(rule) == AlertState.Level.OK
    assert alerts.evaluate_all() == 0
    deliver.sweep()
    titles = [m["blocks"][0]["text"]["text"] for m in fake_slack.messages()]
    assert titles == ["Warning: pulse-accuracy", "Alert: pulse-accuracy", "Resolved: pulse-accuracy"]
    assert list(Delivery.objects.order_by("created_at").values_list("event", flat=True)) == [
        "alert.warning",
        "alert.alert",
        "alert.resolved",
    ]
    state = AlertState.objects.get(rule=rule)
    assert state.level == "ok" and state.changes == 3 and state.value == "1.0000"


def test_the_failing_share_alerts_over_its_level(fake_slack):
    slack_destination(fake_slack.url)
    entity = pulse()
    rule = AlertRule.objects.create(
        name="pulse-failing", kind="failing", entity="heartbeat:pulse", runs=4, warning="0.25", alert="0.5"
    )
    _graded(entity, [1, 0, 0, 1], T0)
    assert alerts.evaluate(rule) == AlertState.Level.WARNING  # 0.5 is not over the alert level 0.5
    _graded(entity, [0], T0 + 10 * MINUTE)
    assert alerts.evaluate(rule) == AlertState.Level.ALERT  # 3 of the newest 4 failed
    assert AlertState.objects.get(rule=rule).value == "0.7500"


def test_spend_in_a_day_is_summed_exactly_and_alerts_over_its_amount():
    entity = pulse()
    rule = AlertRule.objects.create(name="spend", kind="spend", warning="0.2", alert="0.3")
    for _ in range(3):
        make_run(entity, cost_usd="0.1", completed_at=T0)
    assert alerts.MEASURES["spend"](rule, T0 + MINUTE) == Decimal("0.3")  # exact: 0.1 three times
    assert alerts.evaluate(rule, now=T0 + MINUTE) == AlertState.Level.WARNING  # 0.3 is not over 0.3
    make_run(entity, cost_usd="0.000000000001", completed_at=T0)
    assert alerts.evaluate(rule, now=T0 + MINUTE) == AlertState.Level.ALERT
    assert alerts.evaluate(rule, now=T0 + timedelta(days=2)) == AlertState.Level.OK  # the day has passed


def test_a_rule_with_nothing_to_read_keeps_its_level():
    rule = _objective_rule()
    assert alerts.evaluate(rule) is None
    assert not AlertState.objects.exists()


HOUR = timedelta(hours=1)
