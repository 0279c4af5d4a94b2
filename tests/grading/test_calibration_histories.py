"""``calibration_many`` reads only what the pairs need (issue 18): over random histories — judges changing and
stating facts or not, replays, ungraded and unrated runs, vectors missing a metric or holding a non-number,
several people a run, ties in the grading instant, small ``maxPairs`` — it answers what the computation that
read every rating's whole vector answered (kept here as the reference)."""

from __future__ import annotations

import json
import random
import statistics
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import OuterRef, Subquery, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from grading.calibration import (
    JUDGE_KEYS,
    MetricCalibration,
    _same_judge,
    _status,
    agreement_terms,
    calibrated_metrics,
    calibration_many,
)
from grading.models import Entity, Grade, Rating
from tests.grading.rating_helpers import HELPFUL, JUDGE, LAYOUT_FIT, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db


def reference(entities: list[Entity]) -> dict[int, list[MetricCalibration]]:
    """``calibration_many`` as it stood: every rating of the metrics with its run's whole vector and judge."""
    wanted = {e.pk: (e, calibrated_metrics(e)) for e in entities}
    wanted = {pk: pair for pk, pair in wanted.items() if pair[1]}
    if not wanted:
        return {}
    newest = (
        Grade.objects.filter(entity=OuterRef("pk"), status=Grade.Status.GRADED, execution__loop_launched=False)
        .order_by("-graded_at", "-booked_at")
        .values("judge")[:1]
    )
    judges: dict[int, dict[str, Any] | None] = {}
    for pk, facts in (
        Entity.objects.filter(pk__in=list(wanted))
        .annotate(newest_judge=Subquery(newest))
        .values_list("pk", "newest_judge")
    ):
        if isinstance(facts, str):
            facts = json.loads(facts)
        judges[pk] = None if facts is None else {k: (facts or {}).get(k) for k in JUDGE_KEYS}
    metric_ids = sorted({m for _, metrics in wanted.values() for m in metrics})
    rows = (
        Rating.objects.filter(
            entity_id__in=list(wanted),
            metric_id__in=metric_ids,
            execution__loop_launched=False,
            execution__grade__status=Grade.Status.GRADED,
        )
        .values_list(
            "execution_id",
            "metric_id",
            "normalized",
            "entity_id",
            Cast("execution__grade__metrics", TextField()),
            Cast("execution__grade__judge", TextField()),
        )
        .order_by("-execution__grade__graded_at", "-execution__grade__booked_at", "-execution_id")
    )
    rated: dict[tuple[int, str], dict[Any, list[Any]]] = {}
    for execution_id, metric_id, normalized, entity_id, metrics, judge in rows:
        run = rated.setdefault((entity_id, metric_id), {}).setdefault(
            execution_id, [json.loads(metrics), json.loads(judge), []]
        )
        run[2].append(normalized)
    answers: dict[int, list[MetricCalibration]] = {}
    for pk, (entity, metrics) in wanted.items():
        terms, judge = agreement_terms(entity), judges.get(pk)
        answers[pk] = []
        for metric_id in metrics:
            pairs: list[tuple[float, float]] = []
            if judge is not None:
                runs = [
                    run
                    for run in rated.get((pk, metric_id), {}).values()
                    if _same_judge(run[1], judge) and metric_id in (run[0] or {})
                ]
                for vector, _, values in runs[: int(terms["maxPairs"])]:
                    judged = vector.get(metric_id)
                    if isinstance(judged, int | float) and not isinstance(judged, bool):
                        pairs.append((float(judged), statistics.median(values)))
            answers[pk].append(_status(metric_id, pairs, terms))
    return answers


#: Judges a history's grades come from: the current one, another model, one stating no role hash, an empty one.
JUDGES = [
    JUDGE,
    {**JUDGE, "model": "anthropic:claude-opus-5"},
    {k: v for k, v in JUDGE.items() if k != "role_hash"},
    {**JUDGE, "role_hash": ""},
    {**JUDGE, "loop_hash": "l2"},
    {},
]
#: What a vector may hold for a metric (``MISSING``: not there at all).
MISSING = object()
VALUES = [0.0, 0.25, 0.5, 0.75, 1, 1.0, 0.8] * 3 + ["0.5", True, None, [0.5], MISSING, MISSING]


def history(rng: random.Random, people: list[Any], n: int) -> Entity:
    """One entity's random history of runs, grades and ratings."""
    agreement = {"minPairs": rng.randint(1, 4), "maxPairs": rng.randint(1, 7), "tolerance": rng.choice([0.1, 0.25])}
    entity = make_entity(
        f"e{n}",
        metrics={"layout_fit": LAYOUT_FIT, "pacing": LAYOUT_FIT, "helpful": HELPFUL},
        evaluation={"human": {"agreement": agreement}},
    )
    start = timezone.now() - timedelta(days=3)
    for i in range(rng.randint(0, 24)):
        run = make_run(entity, completed_at=start + timedelta(hours=i), loop_launched=rng.random() < 0.1)
        if rng.random() < 0.85:
            vector = {m: rng.choice(VALUES) for m in ("layout_fit", "pacing", "helpful")}
            when = start + timedelta(hours=rng.choice([i, i, i, max(i - 1, 0)]))  # ties in the grading instant
            make_grade(
                run,
                metrics={m: v for m, v in vector.items() if v is not MISSING},
                judge=rng.choice(JUDGES[:1] * 12 + JUDGES),
                status=Grade.Status.GRADED if rng.random() < 0.85 else rng.choice([Grade.Status.BOOKED, "failed"]),
                graded_at=when,
            )
        for metric_id in ("layout_fit", "pacing", "helpful"):
            for person in rng.sample(people, rng.choice([0, 0, 1, 1, 2, 3])):
                normalized = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
                Rating.objects.create(
                    execution=run, metric_id=metric_id, user=person, value=1 + 4 * normalized, normalized=normalized
                )
    return entity


@pytest.mark.parametrize("seed", range(8))
def test_calibration_over_random_histories_is_what_reading_every_rating_whole_answered(alice, bob, charlie, seed):
    rng = random.Random(seed)
    entities = [history(rng, [alice, bob, charlie], n) for n in range(4)]
    expected = reference(entities)
    assert calibration_many(entities) == expected
    assert any(c.pairs for cs in expected.values() for c in cs)  # a history the pairs come from
