"""Opening and settling cycles: one live claim per entity, cooldown, the daily ceiling, loud refusals (R7.*)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from evolution.core import cycles
from evolution.loop import machine, trigger
from evolution.models import Cycle, Round
from tests.concurrency import each_at_once
from tests.evolution.loop_helpers import cycles_of, graded, history, looped, settled_cycle

pytestmark = pytest.mark.django_db


def open_on_bad(entity, **kwargs):
    landed = graded(entity, bad=True)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution, **kwargs)


def test_the_database_holds_one_live_claim_per_entity():
    entity = looped()
    settled_cycle(entity, Cycle.Status.VALIDATED, at=timezone.now())
    Cycle.objects.create(entity=entity, key="a", origin="grade", claim=entity.pk)
    with pytest.raises(IntegrityError), transaction.atomic():
        Cycle.objects.create(entity=entity, key="b", origin="grade", claim=entity.pk)


def test_an_ordinary_settle_rests_the_entity_six_hours():
    entity = looped()
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.VALIDATED, at=now)
    refused = open_on_bad(entity, now=now + timedelta(hours=5))
    assert not refused.opened and refused.reason.startswith("cooldown: rests until")
    assert refused.cycle.status == Cycle.Status.SKIPPED and not refused.cycle.analysed
    assert open_on_bad(entity, now=now + timedelta(hours=6, minutes=1)).opened


def test_a_regressed_settle_rests_the_entity_a_day():
    entity = looped()
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.REGRESSED, at=now)
    assert not open_on_bad(entity, now=now + timedelta(hours=7)).opened
    assert open_on_bad(entity, now=now + timedelta(hours=25)).opened


def test_a_declared_cooldown_applies_after_a_regression_too():
    entity = looped(loop={"cooldownHours": 2})
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.REGRESSED, at=now)
    assert open_on_bad(entity, now=now + timedelta(hours=3)).opened


def test_a_refusal_starts_no_rest():
    entity = looped()
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.SKIPPED, at=now, analysed=False)  # a refusal, not an analysis
    assert open_on_bad(entity, now=now + timedelta(minutes=1)).opened


def test_max_analyses_per_day_is_a_rolling_day_of_analyses_that_ran():
    entity = looped(loop={"maxAnalysesPerDay": 2, "cooldownHours": 0})
    start = timezone.now()
    for hour in (0, 1):
        result = open_on_bad(entity, now=start + timedelta(hours=hour))
        assert result.opened
        machine.settle(result.cycle, Cycle.Status.SKIPPED, reason="test", now=start + timedelta(hours=hour))
    third = open_on_bad(entity, now=start + timedelta(hours=2))
    assert not third.opened
    assert third.reason == "maxAnalysesPerDay: 2 analyses in the last 24 hours (ceiling 2)"
    assert open_on_bad(entity, now=start + timedelta(hours=24, minutes=1)).opened


def test_max_analyses_per_day_counts_proposer_calls_so_a_retry_or_refinement_round_counts():
    # R7.6: "a rolling-24h ceiling on proposer agents"; DESIGN: refinements count toward it. One cycle that called
    # its proposer three times (its analysis, a refinement, a Retry) has used a ceiling of 3.
    from evolution.loop.decide import new_round

    entity = looped(loop={"maxAnalysesPerDay": 3, "cooldownHours": 0})
    start = timezone.now()
    first = open_on_bad(entity, now=start)
    assert first.opened
    new_round(first.cycle, refinement="shorter, please", now=start + timedelta(minutes=5))
    new_round(first.cycle, now=start + timedelta(minutes=10))
    machine.settle(first.cycle, Cycle.Status.SKIPPED, reason="test", now=start + timedelta(minutes=15))
    refused = open_on_bad(entity, now=start + timedelta(hours=1))
    assert not refused.opened
    assert refused.reason == "maxAnalysesPerDay: 3 analyses in the last 24 hours (ceiling 3)"
    # the rounds leave the rolling day as the cycle does
    assert open_on_bad(entity, now=start + timedelta(hours=24, minutes=11)).opened


def test_a_request_is_exempt_from_the_rest_but_not_from_the_live_claim():
    entity = looped()
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.REGRESSED, at=now)
    history(entity, "bg")
    with time_machine.travel(now + timedelta(hours=1)):
        requested = trigger.analyze_now(entity)
        assert requested.opened and requested.cycle.origin == Cycle.Origin.REQUEST
        assert requested.cycle.anchor is None
        again = trigger.analyze_now(entity)
    assert not again.opened and again.reason.startswith(f"cycle {requested.cycle.pk} is live")


def test_refusals_are_shown_as_skipped_cycles_with_their_reason():
    entity = looped()
    now = timezone.now()
    settled_cycle(entity, Cycle.Status.VALIDATED, at=now)
    open_on_bad(entity, now=now + timedelta(hours=1))
    refused = cycles_of(entity)[-1]
    assert refused.status == Cycle.Status.SKIPPED
    assert "cooldown" in refused.reason


def test_settle_releases_the_claim_and_a_second_settle_changes_nothing():
    entity = looped()
    opened = open_on_bad(entity)
    cycle = machine.settle(opened.cycle, Cycle.Status.FAILED, reason="broken")
    assert cycle.claim is None and cycle.phase == Cycle.Phase.SETTLED and cycle.completed_at
    again = machine.settle(cycle, Cycle.Status.VALIDATED, reason="late")
    assert again.status == Cycle.Status.FAILED and again.reason == "broken"


def test_a_switched_off_loop_refuses_even_a_request():
    entity = looped(loop={"enabled": False})
    result = trigger.analyze_now(entity)
    assert not result.opened and result.reason == f"the loop is off for {entity}"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_to_open_make_one_cycle():
    if connection.vendor != "postgresql":
        pytest.skip("real parallel workers need Postgres")
    entity = looped()
    history(entity, "bggg")
    grades = [graded(entity, bad=True) for _ in range(2)]
    results = each_at_once(
        [
            lambda grade=grade: machine.open_cycle(
                entity, origin=Cycle.Origin.GRADE, anchor=grade.execution, window={"runIds": []}
            )
            for grade in grades
        ]
    )
    assert sorted(r.opened for r in results) == [False, True]
    assert Cycle.objects.filter(entity=entity, analysed=True).count() == 1
    assert Cycle.objects.filter(claim=entity.pk).count() == 1


def test_the_ceilings_of_many_entities_are_each_entitys_own_facts_read_from_its_cycles():
    # Issue 18: ceilings_many is one written-out statement (the trigger asks it every batch). Its answer is what
    # each entity's cycles say: the newest settled analysis (a refusal row or an unsettled one never counts) and
    # the analyses started in the last 24 hours, through ceiling_words.
    import random

    from evolution.core.cycles import ceiling_words, ceilings_many, loop_terms

    rng = random.Random(18)
    now = timezone.now()
    entities = [
        looped(f"c{i}", loop={"maxAnalysesPerDay": rng.choice([1, 2, 3, None]), "cooldownHours": rng.choice([0, 1, 5])})
        for i in range(12)
    ]
    for entity in entities:
        for k in range(rng.randrange(5)):
            started = now - timedelta(hours=rng.uniform(0, 40))
            settled = rng.random() < 0.7
            cycle = Cycle.objects.create(
                entity=entity,
                key=f"r:{entity.pk}:{k}",
                origin=Cycle.Origin.GRADE,
                phase=Cycle.Phase.SETTLED if settled else Cycle.Phase.ANALYSING,
                status=rng.choice([Cycle.Status.VALIDATED, Cycle.Status.REGRESSED]) if settled else "",
                analysed=rng.random() < 0.8,
                started_at=started,
                completed_at=started + timedelta(minutes=rng.randrange(1, 300)) if settled else None,
                moved_at=started,
            )
            for number in range(1, rng.randrange(1, 4) + 1):  # its analysis, then refinements or Retry rounds
                opened = started + timedelta(minutes=rng.randrange(0, 600))
                if cycle.completed_at is not None:
                    opened = min(opened, cycle.completed_at)
                Round.objects.create(cycle=cycle, number=number, created_at=opened)
    answers = ceilings_many(entities, now=now)
    assert answers  # the draw refuses some
    for entity in entities:
        analysed = Cycle.objects.filter(entity=entity, analysed=True)
        last = analysed.exclude(completed_at=None).order_by("-completed_at").first()
        since = now - timedelta(hours=24)
        ran = analysed.filter(started_at__gt=since).count()
        ran += Round.objects.filter(cycle__in=analysed, number__gt=1, created_at__gt=since).count()
        expected = ceiling_words(
            loop_terms(entity), last.completed_at if last else None, last.status if last else "", ran, now
        )
        assert answers.get(entity.pk, "") == expected
        assert (cycles.ceiling_refusal(entity, now=now) or "") == expected
