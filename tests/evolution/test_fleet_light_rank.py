"""The fleet's page ranks and counts every live cycle from plain rows and builds only the cycles it shows (issue 18).

What the page reads of every live cycle is a light read (``fleet.live_rows``: a few columns of the cycle, its
rounds and their cards, no model row): its waits are counted there (``needs_you.cycle_waits``), unbuilt, and
only the rows of the page read their cycles whole. Each test compares with the whole read over random fleets
of every phase and wait (``fleet.fleet``: every live cycle read whole, every wait built), and the last pins
that a page builds no more cycles, and sends no more statements, as the live cycles grow.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round
from evolution.reads import fleet
from evolution.reads.status import _live_rounds
from evolution.steering import needs_you
from grading.models import Entity
from hitl.models import Card
from tests.evolution.page_helpers import every_phase, in_loop, make_card, make_cycle, make_round
from tests.evolution.test_fleet_live_read import more_waits
from tests.evolution.test_fleet_waits_scale import every_wait

pytestmark = pytest.mark.django_db


def live_shapes(rng: random.Random, prefix: str, n: int) -> None:
    """``n`` entities with live cycles in random shapes: a card pending, answered or expired; a window not
    ready; a step nobody picked up; a PR under a person's or an auto merge gate; two live cycles at once."""
    now = timezone.now()
    for i in range(n):
        entity = in_loop(f"{prefix}-{i:02d}")
        shape = rng.choice(["card", "unready", "stuck", "merge", "two", "watching"])
        if shape == "card":
            cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, claim=rng.random() < 0.5)
            kind = rng.choice([Card.Kind.DECIDE, Card.Kind.RETRY])
            rnd = make_round(cycle, status=Round.Status.PROPOSED if kind == Card.Kind.DECIDE else Round.Status.FAILED)
            status = rng.choice([Card.Status.PENDING, Card.Status.PENDING, Card.Status.ANSWERED])
            card = make_card(rnd, kind=kind, status=status)
            Card.objects.filter(pk=card.pk).update(expires_at=now + timedelta(hours=rng.choice([-2, 5])))
        elif shape == "unready":
            cycle = make_cycle(entity, phase=Cycle.Phase.ANALYSING, at=now - timedelta(minutes=rng.randint(1, 300)))
            Cycle.objects.filter(pk=cycle.pk).update(window={"ready": rng.random() < 0.5, "reason": "2 of 5 runs"})
            if rng.random() < 0.5:
                rnd = make_round(cycle, status=Round.Status.ANALYSING, summary="", files=[])
                brief = rng.choice([{}, {"_claimed": now.isoformat()}, {"summary": "a brief", "files": ["a.md"]}])
                Round.objects.filter(pk=rnd.pk).update(brief=brief)  # an analysis due, claimed, or written
        elif shape == "stuck":
            cycle = make_cycle(entity, phase=Cycle.Phase.APPLYING)
            make_round(cycle, status=Round.Status.ACCEPTED)
            Cycle.objects.filter(pk=cycle.pk).update(moved_at=now - timedelta(minutes=rng.choice([1, 120])))
        elif shape == "merge":
            cycle = make_cycle(entity, phase=Cycle.Phase.MERGE_WAIT, applied_at=now - timedelta(hours=1),
                               merge_deadline=now + timedelta(hours=rng.choice([-1, 30])))  # fmt: skip
            make_round(cycle, status=Round.Status.APPLIED, pr_number=400 + i, merge_gate=rng.choice(["human", "auto"]))
        elif shape == "two":
            first = make_cycle(entity, phase=Cycle.Phase.DECIDING, claim=False, at=now - timedelta(hours=2))
            make_card(make_round(first))
            second = make_cycle(entity, phase=Cycle.Phase.ANALYSING, at=now - timedelta(hours=1))
            make_round(second, status=Round.Status.ANALYSING, summary="", files=[])
        else:
            cycle = make_cycle(entity, phase=Cycle.Phase.WATCHING, watch_tally="1 of 5 graded")
            make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=500 + i)


def random_fleet(seed: int) -> None:
    rng = random.Random(seed)
    every_phase(f"p{seed}")
    more_waits(f"m{seed}")
    every_wait(rng, f"w{seed}", 16)
    live_shapes(rng, f"l{seed}", 16)


def whole_cycles() -> list[Cycle]:
    from django.db.models import Prefetch

    rounds = Prefetch("rounds", queryset=Round.objects.select_related("card").order_by("number"))
    return list(
        Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
        .select_related("entity")
        .prefetch_related(rounds)
        .order_by("started_at", "id")
    )


def plain_waits(waits: list[tuple]) -> list[tuple]:
    """(what, the round's id, the fact: an instant, or a card's id) of ``cycle_waits``'s answer."""
    return [(what, rnd.id, fact.id if what == "card" else fact) for what, rnd, fact in waits]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_plain_rows_of_the_live_cycles_equal_them_read_whole_with_their_waits(seed):
    random_fleet(seed)
    now = timezone.now()
    whole = whole_cycles()
    for named in (False, True):
        rows = fleet.live_rows(None, named=named)
        assert [row.pk for row in rows] == [cycle.pk for cycle in whole]
        for row, cycle in zip(rows, whole, strict=True):
            for name in needs_you.CYCLE_WAIT_FIELDS if named else fleet.RANK_CYCLE_FIELDS:
                column = f"{name}_id" if name == "entity" else name
                assert getattr(row, column) == getattr(cycle, column), (cycle.pk, name)
            assert row.unready == (cycle.window.get("ready") is False)
            rounds = _live_rounds(cycle)
            assert [r.id for r in row.rounds] == [r.id for r in rounds]
            for plain, model in zip(row.rounds, rounds, strict=True):
                for name in needs_you.ROUND_WAIT_FIELDS if named else fleet.RANK_ROUND_FIELDS:
                    column = {"cycle": "cycle_id", "card": "card_id"}.get(name, name)
                    if name == "brief":  # whether it is written: all the waits read of it
                        assert plain.brief is bool(model.brief) or plain.brief == bool(model.brief), model.pk
                    elif name != "card":
                        assert getattr(plain, column) == getattr(model, column), (model.pk, name)
                assert (plain.card is None) == (model.card is None)
                for name in needs_you.CARD_WAIT_FIELDS if named else fleet.RANK_CARD_FIELDS:
                    if model.card is not None:
                        assert getattr(plain.card, name) == getattr(model.card, name), (model.pk, name)
            assert plain_waits(needs_you.cycle_waits(row, row.rounds, now)) == plain_waits(
                needs_you.cycle_waits(cycle, rounds, now)
            )
            if named:
                items = needs_you.cycle_items(row, row.rounds, now)
                assert needs_you.public(items) == needs_you.public(needs_you.cycle_items(cycle, rounds, now))
    scoped = Entity.objects.filter(slug__startswith=f"l{seed}-")
    assert [row.pk for row in fleet.live_rows(scoped)] == [c.pk for c in whole if c.entity.slug.startswith(f"l{seed}-")]


def shown(rows: list[dict]) -> list[dict]:
    return [{**row, "entity": row["entity"].pk} for row in rows]


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("per_page", [4, 9])
def test_the_pages_of_the_fleet_are_the_whole_fleets_rows_what_needs_a_person_first(seed, per_page):
    random_fleet(seed)
    now = timezone.now()
    whole = {row["targetId"]: row for row in shown(fleet.fleet(now=now))}
    first = fleet.fleet_page(per_page=per_page, now=now)
    pages = [first] + [fleet.fleet_page(per_page=per_page, page=p, now=now) for p in range(2, first.pages + 1)]
    rows = [row for page in pages for row in shown(page.rows)]
    assert rows == [whole[row["targetId"]] for row in rows]  # each row as reading the whole fleet builds it

    def attention(row: dict) -> tuple:
        return (*fleet.attention(row["state"], row["needsYou"]), row["name"].lower(), row["targetId"])

    assert [row["targetId"] for row in rows] == [row["targetId"] for row in sorted(whole.values(), key=attention)]
    waiting = {item["cycleId"] for row in whole.values() for item in row["needsYou"]}
    assert {page.need_you for page in pages} == {len(waiting)}
    found = fleet.fleet_page(query=f"l{seed}-0", per_page=per_page, now=now)  # a search: its own waits only
    mine = [row for row in whole.values() if row["targetId"].startswith(f"l{seed}-0")]
    assert found.total == len(mine)
    assert found.need_you == len({item["cycleId"] for row in mine for item in row["needsYou"]})


def many_live(prefix: str, n: int) -> None:
    """``n`` entities with a live cycle each, in turn deciding (a pending card), analysing and stuck, watching."""
    now = timezone.now()
    for i in range(n):
        entity = in_loop(f"{prefix}-{i:03d}")
        if i % 3 == 0:
            make_card(make_round(make_cycle(entity, phase=Cycle.Phase.DECIDING)))
        elif i % 3 == 1:
            cycle = make_cycle(entity, phase=Cycle.Phase.ANALYSING, at=now - timedelta(hours=2))
            make_round(cycle, status=Round.Status.ANALYSING, summary="", files=[])
        else:
            cycle = make_cycle(entity, phase=Cycle.Phase.WATCHING, watch_tally="1 of 5 graded")
            make_round(cycle, status=Round.Status.MERGED, merge_sha="m" * 40, pr_number=600 + i)


def cost(read) -> tuple[int, int]:
    """(statements sent, live cycles built as model rows) of ``read()``."""
    built = []

    def count(sender, instance, **kwargs):
        if instance.phase != Cycle.Phase.SETTLED:
            built.append(instance.pk)

    post_init.connect(count, sender=Cycle)
    try:
        with CaptureQueriesContext(connection) as statements:
            read()
    finally:
        post_init.disconnect(count, sender=Cycle)
    return len(statements.captured_queries), len(built)


def test_a_page_of_the_fleet_builds_the_cycles_it_shows_only_at_the_same_statements_as_live_cycles_grow():
    many_live("few", 12)
    few_page = cost(lambda: fleet.fleet_page(per_page=5))
    few_status = cost(lambda: fleet.loop_status(limit=5))
    many_live("many", 84)  # eight times the live cycles, as 100 to 800
    many_page = cost(lambda: fleet.fleet_page(per_page=5))
    many_status = cost(lambda: fleet.loop_status(limit=5))
    assert many_page[0] == few_page[0] <= 20 and many_status[0] == few_status[0] <= 20
    assert many_page[1] <= 5 and many_status[1] <= 5  # the page's live cycles, never the 96 live
    waiting = {item["cycleId"] for row in fleet.fleet() for item in row["needsYou"]}
    assert fleet.fleet_page(per_page=5).need_you == len(waiting) == 64  # 32 decide cards, 32 analyses nobody took
