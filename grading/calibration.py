"""Calibration: how far the judge agrees with people, per judged ``human: true`` metric (seed 003).

Over the entity's newest graded runs (never loop replays) that both the judge
and people scored — at most ``evaluation.human.agreement.maxPairs`` of them —
a pair agrees when the two numbers (both on 0..1) are within ``tolerance``.
Pairs count only under the entity's current judge: the model, method (and
its hash) and evaluator role of its newest grade. The loop module's hash is
not part of it, so editing ``<id>.loop.py`` keeps calibration; a new model or
method starts it over. Status is ``ok`` when at least ``minPairs`` pairs exist
and the agreeing share is at least ``threshold``, otherwise ``low``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Subquery

from grading import agreement
from grading.metrics import judge_scale
from grading.models import Entity, Execution, Grade, Rating
from singularity.brain.defaults import EVALUATION

#: The judge facts calibration compares (DESIGN: model chain, method and evaluator role — not the loop module).
JUDGE_KEYS = ("model", "method", "method_hash", "role_hash")
#: Float slack so 0.8 - 0.55 still reads as within a tolerance of 0.25.
EPSILON = 1e-9


@dataclass(frozen=True)
class MetricCalibration:
    """One metric's calibration: ``agreement`` is the agreeing share (None with no pairs); ``reason`` says why."""

    metric_id: str
    status: str
    pairs: int
    agreement: float | None
    reason: str
    #: The (judge, people) pairs read, what kind of scale they are on and the bootstrap's seed: what ``chance`` is
    #: computed from, on first read (a page that shows it; the gates never do).
    seen: tuple[tuple[float, float], ...] = field(default=(), compare=False, repr=False)
    scale: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    seed: int = field(default=0, compare=False, repr=False)

    @cached_property
    def chance(self) -> agreement.Chance:
        """The chance-corrected agreement beside the seed's share (issue 31): Cohen's κ, weighted κ or
        Krippendorff's α by the metric's scale, with its bootstrap 95 % interval."""
        kind = agreement.kind_of(self.scale)
        points = agreement.points_of(self.scale)
        return agreement.chance_corrected(list(self.seen), kind, points=points, seed=self.seed)

    @property
    def warning(self) -> str:
        """Where the seed's rule reads calibrated but chance could explain it: the sentence, else ""."""
        return agreement.shaky(self.status, self.chance) if self.status == "ok" else ""

    def as_dict(self) -> dict[str, Any]:
        """The shape ``ctx.calibration()`` hands a loop module: metricId, status, pairs, agreement."""
        return {"metricId": self.metric_id, "status": self.status, "pairs": self.pairs, "agreement": self.agreement}


def calibrated_metrics(entity: Entity) -> list[str]:
    """Return the ids of the entity's judged metrics that people rate too (``human: true``)."""
    metrics = (entity.terms.get("evaluation") or {}).get("metrics") or {}
    return [
        metric_id
        for metric_id, spec in metrics.items()
        if spec and spec.get("kind") == "judged" and spec.get("human") is True
    ]


def agreement_terms(entity: Entity) -> dict[str, Any]:
    """Return the resolved ``evaluation.human.agreement`` block (engine values for any key missing)."""
    engine = EVALUATION["human"]["agreement"]
    human = (entity.terms.get("evaluation") or {}).get("human") or {}
    return {**engine, **(human.get("agreement") or {})}


def _status(metric_id: str, pairs: list[tuple[float, float]], terms: dict[str, Any], **read: Any) -> MetricCalibration:
    """The seed's reading of ``pairs``; ``read`` (seen, scale, seed) is what the chance-corrected figure needs."""
    found = _status_of(metric_id, pairs, terms)
    return MetricCalibration(found.metric_id, found.status, found.pairs, found.agreement, found.reason, **read)


def _status_of(metric_id: str, pairs: list[tuple[float, float]], terms: dict[str, Any]) -> MetricCalibration:
    min_pairs, tolerance, threshold = terms["minPairs"], terms["tolerance"], terms["threshold"]
    if not pairs:
        return MetricCalibration(metric_id, "low", 0, None, f"low: 0 of {min_pairs} pairs under the current judge")
    agreeing = sum(1 for judge, people in pairs if abs(judge - people) <= tolerance + EPSILON)
    share = agreeing / len(pairs)
    if len(pairs) < min_pairs:
        reason = f"low: {len(pairs)} of {min_pairs} pairs under the current judge"
        return MetricCalibration(metric_id, "low", len(pairs), share, reason)
    said = f"{agreeing} of {len(pairs)} pairs agree within {tolerance}"
    if share + EPSILON < threshold:
        return MetricCalibration(metric_id, "low", len(pairs), share, f"low: {said}, under the {threshold} needed")
    return MetricCalibration(metric_id, "ok", len(pairs), share, f"ok: {said}")


def calibration(entity: Entity) -> list[MetricCalibration]:
    """Return the calibration of each judged ``human: true`` metric of ``entity``; empty when there is none.

    Two queries whatever the number of runs and ratings (``calibration_many``).
    """
    return calibration_many([entity]).get(entity.pk, [])


def _same_judge(facts: dict[str, Any], judge: dict[str, Any]) -> bool:
    """Whether a grade's judge ``facts`` are ``judge``'s; a missing fact matches only another missing one."""
    for key, value in judge.items():
        theirs = (facts or {}).get(key)
        if not value:
            if theirs not in (None, ""):
                return False
        elif theirs != value:
            return False
    return True


def calibration_many(entities: list[Entity], *, read_terms: bool = False) -> dict[int, list[MetricCalibration]]:
    """The calibration of each entity's judged ``human: true`` metrics (only entities with one are keys).

    Two queries for any number of entities: each entity's current judge (its
    newest own grade), and every rating of those metrics on the entities' own
    graded runs with the run's grade, newest graded first. Pairs are read from
    the ratings, never by walking the grades or the runs: a rating carries its
    run's entity, so the entities' ratings of those metrics come from an index
    (``rating_entity_metric``), each joined to its run's grade by key (the run
    row itself is never read: ``_rated_runs``), and no instant is read back.
    What is read grows with what people rated, never with the runs. Of a
    grade's vector only the rated metric's value is read where the database
    can pick it, and a metric's runs are walked only until its ``maxPairs``
    are found.

    ``read_terms``: the entities were read without their terms; they are read (and set on each) in the first
    statement, with the judges — of every entity then, as which ones calibrate is known only from the terms
    (Rate runs: one statement fewer, issue 37).
    """
    newest = (
        Grade.objects.filter(entity=OuterRef("pk"), status=Grade.Status.GRADED, execution__loop_launched=False)
        .order_by("-graded_at", "-booked_at")
        .values("judge")[:1]
    )
    read: list[tuple[int, Any]] | None = None
    if read_terms and entities:
        terms: dict[int, Any] = {}
        read = []
        for pk, their_terms, facts in (
            Entity.objects.filter(pk__in=[e.pk for e in entities])
            .annotate(newest_judge=Subquery(newest))
            .values_list("pk", "terms", "newest_judge")
        ):
            terms[pk] = their_terms
            read.append((pk, facts))
        for e in entities:
            e.terms = terms[e.pk]
    wanted = {e.pk: (e, calibrated_metrics(e)) for e in entities}
    wanted = {pk: pair for pk, pair in wanted.items() if pair[1]}
    if not wanted:
        return {}
    if read is None:
        read = list(
            Entity.objects.filter(pk__in=list(wanted))
            .annotate(newest_judge=Subquery(newest))
            .values_list("pk", "newest_judge")
        )
    judges: dict[int, dict[str, Any] | None] = {}
    for pk, facts in read:
        if pk not in wanted:
            continue
        if isinstance(facts, str):  # a JSON subquery comes back as text on some backends
            facts = json.loads(facts)
        judges[pk] = None if facts is None else {k: (facts or {}).get(k) for k in JUDGE_KEYS}
    metric_ids = sorted({m for _, metrics in wanted.values() for m in metrics})
    rows = _rated_runs(list(wanted), metric_ids)
    picked = connection.vendor == "postgresql"
    # Per entity and metric, its rated runs newest first: [judge's text, whether the vector holds the metric, its
    # value there, people's numbers].
    rated: dict[tuple[int, str], dict[Any, list[Any]]] = {}
    decoded: dict[str | None, Any] = {None: None}
    for execution_id, metric_id, normalized, entity_id, value, judge in rows:
        runs = rated.setdefault((entity_id, metric_id), {})
        if execution_id in runs:
            runs[execution_id][3].append(normalized)
            continue
        if value not in decoded:
            decoded[value] = json.loads(value)
        if picked:  # the value itself; SQL NULL when the vector has no such key
            holds, judged = value is not None, decoded[value]
        else:  # the whole vector
            vector = decoded[value]
            holds = metric_id in (vector or {})
            judged = vector.get(metric_id) if holds else None
        runs[execution_id] = [judge, holds, judged, [normalized]]
    answers: dict[int, list[MetricCalibration]] = {}
    for pk, (entity, metrics) in wanted.items():
        terms, judge = agreement_terms(entity), judges.get(pk)
        most = int(terms["maxPairs"])
        same: dict[str | None, bool] = {}  # by the judge's text: the page's runs share few judges
        answers[pk] = []
        for metric_id in metrics:
            pairs: list[tuple[float, float]] = []
            taken = 0
            runs = rated.get((pk, metric_id), {}) if judge is not None else {}
            for facts, holds, judged, values in runs.values():
                if taken >= most:
                    break
                if facts not in same:
                    if facts not in decoded:
                        decoded[facts] = json.loads(facts)
                    same[facts] = _same_judge(decoded[facts], judge)
                if not (holds and same[facts]):
                    continue
                taken += 1  # a run under the current judge with the metric takes a place, a number or not
                if isinstance(judged, int | float) and not isinstance(judged, bool):
                    pairs.append((float(judged), statistics.median(values)))
            spec = ((entity.terms.get("evaluation") or {}).get("metrics") or {}).get(metric_id) or {}
            answers[pk].append(
                _status(
                    metric_id,
                    pairs,
                    terms,
                    seen=tuple(pairs),
                    scale=judge_scale(spec),
                    seed=agreement.seed_of(entity.target_kind, entity.slug, metric_id),
                )
            )
    return answers


def _rated_runs(entity_ids: list[int], metric_ids: list[str]) -> list[tuple[Any, ...]]:
    """Every rating of ``metric_ids`` on the entities' own graded runs, newest graded first: (run id, metric id,
    people's number, entity id, the judge's value as JSON text, the grade's judge as JSON text).

    Each rating is joined to its run's grade by the run's key alone: a rating names its run, so the run row is
    never read — a loop replay is left out through ``execution_replays``, the index of the replays alone, not by
    reading each rated run (issue 37: the run rows were a third of the statement). The judge's value is the rated
    metric's alone on Postgres (SQL NULL when the vector has no such key); elsewhere the whole vector, which the
    caller reads the metric from. The database sorts: no instant is read back.
    """
    q = connection.ops.quote_name
    rating, grade, run = (q(m._meta.db_table) for m in (Rating, Grade, Execution))
    if connection.vendor == "postgresql":
        judged = f"CAST(({grade}.{q('metrics')} -> {rating}.{q('metric_id')}) AS text)"
    else:
        judged = f"CAST({grade}.{q('metrics')} AS text)"
    sql = (
        f"SELECT {rating}.{q('execution_id')}, {rating}.{q('metric_id')}, {rating}.{q('normalized')}, "
        f"{rating}.{q('entity_id')}, {judged}, CAST({grade}.{q('judge')} AS text) "
        f"FROM {rating} INNER JOIN {grade} ON ({rating}.{q('execution_id')} = {grade}.{q('execution_id')}) "
        f"WHERE {rating}.{q('entity_id')} IN ({', '.join(['%s'] * len(entity_ids))}) "
        f"AND {rating}.{q('metric_id')} IN ({', '.join(['%s'] * len(metric_ids))}) "
        f"AND {grade}.{q('status')} = %s "
        f"AND NOT EXISTS (SELECT 1 FROM {run} WHERE {run}.{q('id')} = {rating}.{q('execution_id')} "
        f"AND {run}.{q('loop_launched')}) "
        f"ORDER BY {grade}.{q('graded_at')} DESC, {grade}.{q('booked_at')} DESC, {rating}.{q('execution_id')} DESC"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*entity_ids, *metric_ids, Grade.Status.GRADED.value])
        return cursor.fetchall()
