"""The loop's events leave where they happen: here the watch finding its judge unhealthy, and its settle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from evolution.loop import machine
from evolution.models import Cycle
from grading.models import Grade
from singularity.notify import deliver, signing
from singularity.notify.models import Delivery
from tests.evolution.demo_helpers import drive_until_card, press, tickets, triage
from tests.evolution.watch_helpers import T0, made_grade, pulse, shipped, ticks
from tests.notify.helpers import SECRET, webhook_destination

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


@pytest.mark.django_db(transaction=True)
def test_the_demo_loop_on_the_local_forge_sends_the_card_the_pr_and_the_checks_answer(embedded, alice, fake_webhook):
    webhook_destination(fake_webhook.url)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    deliver.sweep()
    sent = {r.json()["event"]: r.json() for r in fake_webhook.received}
    assert {"card.waiting", "pr.opened", "check.answered"} <= set(sent)
    assert sent["card.waiting"]["url"].endswith(card.get_absolute_url())
    assert sent["check.answered"]["pr"] == rnd.pr_number
    assert sent["check.answered"]["verdict"] == rnd.check_verdict["verdict"]
    assert all(signing.verify(SECRET, r.body, r.headers[signing.SIGNATURE_HEADER]) for r in fake_webhook.received)
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == len(fake_webhook.received)
