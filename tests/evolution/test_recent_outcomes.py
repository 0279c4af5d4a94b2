"""Recent outcomes read by index, bounded by the window (issue 18): exactly the trigger's own window, per entity.

The fleet, loop_status and the entity pages show an idle entity's last
windowRuns graded runs, bad or not. They are read for many entities at once
(``evolution.reads.recent``); each answer must be what the trigger's window
read (``graded_window``) gives that entity alone, after random histories, a
re-grade, a rating that changes a run's value and a rating card's deadline.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from evolution.presets.repair import graded_window
from evolution.reads.fleet import recent_outcomes
from grading.metrics import is_bad
from grading.models import Entity, Execution, Grade, Rating
from grading.people import people_values
from tests.evolution.loop_helpers import graded, looped

pytestmark = pytest.mark.django_db

RATED_JUDGE = {"model": "m", "method": "judge", "method_hash": "h", "loop_hash": "", "role_hash": "r"}
ACCURACY = {"kind": "judged", "direction": "max", "role": "objective", "target": 0.9}
TONE = {"kind": "judged", "direction": "max", "unit": "score", "human": True, "role": "guard", "target": 0.6}


def reference(entity: Entity, now) -> list[bool]:
    """The trigger's own window of ``entity`` through now, one entity at a time, as bad/not bad, newest first."""
    size = int(entity.terms["loop"]["trigger"]["windowRuns"])
    window = graded_window(entity, through=None, size=size, now=now)
    people = people_values([g.execution_id for g in window])
    return [is_bad(g, entity.terms, people.get(str(g.execution_id), {})) for g in window]


def rated_entity(slug: str) -> Entity:
    return looped(slug, evaluation={"metrics": {"tone": TONE}}, loop={"threshold": 0.5})


def random_history(entity: Entity, rng: random.Random, user, start) -> None:
    """Runs graded a minute apart (some at the same instant), bad or not, a few replays, ungraded or waiting."""
    at = start
    for _ in range(rng.randint(0, 14)):
        if rng.random() > 0.2:
            at += timedelta(minutes=1)  # else the same instant: the tie-break on the run decides
        kind = rng.random()
        status = Grade.Status.BOOKED if kind < 0.1 else Grade.Status.GRADED
        grade = graded(
            entity,
            bad=rng.random() < 0.4,
            at=at,
            loop_launched=0.1 <= kind < 0.2,
            status=status,
            judge=RATED_JUDGE if "tone" in entity.terms["evaluation"]["metrics"] else None,
        )
        if "tone" in entity.terms["evaluation"]["metrics"]:
            grade.score, grade.metrics = 0.9, {"tone": 0.9}
            grade.save(update_fields=["score", "metrics"])
        if rng.random() < 0.15:
            Execution.objects.filter(pk=grade.execution_id).update(
                awaiting_rating_until=timezone.now() + timedelta(hours=rng.choice([-1, 1]))
            )
        if "accuracy" in entity.terms["evaluation"]["metrics"]:
            grade.metrics = {"accuracy": rng.choice([0.5, 0.95])}
            grade.save(update_fields=["metrics"])
        for metric_id in ("tone", "accuracy"):  # a rating of a metric people do not rate changes nothing
            if rng.random() < 0.2 and metric_id in entity.terms["evaluation"]["metrics"]:
                value = rng.choice([1, 5])
                Rating.objects.create(execution_id=grade.execution_id, metric_id=metric_id, user=user,
                                      value=Decimal(value), normalized=value / 5)  # fmt: skip


def test_the_batch_read_gives_every_entity_the_trigger_window_after_random_histories(alice):
    rng = random.Random(18)
    start = timezone.now() - timedelta(hours=3)
    entities = [looped(f"plain-{i}") for i in range(8)] + [rated_entity(f"rated-{i}") for i in range(4)]
    entities += [
        looped(f"targeted-{i}", evaluation={"metrics": {"accuracy": ACCURACY}}, loop={"threshold": 0.5})
        for i in range(4)
    ]
    for entity in entities:
        random_history(entity, rng, alice, start)
    now = timezone.now()
    kept = recent_outcomes(entities, now=now)
    assert kept == {e.pk: reference(e, now) for e in entities}
    assert any(len(v) == 5 for v in kept.values()) and any(any(v) for v in kept.values())


def test_a_regrade_and_a_rating_that_changes_its_value_show_at_the_next_read(alice):
    entity = rated_entity("triage")
    grades = []
    for minute in range(6):
        grade = graded(entity, bad=False, at=timezone.now() - timedelta(minutes=10 - minute), judge=RATED_JUDGE)
        grade.score, grade.metrics = 0.9, {"tone": 0.9}
        grade.save(update_fields=["score", "metrics"])
        grades.append(grade)
    now = timezone.now()
    assert recent_outcomes([entity], now=now)[entity.pk] == [False] * 5 == reference(entity, now)

    newest = grades[-1]
    rating = Rating.objects.create(
        execution_id=newest.execution_id, metric_id="tone", user=alice, value=Decimal(1), normalized=0.1
    )
    assert recent_outcomes([entity], now=now)[entity.pk] == [True] + [False] * 4 == reference(entity, now)

    rating.normalized, rating.value = 1.0, Decimal(5)
    rating.save()
    grades[-2].passed = False
    grades[-2].save(update_fields=["passed"])  # re-graded: it failed after all
    assert recent_outcomes([entity], now=now)[entity.pk] == [False, True, False, False, False] == reference(entity, now)

    Grade.objects.filter(pk=grades[-3].pk).update(status=Grade.Status.FAILED)  # its grading failed: no slot
    assert recent_outcomes([entity], now=now)[entity.pk] == [False, True, False, False, False] == reference(entity, now)
    assert [g.execution_id for g in graded_window(entity, through=None, size=5, now=now)][2] == grades[-4].execution_id


def test_a_run_waiting_on_its_rating_card_counts_once_the_deadline_passes():
    entity = looped()
    for minute in range(5):
        graded(entity, bad=False, at=timezone.now() - timedelta(minutes=10 - minute))
    waiting = graded(entity, bad=True, at=timezone.now() - timedelta(minutes=1))
    until = timezone.now() + timedelta(hours=1)
    Execution.objects.filter(pk=waiting.execution_id).update(awaiting_rating_until=until)
    assert recent_outcomes([entity], now=timezone.now())[entity.pk] == [False] * 5
    later = until + timedelta(seconds=1)
    assert recent_outcomes([entity], now=later)[entity.pk] == [True] + [False] * 4 == reference(entity, later)
