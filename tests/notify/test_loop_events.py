"""The loop's events leave where they happen: here the watch finding its judge unhealthy, and its settle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from evolution.loop import machine
from grading.models import Grade
from singularity.notify import deliver
from singularity.notify.models import Delivery
from tests.evolution.watch_helpers import T0, made_grade, pulse, shipped, ticks
from tests.notify.helpers import webhook_destination

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def test_a_watch_that_finds_its_judge_unhealthy_says_so_once(fake_webhook):
    webhook_destination(fake_webhook.url)
    entity = pulse()
    cycle = shipped(entity)
    ticks(entity, "g", start=T0 + MINUTE)
    made_grade(entity, T0 + 10 * MINUTE, status=Grade.Status.FAILED)
    ticks(entity, "g", start=T0 + 20 * MINUTE)
    made_grade(entity, T0 + 30 * MINUTE, status=Grade.Status.FAILED)
    ticks(entity, "g", start=T0 + 40 * MINUTE)
    machine.on_grades([])
    assert sorted(Delivery.objects.values_list("event", flat=True)) == ["judge.unhealthy", "watch.settled"]
    deliver.sweep()
    unhealthy = next(r.json() for r in fake_webhook.received if r.json()["event"] == "judge.unhealthy")
    assert unhealthy["cycle"] == cycle.pk and unhealthy["entity"] == "heartbeat:pulse"
    assert unhealthy["text"].startswith("judge unhealthy: 2 of 5")
