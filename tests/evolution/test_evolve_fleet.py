"""The fleet says when an idle evolve entity's next cycle can open, in its cadence's two clocks: "next look in
3 grades / 2 h" — the grades its window still needs since the previous cycle's mark, and the hours to its
scheduled look (seed 003, "Improving what already works"; the issue's Pages)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from evolution.loop import trigger
from evolution.models import Cycle
from evolution.reads import fleet
from tests.evolution.evolve_helpers import MINUTE, T0, runs, shop, window_of

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def next_of(entity) -> str:
    (row,) = fleet.loop_status(entity)["entities"]
    return row["next"]


def test_an_idle_evolve_entity_counts_its_window_and_the_hours_to_its_next_look():
    entity = shop(trigger={"windowRuns": 10, "every": 24})
    window_of(entity, runs([1000.0] * 7), start=T0 - 30 * HOUR)
    with time_machine.travel(T0 - 22 * HOUR, tick=False):
        assert trigger.look(entity) is False  # the scheduled look: 7 of 10, not ready (recorded)
    with time_machine.travel(T0, tick=False):
        assert next_of(entity) == (
            "Preset evolve: 7 of 10 graded runs since the previous cycle's window; next look in 3 grades / 2 h."
        )
    with time_machine.travel(T0 + 90 * MINUTE, tick=False):
        assert next_of(entity).endswith("next look in 3 grades / 30 min.")
    with time_machine.travel(T0 + 3 * HOUR, tick=False):
        assert next_of(entity).endswith("next look in 3 grades / at the next hourly sweep.")


def test_the_count_starts_at_the_previous_cycles_mark_and_an_entity_without_every_counts_grades_only():
    entity = shop(trigger={"windowRuns": 10}, loop={"cooldownHours": 0})
    window_of(entity, runs([1000.0] * 12), start=T0 - 5 * HOUR)
    Cycle.objects.create(
        entity=entity,
        key="test:mark",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.SETTLED,
        status=Cycle.Status.VALIDATED,
        analysed=True,
        started_at=T0 - 5 * HOUR + 8 * MINUTE,  # read the first nine: three landed after it
        completed_at=T0 - 4 * HOUR,
    )
    with time_machine.travel(T0, tick=False):
        assert next_of(entity) == (
            "Preset evolve: 3 of 10 graded runs since the previous cycle's window; next look in 7 grades."
        )


def test_a_ready_window_says_the_next_grade_or_look_opens_a_cycle():
    entity = shop(trigger={"windowRuns": 5})
    window_of(entity, runs([1000.0] * 6), start=T0 - HOUR)
    with time_machine.travel(T0, tick=False):
        assert next_of(entity).startswith("Preset evolve: 6 of 5 graded runs since the previous cycle's window: ")


def test_the_fleet_page_shows_it(client, django_user_model):
    alice = django_user_model.objects.create_superuser("alice", "alice@example.org", "pw")
    client.force_login(alice)
    entity = shop(trigger={"windowRuns": 10, "every": 24})
    window_of(entity, runs([1000.0] * 7), start=T0 - 30 * HOUR)
    with time_machine.travel(T0 - 22 * HOUR, tick=False):
        trigger.look(entity)
    with time_machine.travel(T0, tick=False):
        page = client.get(reverse("evolution:fleet")).content.decode()
    assert "7 of 10 graded runs since the previous cycle&#x27;s window; next look in 3 grades / 2 h." in page
