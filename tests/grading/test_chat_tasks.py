"""The chat tasks: the idle sweep runs every minute, each run expiring before the next."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from grading.models import Episode
from grading.tasks.chat import close_idle_episodes
from singularity.schedule import BEAT_SCHEDULE
from tests.grading.chat_helpers import make_role, said

pytestmark = pytest.mark.django_db


def test_the_idle_sweep_is_scheduled_every_minute_and_expires_before_the_next():
    entry = BEAT_SCHEDULE["chat-close-idle-episodes"]
    assert entry["task"] == "grading.tasks.chat.close_idle_episodes"
    assert entry["schedule"] == 60.0 and 0 < entry["options"]["expires"] < 60


def test_the_task_closes_what_went_quiet(fake_gateway, alice):
    said(fake_gateway, make_role(chat={"episode": {"idleHours": 0.25}}), alice, "Hi")
    assert close_idle_episodes() == 0
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        assert close_idle_episodes() == 1
    assert Episode.objects.get().closed_by == "idle"
