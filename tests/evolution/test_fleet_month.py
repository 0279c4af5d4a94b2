"""The fleet's month (issue 16) read for a page's rows in one statement equals the annotation and the cycles' own
costs, after random histories (issue 18: the page no longer compiles the annotation's subqueries)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evolution.core import spend
from evolution.models import Cycle, Round
from evolution.reads import economics, fleet
from grading.models import Entity
from tests.evolution.loop_helpers import looped
from tests.evolution.test_economics import judged, replayed, spent_cycle
from tests.grading.grading_helpers import make_run

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 20, 12, tzinfo=UTC)
STATUSES = [Cycle.Status.VALIDATED, Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED, Cycle.Status.SKIPPED]


def money(rng: random.Random) -> str:
    return str(Decimal(rng.randrange(0, 10**6)) / Decimal(10**12) + Decimal(rng.randrange(0, 3)))


def history(rng: random.Random, entity: Entity) -> None:
    """Cycles in February, March and April, some with replays and the watch's gradings, some refusals."""
    for n in range(rng.randrange(0, 6)):
        at = NOW + timedelta(days=rng.randrange(-45, 20), minutes=n)
        status = rng.choice(STATUSES)
        cycle = spent_cycle(entity, at=at, proposer=money(rng), status=status)
        if rng.random() < 0.15:  # a refusal row: it opened no analysis and spent nothing the month counts
            Cycle.objects.filter(pk=cycle.pk).update(analysed=False)
        if rng.random() < 0.6:
            rnd = Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED)
            for slot in range(rng.randrange(1, 3)):
                for side in ("candidate", "incumbent"):
                    replayed(rnd, slot=slot, side=side, run_cost=money(rng), judge_cost=money(rng), at=at)
        if rng.random() < 0.5:
            reason = f"exempt:watch:{cycle.pk}"
            judged(make_run(entity), cost=money(rng), reason=reason, at=at + timedelta(hours=1))


def expected(entity: Entity) -> dict[str, object]:
    """The month of ``entity`` from its cycles one by one (``spend.cost_of``)."""
    start, end = spend.month_of(NOW)
    cycles = list(spend.opened_in(start, end).filter(entity=entity))
    parts = {name: sum((spend.cost_of(c)[name] for c in cycles), Decimal(0)) for name in spend.PARTS}
    return {
        "month_cycles": len(cycles),
        "month_validated": sum(c.status == Cycle.Status.VALIDATED for c in cycles),
        "month_regressed": sum(c.status == Cycle.Status.REGRESSED for c in cycles),
        **{f"month_{name}": amount for name, amount in parts.items()},
    }


def month(entity: Entity) -> dict[str, object]:
    return {name: getattr(entity, name) for name in economics.MONTH_FIELDS}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_pages_month_read_in_one_statement_equals_each_cycles_cost_and_the_annotation(seed):
    rng = random.Random(seed)
    entities = [looped(f"spender-{i}") for i in range(6)]
    for entity in entities:
        history(rng, entity)
    with time_machine.travel(NOW, tick=False):
        read = list(Entity.objects.filter(pk__in=[e.pk for e in entities]))
        with CaptureQueriesContext(connection) as statements:
            fleet.with_months(read, now=NOW)
        annotated = economics.with_month(Entity.objects.filter(pk__in=[e.pk for e in entities]), now=NOW).in_bulk()
    assert len(statements.captured_queries) == 1
    assert sum(e.month_cycles for e in read) and sum(e.month_replays_usd for e in read)  # the history holds some
    for entity in read:
        assert month(entity) == expected(entity)
        assert month(annotated[entity.pk]) == month(entity)
        assert economics.month_of_row(entity)["spent_usd"] == sum(
            (expected(entity)[f"month_{name}"] for name in spend.PARTS), Decimal(0)
        )


def test_an_entity_with_no_cycle_this_month_reads_zero_without_a_statement_when_none_is_asked():
    entity = looped("quiet")
    with CaptureQueriesContext(connection) as statements:
        assert fleet.with_months([], now=NOW) == []
    assert not statements.captured_queries
    (read,) = fleet.with_months([Entity.objects.get(pk=entity.pk)], now=NOW)
    assert month(read) == {
        name: (0 if name.endswith(("cycles", "validated", "regressed")) else 0) for name in economics.MONTH_FIELDS
    }


def test_the_months_annotation_counts_the_cycles_opened_in_the_month_and_their_watchs_gradings_since_each_opened():
    """The written-out annotation's edges: the month's first instant counts and the next month's does not, a
    refusal row spent nothing, a watch's grading counts when it names the cycle exactly and was booked since it
    opened."""
    entity = looped("edges")
    start, end = spend.month_of(NOW)
    first = spent_cycle(entity, at=start, proposer="1.000000000001", status=Cycle.Status.VALIDATED)
    last = spent_cycle(entity, at=end - timedelta(microseconds=1), proposer="2", status=Cycle.Status.REGRESSED)
    spent_cycle(entity, at=end, proposer="40")
    spent_cycle(entity, at=start - timedelta(microseconds=1), proposer="80")
    refused = spent_cycle(entity, at=start + timedelta(days=1), proposer="160", status=Cycle.Status.SKIPPED)
    Cycle.objects.filter(pk=refused.pk).update(analysed=False)
    rnd = Round.objects.create(cycle=first, number=1, status=Round.Status.MERGED)
    replayed(rnd, slot=0, side="candidate", run_cost="0.000000000003", judge_cost="0.5", at=start)
    Round.objects.create(cycle=last, number=1, status=Round.Status.MERGED)  # a round with no replay
    booked = start + timedelta(hours=1)
    judged(make_run(entity), cost="0.25", reason=f"exempt:watch:{first.pk}", at=booked)
    judged(make_run(entity), cost="320", reason=f"exempt:watch:{first.pk}", at=start - timedelta(seconds=1))
    judged(make_run(entity), cost="640", reason=f"exempt:watch:{first.pk}0", at=booked)
    judged(make_run(entity), cost="1280", reason=f"exempt:watch:{refused.pk}", at=booked + timedelta(days=1))

    (read,) = economics.with_month(Entity.objects.filter(pk=entity.pk), now=NOW)

    assert month(read) == expected(entity)
    assert month(read) == {
        "month_cycles": 2,
        "month_validated": 1,
        "month_regressed": 1,
        "month_proposer_usd": Decimal("3.000000000001"),
        "month_replays_usd": Decimal("0.000000000003"),
        "month_check_judge_usd": Decimal("0.5"),
        "month_watch_judge_usd": Decimal("0.25"),
    }
