"""Slack: one message per card waiting on a person and per settled watch, against Slack's incoming-webhook contract."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from evolution.loop import machine
from hitl.actions import open_card
from singularity.notify import deliver
from singularity.notify.events import emit
from singularity.notify.models import Delivery
from tests.evolution.watch_helpers import HOUR, pulse, shipped, ticks
from tests.evolution.watch_helpers import T0 as WATCH_T0
from tests.fakes.outbound import SLACK_PATH
from tests.notify.helpers import T0, eager, slack_destination

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def _card(key: str):
    return open_card(
        producer="loop",
        kind="decide",
        key=key,
        title="triage: accept the proposal?",
        subject="cycle 4",
        text="Raise the refund rule's priority.",
        expires_at=T0 + timedelta(days=3),
        options=[{"value": "accept", "label": "Accept"}, {"value": "reject", "label": "Reject"}],
    )


def test_each_card_waiting_on_a_person_is_one_slack_message_with_its_link(
    fake_slack, settings, django_capture_on_commit_callbacks
):
    settings.SINGULARITY_PUBLIC_URL = "https://singularity.example.org"
    slack_destination(fake_slack.url)
    with eager(), django_capture_on_commit_callbacks(execute=True):
        card = _card("decide:4")
        _card("decide:4")  # opened again under its key: the same card, no second message
        other = _card("decide:5")
    deliver.sweep()
    first, second = fake_slack.messages()
    link = f"https://singularity.example.org{card.get_absolute_url()}"
    assert first["text"] == f"triage: accept the proposal? <{link}|open>"
    assert first["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "triage: accept the proposal?", "emoji": True},
    }
    assert first["blocks"][1] == {"type": "section", "text": {"type": "mrkdwn", "text": card.text}}
    button = first["blocks"][-1]["elements"][0]
    assert button["url"] == link and button["text"]["text"] == "Answer it"
    assert other.get_absolute_url() in second["text"]


def test_each_settled_watch_is_one_slack_message(fake_slack):
    slack_destination(fake_slack.url, events=["watch.settled"])
    entity = pulse()
    cycle = shipped(entity)
    ticks(entity, "gbgg", start=WATCH_T0 + MINUTE)
    assert Delivery.objects.count() == 0  # still watching: nothing settled
    ticks(entity, "g", start=WATCH_T0 + HOUR)
    machine.on_grades([])  # the machine asked again: a settled watch settles nothing more
    cycle.refresh_from_db()
    assert cycle.status == "validated"
    deliver.sweep()
    (message,) = fake_slack.messages()
    assert message["blocks"][0]["text"]["text"] == f"Pulse: cycle {cycle.pk} kept: validated"


def test_slack_asking_to_wait_is_retried_when_it_said(fake_slack):
    slack_destination(fake_slack.url)
    fake_slack.rate_limit_next(30)
    with time_machine.travel(T0, tick=False):
        (made,) = emit("pr.opened", key="c1", title="opened")
        deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.RETRYING and made.answer_status == 429
    assert made.next_attempt_at == T0 + timedelta(seconds=30)
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.SENT and made.answer == "ok" and len(fake_slack.messages()) == 1


def test_a_revoked_slack_webhook_is_given_up_at_once(fake_slack):
    slack_destination(fake_slack.url.replace(SLACK_PATH, "/services/T0001/B0001/revoked"))
    (made,) = emit("pr.opened", key="c1", title="opened")
    deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.FAILED and made.answer == "gave up: permanent error: HTTP 404: no_service"


def test_slack_refusing_the_payload_is_permanent(fake_slack):
    slack_destination(fake_slack.url)
    fake_slack.fail_next(400, "invalid_payload")
    (made,) = emit("pr.opened", key="c1", title="opened")
    deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.FAILED and made.answer.endswith("HTTP 400: invalid_payload")


def test_a_slack_address_named_by_a_variable_is_read_from_the_environment(fake_slack, monkeypatch):
    monkeypatch.setenv("NOTIFY_TEST_SLACK_URL", fake_slack.url)
    slack_destination("", url_env="NOTIFY_TEST_SLACK_URL")
    emit("breaker.paused", key="e1", title="triage: the loop is paused")
    deliver.sweep()
    assert [m["blocks"][0]["text"]["text"] for m in fake_slack.messages()] == ["triage: the loop is paused"]
