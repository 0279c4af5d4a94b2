"""The breaker read for a whole fleet (issue 18): one statement for every entity, the same answer as one by one."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Supervision
from evolution.steering import autonomy
from grading.models import Entity
from tests.evolution.loop_helpers import looped
from tests.evolution.test_autonomy import shipped

pytestmark = pytest.mark.django_db

STATUSES = ("validated", "regressed", "unvalidated")


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
