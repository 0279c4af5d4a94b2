"""The breaker read for a whole fleet (issue 18): one statement for every entity, the same answer as one by one."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, Round, Supervision
from evolution.steering import autonomy
from grading.models import Entity
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db

STATUSES = ("validated", "regressed", "unvalidated")


def shipped(entity, status: str, *, minutes_ago: int, merge_gate: str = "human", verdict: dict | None = None) -> Cycle:
    """A settled cycle whose round merged (through ``merge_gate``), settled ``minutes_ago``, written as rows.

    Here the rows are only the input both readings of the breaker read (the bounded fleet read against each
    entity's whole history): how a settle writes them is test_autonomy's, which drives real settles.
    """
    at = timezone.now() - timedelta(minutes=minutes_ago)
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"shipped:{entity.pk}:{at.isoformat()}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.SETTLED,
        status=status,
        analysed=True,
        started_at=at - timedelta(minutes=5),
        merged_at=at - timedelta(minutes=2),
        completed_at=at,
        watch_verdict=verdict
        if verdict is not None
        else {"verdict": status, "perMetric": [], "perInput": [], "comparator": "count", "n": 5, "bad": 0},
    )
    Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED, merge_sha="a" * 40, merge_gate=merge_gate)
    return cycle


def one_by_one(entity) -> str | None:
    """The breaker's answer from every shipped settle since the re-arm, read for this entity alone."""
    why = autonomy._pause_of(entity, autonomy._settles([entity.pk]).get(entity.pk, []))
    return f"paused by the breaker: {why}; a re-arm hands the gates back" if why else None


def test_the_fleet_read_pauses_exactly_the_entities_their_whole_history_pauses():
    rng = random.Random(18)
    entities = []
    for i in range(30):
        entity = looped(f"e{i}", loop={"autonomy": {"maxConsecutiveRegressions": rng.choice([1, 2, 3])}})
        minutes = 500
        for _ in range(rng.randint(0, 8)):
            minutes -= rng.randint(1, 30)
            status = rng.choice(STATUSES)
            blind = {"verdict": status, "perMetric": [], "perInput": [], "comparator": "none", "n": 0}
            shipped(
                entity,
                status,
                minutes_ago=minutes,
                merge_gate=rng.choice(["human", "human", "auto"]),
                verdict=blind if rng.random() < 0.2 else None,
            )
            if rng.random() < 0.1:
                Supervision.objects.create(
                    entity=entity,
                    kind=Supervision.Kind.REARM,
                    actor="alice",
                    created_at=timezone.now() - timedelta(minutes=minutes - 1),
                )
        entities.append(entity)
    with CaptureQueriesContext(connection) as read:
        paused = autonomy.paused_many(entities)
    assert len(read.captured_queries) <= 2  # the settles, the rounds of those an autonomous merge shipped
    assert paused == {e.pk: one_by_one(e) for e in entities if one_by_one(e)}
    assert 0 < len(paused) < len(entities)
    # The fleet's read of a scope: each settle carries its entity's policy, no statement reads the policies.
    scope = Entity.objects.filter(pk__in=[e.pk for e in entities])
    with CaptureQueriesContext(connection) as read:
        assert autonomy.pauses_of(autonomy.settles_in(scope)) == paused
    assert len(read.captured_queries) <= 2


@pytest.mark.parametrize("seed", [3, 11, 29])
def test_the_bounded_read_answers_what_the_whole_history_answers_on_random_histories(seed):
    """``settles_in``/``paused_many`` (one statement, no model row a settle but an autonomous merge's) against
    every shipped settle since the re-arm read whole: policies of every kind, reverts by policy, failures and
    skips, equal settle instants, re-arms between settles, blind autonomous merges."""
    rng = random.Random(seed)
    entities = []
    for i in range(40):
        autonomy_terms = {"maxConsecutiveRegressions": rng.choice([1, 2, 3, None])}
        if rng.random() < 0.3:
            autonomy_terms["onUnmeasured"] = "continue"
        entity = looped(f"r{seed}-{i}", loop={"autonomy": autonomy_terms})
        minutes = 900
        for _ in range(rng.randint(0, 10)):
            minutes -= rng.choice([0, 1, 5, 30])  # 0: two settles at one instant
            status = rng.choice(STATUSES + ("regressed", "failed", "skipped"))
            blind = {"verdict": status, "perMetric": [], "perInput": [], "comparator": "none", "n": 0}
            cycle = shipped(
                entity,
                status,
                minutes_ago=minutes,
                merge_gate=rng.choice(["human", "auto"]),
                verdict=blind if rng.random() < 0.3 else None,
            ) if minutes >= 0 else None  # fmt: skip
            if cycle is not None and rng.random() < 0.15:
                Cycle.objects.filter(pk=cycle.pk).update(reverted_by_policy=True)
            if cycle is not None and rng.random() < 0.1:
                Cycle.objects.filter(pk=cycle.pk).update(merged_at=None)  # shipped nothing: never read
            if rng.random() < 0.08:
                Supervision.objects.create(
                    entity=entity,
                    kind=Supervision.Kind.REARM,
                    actor="alice",
                    created_at=timezone.now() - timedelta(minutes=minutes - 1),
                )
        entities.append(entity)
    entities = list(Entity.objects.filter(pk__in=[e.pk for e in entities]))
    expected = {e.pk: one_by_one(e) for e in entities if one_by_one(e)}
    assert autonomy.paused_many(entities) == expected
    scope = Entity.objects.filter(pk__in=[e.pk for e in entities])
    with CaptureQueriesContext(connection) as read:
        assert autonomy.pauses_of(autonomy.settles_in(scope)) == expected
    assert len(read.captured_queries) <= 2
    assert expected


def test_the_fleet_read_costs_two_statements_however_many_entities(django_assert_max_num_queries):
    few = [looped(f"few{i}") for i in range(2)]
    many = [looped(f"many{i}") for i in range(40)]
    for entity in few + many:
        shipped(entity, "regressed", minutes_ago=20)
        shipped(entity, "regressed", minutes_ago=10)
    with django_assert_max_num_queries(2):
        assert len(autonomy.paused_many(few)) == 2
    with django_assert_max_num_queries(2):
        assert len(autonomy.paused_many(many)) == 40


@pytest.mark.skipif(connection.vendor != "sqlite", reason="Postgres's plans: tests/test_explain_scale.py")
def test_on_sqlite_the_autonomous_merges_are_read_by_their_partial_index():
    """SQLite reads a partial index only for a query that repeats its condition's terms: the bounded read spells
    ``round_autonomous``'s, so it reads the autonomous merges by it rather than the rounds whole."""
    entity = looped("lit")
    shipped(entity, "unvalidated", minutes_ago=10, merge_gate="auto")
    with CaptureQueriesContext(connection) as read:
        autonomy.settles_in(Entity.objects.filter(pk=entity.pk))
    sql = next(q["sql"] for q in read.captured_queries if "cand AS MATERIALIZED" in q["sql"])
    with connection.cursor() as cursor:
        plan = " | ".join(str(row[-1]) for row in cursor.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
    assert "USING INDEX round_autonomous" in plan, plan
