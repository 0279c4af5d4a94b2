"""The navigation's "N need you" and the needs-you list read lean (issue 18): the same waits as every entity
and every live cycle read whole, in a fixed number of statements however many live cycles there are.

The fleet's list reads of a live cycle, its rounds and their cards only the columns its waits read
(``needs_you.CYCLE_WAIT_FIELDS`` …), of a failure's or a card's entity only its name; the count is that
list's length. Each test builds a random fleet with every kind of wait (cards, merge and revert waits, steps
due with no worker, expired cards, the breaker, holds, windows, failures, lock groups, load errors) and
compares with the whole read.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round, Supervision
from evolution.steering import needs_you
from grading.models import Entity
from hitl.models import Card
from tests.evolution.page_helpers import in_loop, make_card, make_cycle, make_round
from tests.evolution.test_fleet_waits_scale import every_wait

pytestmark = pytest.mark.django_db


def live_waits(rng: random.Random, prefix: str, n: int) -> None:
    """``n`` entities with a live cycle each, of every phase a wait (or none) can come of."""
    now = timezone.now()
    for i in range(n):
        entity = in_loop(f"{prefix}-{i:02d}")
        what = rng.choice(["decide", "retry", "expired", "merge", "auto", "revert", "stuck", "analysing", "watch"])
        if what in ("decide", "retry", "expired"):
            cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, claim=False)
            rnd = make_round(cycle, status=Round.Status.FAILED if what == "retry" else Round.Status.PROPOSED)
            kind = Card.Kind.RETRY if what == "retry" else Card.Kind.DECIDE
            card = make_card(rnd, kind=kind)
            if what == "expired":
                Card.objects.filter(pk=card.pk).update(expires_at=now - timedelta(minutes=1))
        elif what in ("merge", "auto"):
            cycle = make_cycle(entity, phase=Cycle.Phase.MERGE_WAIT, applied_at=now - timedelta(hours=1),
                               merge_deadline=now + timedelta(days=3), next_poll_at=now + timedelta(minutes=1))  # fmt: skip
            make_round(cycle, status=Round.Status.APPLIED, pr_number=100 + i,
                       merge_gate="human" if what == "merge" else "auto")  # fmt: skip
        elif what == "revert":
            cycle = make_cycle(entity, phase=Cycle.Phase.REVERTING, status=Cycle.Status.REGRESSED,
                               next_poll_at=now + timedelta(minutes=1))  # fmt: skip
            make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=8, revert_pr_number=9,
                       revert_opened_at=now - timedelta(hours=2), revert_deadline=now + timedelta(days=3),
                       revert_merge_gate=rng.choice(["human", "auto"]))  # fmt: skip
        elif what == "stuck":  # an accepted change nobody applies
            cycle = make_cycle(entity, phase=Cycle.Phase.APPLYING, moved_at=now - timedelta(hours=1))
            make_round(cycle, status=Round.Status.ACCEPTED)
        elif what == "analysing":
            cycle = make_cycle(entity, phase=Cycle.Phase.ANALYSING, moved_at=now - timedelta(hours=rng.choice([0, 1])))
            make_round(cycle, status=Round.Status.ANALYSING)
        else:
            cycle = make_cycle(entity, phase=Cycle.Phase.WATCHING, watch_deadline=now - timedelta(hours=1))
            make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=400 + i)


def whole_items() -> list[dict]:
    """The list over every entity read whole and every live cycle read whole (what it read before)."""
    entities = list(
        Entity.objects.filter(loop_enabled=True, present=True).select_related("waiting_window").order_by("pk")
    )
    return needs_you.public(needs_you.collect(timezone.now(), entities=entities, whole=True))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_count_and_the_list_are_what_reading_everything_whole_gives(seed):
    rng = random.Random(seed)
    every_wait(rng, "w", 16)
    live_waits(rng, "l", 16)
    with time_machine.travel(timezone.now(), tick=False):
        expected = whole_items()
        assert needs_you.items() == expected
        assert needs_you.count() == len(expected) > 0


def test_the_count_follows_the_rows_as_they_change():
    rng = random.Random(9)
    every_wait(rng, "w", 12)
    live_waits(rng, "l", 12)
    for change in (
        lambda: Card.objects.filter(status=Card.Status.PENDING).update(status=Card.Status.ANSWERED),
        lambda: Supervision.objects.filter(kind=Supervision.Kind.HOLD).delete(),
        lambda: Cycle.objects.exclude(phase=Cycle.Phase.SETTLED).update(merge_deadline=timezone.now()),
        lambda: Entity.objects.update(load_error=""),
    ):
        change()
        with time_machine.travel(timezone.now(), tick=False):
            assert needs_you.count() == len(whole_items())


def test_a_step_due_long_enough_joins_the_count_when_it_crosses_the_bound():
    cycle = make_cycle(in_loop("late"), phase=Cycle.Phase.ANALYSING)
    make_round(cycle, status=Round.Status.ANALYSING)
    assert needs_you.count() == 0
    with time_machine.travel(cycle.moved_at + timedelta(minutes=6)):
        assert needs_you.count() == len(whole_items()) == 1


@pytest.mark.parametrize("read", ["items", "count"])
def test_the_fleets_waits_cost_the_same_statements_with_five_times_the_live_cycles(read):
    """Nothing the waits read is left deferred for a per-cycle query (a cycle's, a round's, a card's column)."""
    every_wait(random.Random(5), "w", 8)
    live_waits(random.Random(6), "few", 4)
    with CaptureQueriesContext(connection) as few:
        getattr(needs_you, read)()
    live_waits(random.Random(7), "many", 20)
    with CaptureQueriesContext(connection) as many:
        getattr(needs_you, read)()
    assert len(many.captured_queries) == len(few.captured_queries) <= 12


def test_the_count_counts_grant_cards_and_failures_as_the_list_lists_them():
    """Open grant cards of the loop's producers (naming an entity or none), not expired ones, not another
    producer's; failures nobody dismissed, not dismissed ones."""
    entity = in_loop("granted")
    later, earlier = timezone.now() + timedelta(hours=3), timezone.now() - timedelta(minutes=1)
    for i, (producer, kind, until, payload) in enumerate(
        [
            ("loop-supervise", Card.Kind.GRANT, later, {"op": "rearm", "entity": entity.pk}),
            ("loop-settings", Card.Kind.WIDEN, later, {}),
            ("loop-idea", Card.Kind.GRANT, earlier, {}),
            ("loop", Card.Kind.GRANT, later, {}),
            ("loop", Card.Kind.DECIDE, later, {}),
            ("grading", Card.Kind.RATING, later, {}),
        ]
    ):
        Card.objects.create(producer=producer, kind=kind, key=f"k:{i}", subject="s", title=f"card {i}",
                            expires_at=until, payload=payload)  # fmt: skip
    broke = make_cycle(entity, phase=Cycle.Phase.SETTLED, status=Cycle.Status.FAILED, reason="broke")
    dismissed = make_cycle(in_loop("other"), phase=Cycle.Phase.SETTLED, status=Cycle.Status.FAILED, reason="x")
    Supervision.objects.create(kind=Supervision.Kind.DISMISS, cycle=dismissed, actor="alice", reason="seen")
    with time_machine.travel(timezone.now(), tick=False):
        expected = whole_items()
        assert sorted(i["gate"] for i in expected) == ["failure", "grant", "grant", "grant"]
        assert needs_you.count() == len(expected) == len(needs_you.items())
    assert broke.pk in [i["cycleId"] for i in expected]
