"""The generic webhook: a signed JSON body, a delivery id, retries with backoff for a day, the log, redelivery."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from singularity.notify import deliver, signing
from singularity.notify.events import emit
from singularity.notify.models import Delivery
from tests.notify.helpers import SECRET, T0, eager, webhook_destination

pytestmark = pytest.mark.django_db


def test_a_webhook_is_signed_with_the_shared_secret_and_carries_its_delivery_id(
    fake_webhook, django_capture_on_commit_callbacks
):
    webhook_destination(fake_webhook.url)
    with eager(), django_capture_on_commit_callbacks(execute=True):
        (made,) = emit("pr.opened", key="c1", title="triage: PR #3 opened", url="/evolution/cycles/1/", cycle=1)
    (got,) = fake_webhook.received
    signature = got.headers[signing.SIGNATURE_HEADER]
    # A receiver checks it with nothing but the secret and the raw body (docs/notifications.md).
    expected = "sha256=" + hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, expected)
    assert signing.verify(SECRET, got.body, signature)
    assert not signing.verify("another secret", got.body, signature)
    assert not signing.verify(SECRET, got.body.replace(b"#3", b"#4"), signature)
    body = json.loads(got.body)
    assert body["id"] == got.headers[signing.DELIVERY_HEADER] == str(made.pk)
    assert body["event"] == got.headers[signing.EVENT_HEADER] == "pr.opened"
    assert body["title"] == "triage: PR #3 opened" and body["cycle"] == 1
    made.refresh_from_db()
    assert made.status == Delivery.Status.SENT and made.attempts == 1 and made.answer_status == 200


def test_the_same_event_twice_is_delivered_once(fake_webhook):
    webhook_destination(fake_webhook.url)
    emit("pr.merged", key="c1", title="merged")
    assert emit("pr.merged", key="c1", title="merged") == []
    assert deliver.sweep() == 1 and deliver.sweep() == 0
    assert len(fake_webhook.received) == 1


def test_a_failing_destination_is_retried_with_backoff_and_its_log_says_so(fake_webhook, client, alice):
    destination = webhook_destination(fake_webhook.url)
    fake_webhook.fail_next(503, "down for maintenance")
    fake_webhook.fail_next(500, "still down")
    with time_machine.travel(T0, tick=False):
        (made,) = emit("watch.settled", key="c9", title="triage: cycle 9 validated")
        assert deliver.sweep() == 1
    made.refresh_from_db()
    assert made.status == Delivery.Status.RETRYING and made.attempts == 1
    assert made.answer_status == 503 and "down for maintenance" in made.answer
    assert made.next_attempt_at == T0 + timedelta(minutes=1)
    with time_machine.travel(T0 + timedelta(seconds=59), tick=False):
        assert deliver.sweep() == 0  # not due yet
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        assert deliver.sweep() == 1
    made.refresh_from_db()
    assert made.status == Delivery.Status.RETRYING and made.attempts == 2
    assert made.next_attempt_at == T0 + timedelta(minutes=3)  # then 2 minutes: the wait doubles
    with time_machine.travel(T0 + timedelta(minutes=3), tick=False):
        assert deliver.sweep() == 1
    made.refresh_from_db()
    assert made.status == Delivery.Status.SENT and made.attempts == 3 and made.delivered_at is not None
    assert len(fake_webhook.received) == 3
    assert len({r.headers[signing.DELIVERY_HEADER] for r in fake_webhook.received}) == 1  # one delivery id

    client.force_login(alice)
    page = client.get(reverse("notify-destination", args=[destination.name])).content.decode()
    assert "triage: cycle 9 validated" in page and "Delivered" in page and "<td>3</td>" in page


def test_a_destination_failing_for_a_day_is_given_up_and_its_log_says_so(fake_webhook, client, alice):
    destination = webhook_destination(fake_webhook.url)
    for _ in range(40):
        fake_webhook.fail_next(502, "bad gateway")
    with time_machine.travel(T0, tick=False):
        (made,) = emit("reverted", key="c2", title="triage: reverted")
    at = T0
    while True:
        with time_machine.travel(at, tick=False):
            deliver.sweep()
        made.refresh_from_db()
        if made.status == Delivery.Status.FAILED:
            break
        at = made.next_attempt_at
        assert at <= T0 + timedelta(days=1)
    assert made.attempts == len(fake_webhook.received) > 5
    assert made.answer.startswith("gave up: still failing a day after it was made")
    client.force_login(alice)
    page = client.get(reverse("notify-destination", args=[destination.name])).content.decode()
    assert "Gave up" in page and "gave up: still failing a day" in page


def test_a_refusal_is_permanent_and_is_not_retried(fake_webhook):
    webhook_destination(fake_webhook.url)
    fake_webhook.fail_next(410, "gone")
    (made,) = emit("pr.opened", key="c3", title="opened")
    deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.FAILED and made.attempts == 1
    assert made.answer == "gave up: permanent error: HTTP 410: gone"


def test_a_secret_named_by_a_variable_that_is_not_set_fails_naming_it(fake_webhook):
    webhook_destination(fake_webhook.url, secret="", secret_env="NOTIFY_TEST_UNSET_SECRET")
    (made,) = emit("pr.opened", key="c4", title="opened")
    deliver.sweep()
    made.refresh_from_db()
    assert made.status == Delivery.Status.FAILED and "NOTIFY_TEST_UNSET_SECRET is not set" in made.answer
    assert fake_webhook.received == []


def test_the_admin_sends_a_delivery_again_under_a_new_id(
    fake_webhook, client, alice, django_capture_on_commit_callbacks
):
    webhook_destination(fake_webhook.url)
    (made,) = emit("pr.opened", key="c5", title="opened")
    deliver.sweep()
    client.force_login(alice)
    with eager(), django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            reverse("admin:notify_delivery_changelist"),
            {"action": "send_again", "_selected_action": [str(made.pk)]},
        )
    assert answer.status_code == 302
    first, again = fake_webhook.received
    assert json.loads(first.body)["id"] == str(made.pk) != json.loads(again.body)["id"]
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == 2


def test_the_notifications_page_lists_each_destination_with_its_counts_in_peoples_words(fake_webhook, client, alice):
    webhook_destination(fake_webhook.url)
    fake_webhook.fail_next(500, "down")
    emit("pr.opened", key="a", title="opened")
    emit("pr.merged", key="b", title="merged")
    deliver.sweep()
    client.force_login(alice)
    page = client.get(reverse("notify-destinations")).content.decode()
    assert 'href="/notifications/ci/"' in page and "Signed webhook" in page and "The admin" in page
    assert "<td>1</td><td>1</td><td>0</td>" in page  # one delivered, one waiting to retry, none given up
    assert "pr.opened" not in page  # events in words on the destination's own page, never their internal names
    log = client.get(reverse("notify-destination", args=["ci"])).content.decode()
    assert "the loop opened a pull request" in log and "Retrying" in log and "HTTP 500: down" in log
