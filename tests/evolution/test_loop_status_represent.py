"""loop_status' fast representation (``serializers.represent``) is DRF's own, on fleets of every kind of wait."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from evolution.api.serializers import LoopStatusSerializer, represent
from evolution.reads import fleet
from tests.evolution.test_fleet_waits_scale import every_wait

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("seed", [1, 5, 9])
def test_represent_equals_drf_over_random_fleets(seed):
    every_wait(random.Random(seed), "s", 24)
    answer = fleet.loop_status(limit=100)
    assert answer["entities"]
    assert represent(LoopStatusSerializer(), answer) == LoopStatusSerializer(answer).data
    page = fleet.loop_status(limit=5)
    assert represent(LoopStatusSerializer(), page) == LoopStatusSerializer(page).data


def test_represent_keeps_drfs_edge_cases():
    """Absent optional keys are left out, absent nullable ones are null, money and instants are DRF's words,
    a callable value is called."""
    now = timezone.now()
    wait = {
        "gate": "decide",
        "targetKind": None,
        "targetId": None,
        "cycleId": 3,
        "round": None,
        "since": now,
        "until": now + timedelta(hours=1),
        "card": None,
        "pr": {"number": "7", "url": "/p/7"},
        "next": lambda: "a person answers",
        "url": "/x/",
    }
    answer = {
        "entities": [
            {
                "targetKind": "scenario",
                "targetId": "a",
                "name": "A",
                "enabled": 1,
                "state": "idle",
                "stateLabel": "idle",
                "live": None,
                "inFlight": [],
                "next": "Nothing.",
                "nextStep": {"text": "Nothing.", "waits": None, "meter": None},
                "stuck": None,
                "needsYou": [wait],
                "waits": None,
                "month": {
                    "spent_usd": Decimal("1.50"),
                    "ceiling_usd": None,
                    "validated": 0,
                    "regressed": 0,
                    "cycles": 1,
                },
            }
        ],
        "needsYou": 1,
        "needsYouItems": [wait],
        "nextCursor": None,
    }
    assert represent(LoopStatusSerializer(), answer) == LoopStatusSerializer(answer).data


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_instants_are_drfs_words_in_the_current_time_zone(zone, settings):
    """Instants are rendered in the zone once read (``represent``'s fast path): DRF's ISO 8601 in the current
    zone, ``Z`` for UTC, microseconds kept; a naive one and a text one go through DRF's own field."""
    from datetime import datetime as dt

    settings.TIME_ZONE = zone
    aware = timezone.now().replace(microsecond=123456)
    for since in (aware, aware.replace(microsecond=0), dt(2026, 3, 29, 1, 30), "2026-12-01T00:00:00Z"):
        wait = {"gate": "merge", "targetKind": None, "targetId": None, "cycleId": None, "round": None,
                "since": since, "until": None, "card": None, "pr": None, "next": "n", "url": "/x/"}  # fmt: skip
        answer = {"entities": [], "needsYou": 1, "needsYouItems": [wait], "nextCursor": None}
        assert represent(LoopStatusSerializer(), answer) == LoopStatusSerializer(answer).data
