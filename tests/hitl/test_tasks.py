"""The periodic tasks: expiry and the sender, on beat every 30 s with an expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from hitl.models import Card, Delivery
from hitl.tasks import expire_cards, send_deliveries
from tests.hitl.helpers import make_card

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["hitl-expire-cards", "hitl-send-deliveries"])
def test_beat_runs_the_task_every_30_seconds_with_an_expiry(name):
    entry = settings.CELERY_BEAT_SCHEDULE[name]
    assert entry["schedule"] == 30.0 and 0 < entry["options"]["expires"] <= 30


def test_the_expiry_task_closes_due_cards_and_catches_up_on_lost_handler_calls(
    handler, django_capture_on_commit_callbacks
):
    due = make_card(key="decide:due", hours=1)
    lost = make_card(key="decide:lost", hours=10)
    # An answer whose after-commit call was lost (the process died): the sweep calls its handler.
    Card.objects.filter(pk=lost.pk).update(status="answered", answer={"choice": "accept"}, responded_at=timezone.now())
    with time_machine.travel(timezone.now() + timedelta(hours=2)), django_capture_on_commit_callbacks(execute=True):
        assert expire_cards.apply().get() == 1
    assert sorted((str(pk), status) for pk, status, *_ in handler.calls) == sorted(
        [(str(due.pk), "expired"), (str(lost.pk), "answered")]
    )


def test_the_sender_task_sends(telegram_on):
    card = make_card()
    assert send_deliveries.apply().get() == 1
    assert Delivery.objects.get(card=card).status == "sent"
