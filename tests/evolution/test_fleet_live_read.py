"""The fleet reads its live cycles lean (issue 18): only the columns its rows and waits read, not a cycle's frozen
set (but a checking one's), terms, judge or rounds' proposals. What the fleet, its page and loop_status show is what
reading every live cycle whole gives, in every phase, and the statements stay fixed as live cycles grow."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Prefetch
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round
from evolution.reads import fleet
from hitl.models import Card
from tests.evolution.page_helpers import every_phase, in_loop, make_card, make_cycle, make_round

pytestmark = pytest.mark.django_db


def whole_live(scope):
    """Every live cycle read whole, its entity and rounds with their cards too (what the fleet read before)."""
    cycles = (
        Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
        .select_related("entity")
        .order_by("started_at", "id")
        .prefetch_related(Prefetch("rounds", queryset=Round.objects.select_related("card").order_by("number")))
    )
    return list(cycles if scope is None else cycles.filter(entity__in=scope.values("pk")))


def more_waits(prefix: str) -> None:
    """The phases' other shapes: an auto decide gate, a window not ready, a checking cycle's frozen set with trials,
    a retry card, a revert under a person's merge, a step nobody picked up."""
    now = timezone.now()
    auto = make_cycle(in_loop(f"{prefix}-auto"), phase=Cycle.Phase.ANALYSING)
    Cycle.objects.filter(pk=auto.pk).update(terms={"loop": {"autonomy": {"decide": "auto"}}})
    make_round(auto, status=Round.Status.ANALYSING, files=[])
    waiting = make_cycle(in_loop(f"{prefix}-window"), phase=Cycle.Phase.ANALYSING)
    Cycle.objects.filter(pk=waiting.pk).update(window={"ready": False, "reason": "2 of 5 runs"})
    checking = make_cycle(in_loop(f"{prefix}-checking"), phase=Cycle.Phase.CHECKING)
    slots = [{"input": {"q": i}, "score": {"passed": True} if i else None} for i in range(3)]
    Cycle.objects.filter(pk=checking.pk).update(
        frozen={"slots": slots, "terms": {"trials": 2}}, check_deadline=now + timedelta(hours=3), applied_at=now
    )
    make_round(checking, status=Round.Status.APPLIED, pr_number=700, checked_sha="c" * 40)
    retry = make_cycle(in_loop(f"{prefix}-retry"), phase=Cycle.Phase.DECIDING)
    make_card(make_round(retry, status=Round.Status.FAILED), kind=Card.Kind.RETRY)
    reverting = make_cycle(in_loop(f"{prefix}-revert"), phase=Cycle.Phase.REVERTING, status=Cycle.Status.REGRESSED)
    make_round(reverting, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=701, revert_pr_number=702,
               revert_opened_at=now, revert_deadline=now + timedelta(days=2), revert_merge_gate="human")  # fmt: skip
    stuck = make_cycle(in_loop(f"{prefix}-stuck"), phase=Cycle.Phase.APPLYING)
    make_round(stuck, status=Round.Status.ACCEPTED)
    Cycle.objects.filter(pk=stuck.pk).update(moved_at=now - timedelta(hours=2))


def shown(rows: list[dict]) -> list[dict]:
    return [{**row, "entity": row["entity"].pk} for row in rows]


def answers() -> tuple:
    now = timezone.now()
    status = fleet.loop_status(now=now)
    page = fleet.fleet_page(now=now, per_page=100)
    return (
        shown(status["entities"]),
        status["needsYouItems"],
        shown(page.rows),
        page.need_you,
        shown(fleet.fleet(now=now)),
    )


def test_the_lean_live_read_shows_what_the_whole_rows_show_in_every_phase(monkeypatch):
    every_phase("a")
    more_waits("b")
    lean = answers()
    monkeypatch.setattr(fleet, "live_cycles", whole_live)
    whole = answers()
    assert lean == whole
    states = {row["state"] for row in lean[0]}
    assert {"analysing", "window", "checking", "waiting_on_you", "reverting", "pr_open", "watching"} <= states
    assert any("it is applied without a card" in row["next"] for row in lean[0])
    assert any("checking (0 of 6 pairs graded)" in row["next"] for row in lean[0])
    assert {item["gate"] for item in lean[1]} >= {"decide", "retry", "merge", "revert", "stuck"}


def test_the_lean_live_read_reads_no_column_it_left_out_as_live_cycles_grow():
    every_phase("a")
    more_waits("b")
    with CaptureQueriesContext(connection) as few:
        fleet.fleet_page(per_page=50)  # every entity on the page: its live cycles are read whole
        fleet.loop_status(limit=50)
    for index in range(3):
        every_phase(f"more{index}")
        more_waits(f"again{index}")
    with CaptureQueriesContext(connection) as many:
        fleet.fleet_page(per_page=50)  # every entity on the page: its live cycles are read whole
        fleet.loop_status(limit=50)
    assert len(many.captured_queries) == len(few.captured_queries)


def test_a_named_live_read_hands_each_card_its_own_columns_and_makes_no_default_for_the_rest():
    """The needs-you list and loop_status build their card items from these: each column in its place (the
    statement reads them in another order than the model declares them), the rest left unread, not invented."""
    from evolution.steering.live import CARD_WAIT_FIELDS, live_rows

    rnd = make_round(make_cycle(in_loop("named-card"), phase=Cycle.Phase.DECIDING), status=Round.Status.PROPOSED)
    card = make_card(rnd)
    (cycle,) = live_rows(None, named=True)
    read = cycle.rounds[0].card
    stored = Card.objects.get(pk=card.pk)
    assert {name: getattr(read, name) for name in CARD_WAIT_FIELDS} == {
        name: getattr(stored, name) for name in CARD_WAIT_FIELDS
    }
    assert read.created_at != read.expires_at
    assert "short_id" in read.get_deferred_fields()  # unread, not a random one made up
    assert read.get_absolute_url() == stored.get_absolute_url()
