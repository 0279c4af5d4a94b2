"""What a settled round teaches the next analysis of its entity: writing, recalling, crediting and sweeping lessons.

Every round that reached a terminal with a proposal behind it leaves one
lesson (seed 003, "What a round teaches"): its outcome, hypothesis, how it was
turned down, the numbers that judged it (the watch's per-metric record first,
then the check's) and the files it changed. Nothing in a lesson is written by
a model. Recall hands a person's "no" first, then the newest, and applies the
bound after that order. A lesson cited by a round moves its score when that
round's cycle settles validated (measured) or regressed. The periodic sweep
deletes lessons older than the brain-wide ``lessons.retentionDays`` in one
dated delete.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, IntegerField, Value, When
from django.utils import timezone

from evolution.core.cycles import KILL_SWITCH_MARKS
from evolution.models import Cycle, Lesson, Round
from grading.models import Entity
from singularity.brain import defaults as D

log = logging.getLogger(__name__)

#: Verdict strengths under which a validated round measured something (credits its citations).
MEASURED = ("paired", "measured")


# --- Reading a cycle ---------------------------------------------------------------


def _has_proposal(rnd: Round) -> bool:
    return bool(rnd.files) or bool((rnd.summary or "").strip())


#: Where ``read_rounds_once`` keeps a cycle's rounds while its lesson is written (one read for the whole step).
ROUNDS_MEMO = "_lesson_rounds"


def rounds_of(cycle: Cycle) -> list[Round]:
    """The cycle's rounds by number: the ones ``read_rounds_once`` read, else read now."""
    memo = cycle.__dict__.get(ROUNDS_MEMO)
    return memo if memo is not None else list(cycle.rounds.order_by("number"))


@contextmanager
def read_rounds_once(cycle: Cycle) -> Iterator[Cycle]:
    """Within the block, the lesson's steps share one read of ``cycle``'s rounds (dropped after, never stale)."""
    cycle.__dict__[ROUNDS_MEMO] = list(cycle.rounds.order_by("number"))
    try:
        yield cycle
    finally:
        cycle.__dict__.pop(ROUNDS_MEMO, None)


def deciding_round(cycle: Cycle) -> Round | None:
    """Return the round whose change the cycle's verdict is about: the merged one, else the last with a proposal.

    A round a person refined is replaced by its child and is never the deciding one.
    """
    rounds = list(reversed(rounds_of(cycle)))
    merged = next((r for r in rounds if r.merge_sha), None)
    if merged is not None:
        return merged
    return next((r for r in rounds if r.status != Round.Status.REFINED and _has_proposal(r)), None)


def _as_list(per_metric: Any, source: str) -> list[dict[str, Any]]:
    """Return a verdict's perMetric as a list of objects, each marked with where it came from."""
    if isinstance(per_metric, dict):
        items = [
            {"metric": key, **value} if isinstance(value, dict) else {"metric": key, "value": value}
            for key, value in per_metric.items()
        ]
    elif isinstance(per_metric, list):
        items = [dict(item) if isinstance(item, dict) else {"value": item} for item in per_metric]
    else:
        return []
    return [{**item, "source": source} for item in items]


def _per_metric(cycle: Cycle, rnd: Round, deciding: Round | None) -> list[dict[str, Any]]:
    """The numbers behind a round's outcome: the watch's perMetric (for the deciding round) first, then the check's."""
    numbers: list[dict[str, Any]] = []
    if deciding is not None and rnd.pk == deciding.pk and isinstance(cycle.watch_verdict, dict):
        numbers += _as_list(cycle.watch_verdict.get("perMetric"), "watch")
    if isinstance(rnd.check_verdict, dict):
        numbers += _as_list(rnd.check_verdict.get("perMetric"), "check")
    return numbers


def _outcome(cycle: Cycle, rnd: Round, deciding: Round | None) -> str:
    """The terminal a round reached: the cycle's for the deciding round; failed or skipped for one set aside before it."""
    if deciding is not None and rnd.pk == deciding.pk:
        return cycle.status
    if rnd.status == Round.Status.FAILED:
        return Cycle.Status.FAILED
    if rnd.status in (Round.Status.SKIPPED, Round.Status.CLOSED):
        return Cycle.Status.SKIPPED
    return cycle.status


def _kill_switch(cycle: Cycle) -> bool:
    reason = (cycle.reason or "").lower()
    return any(mark in reason for mark in KILL_SWITCH_MARKS)


# --- Writing --------------------------------------------------------------------------


def write_for(cycle: Cycle) -> list[Lesson]:
    """Write the lessons a settled cycle owes and return its lessons (already written ones included).

    One per round that reached a terminal with a proposal behind it (it has
    files or a summary; a refined round is not a terminal). None for a cycle
    that is not settled at a terminal, has no round, or was ended by the kill
    switch. Idempotent: a round has at most one lesson.
    """
    if cycle.status not in Cycle.Status.values or _kill_switch(cycle):
        return []
    rounds = [r for r in rounds_of(cycle) if r.status != Round.Status.REFINED and _has_proposal(r)]
    if not rounds:
        return []
    deciding = deciding_round(cycle)
    lessons = []
    for rnd in rounds:
        existing = Lesson.objects.filter(round=rnd).first()
        lessons.append(existing if existing is not None else _write_one(cycle, rnd, deciding))
    return lessons


def _write_one(cycle: Cycle, rnd: Round, deciding: Round | None) -> Lesson:
    """Create the lesson of one round; a concurrent writer's row stands instead of a second one."""
    lesson = Lesson(
        entity_id=cycle.entity_id,
        cycle=cycle,
        round=rnd,
        outcome=_outcome(cycle, rnd, deciding),
        summary=rnd.summary,
        hypothesis=rnd.hypothesis,
        rejection=rnd.rejection,
        note=rnd.decision_note,
        per_metric=_per_metric(cycle, rnd, deciding),
        reason=cycle.reason,
        files=[item.get("path") for item in rnd.files or [] if isinstance(item, dict)],
        created_at=cycle.completed_at or timezone.now(),
    )
    try:
        with transaction.atomic():
            lesson.save(force_insert=True)
    except IntegrityError:
        existing = Lesson.objects.filter(round=rnd).first()
        if existing is None:
            raise
        return existing
    return lesson


# --- Recall ---------------------------------------------------------------------------


def recall(entity: Entity, limit: int) -> list[Lesson]:
    """Return at most ``limit`` of the entity's lessons: a person's rejections first, then newest first.

    The bound is applied after the order; ``limit`` 0 reads none.
    """
    if limit <= 0:
        return []
    human_first = Case(
        When(rejection=Round.Rejection.HUMAN, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    return list(
        Lesson.objects.filter(entity=entity)
        .select_related("round", "cycle")
        .order_by(human_first, "-created_at", "-pk")[:limit]
    )


# --- Credit ---------------------------------------------------------------------------


def strength_of(cycle: Cycle) -> str | None:
    """Return how strongly the cycle's verdict was measured: paired, measured, blind, or None.

    ``evolution.verdicts.strength`` when it is installed; until then a
    verdict with per-metric numbers (the watch's, or the deciding round's
    check) counts as measured and any other settled verdict as blind.
    """
    try:
        from evolution.core.outcomes import strength
    except ModuleNotFoundError as exc:
        if exc.name != "evolution.core.outcomes":
            raise
    else:
        return strength(cycle)
    if cycle.status not in (Cycle.Status.VALIDATED, Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED):
        return None
    deciding = deciding_round(cycle)
    watch = (cycle.watch_verdict or {}).get("perMetric") if isinstance(cycle.watch_verdict, dict) else None
    check = (
        (deciding.check_verdict or {}).get("perMetric")
        if deciding is not None and isinstance(deciding.check_verdict, dict)
        else None
    )
    return "measured" if watch or check else "blind"


def cited_ids(cycle: Cycle) -> list[int]:
    """Return the lesson ids the cycle's deciding round cited (integers only, each once, in order)."""
    deciding = deciding_round(cycle)
    if deciding is None:
        return []
    ids: list[int] = []
    for value in deciding.cited_lessons or []:
        if isinstance(value, int) and not isinstance(value, bool) and value not in ids:
            ids.append(value)
    return ids


def credit(cycle: Cycle) -> int:
    """Move the score of each lesson the cycle's deciding round cited; return how many lessons moved.

    Validated with strength paired or measured: helpful +1. Regressed:
    harmful +1, whatever measured it. Any other terminal, or a blind
    validated, moves nothing; an id naming no lesson moves nothing. Called
    once per settle (``machine.settle``).
    """
    ids = cited_ids(cycle)
    if not ids:
        return 0
    if cycle.status == Cycle.Status.REGRESSED:
        return Lesson.objects.filter(pk__in=ids).update(harmful=F("harmful") + 1)
    if cycle.status == Cycle.Status.VALIDATED and strength_of(cycle) in MEASURED:
        return Lesson.objects.filter(pk__in=ids).update(helpful=F("helpful") + 1)
    return 0


# --- Retention ------------------------------------------------------------------------


def brain_retention_days(*, checkout: Any | None = None) -> float:
    """Return the brain-wide ``loop.lessons.retentionDays``: MANIFEST.yaml's at the newest synced commit, else the engine's.

    A per-entity value is read by nothing. A manifest that does not load
    raises (the sweep deletes nothing on a guess).
    """
    from singularity.brain.frontmatter import parse_yaml
    from singularity.brain.loader import MANIFEST_PATH
    from singularity.brain.terms import resolve_terms

    engine = D.LOOP["lessons"]["retentionDays"]
    commit = Entity.objects.exclude(commit="").order_by("-synced_at").values_list("commit", flat=True).first()
    if not commit:
        return float(engine)
    if checkout is None:
        from grading.sync import current_checkout

        checkout = current_checkout()
    if not checkout.exists_at(commit, MANIFEST_PATH):
        return float(engine)
    manifest = parse_yaml(checkout.read_at(commit, MANIFEST_PATH).decode("utf-8"), path=MANIFEST_PATH) or {}
    terms, _ = resolve_terms("workflow", manifest, {}, entity_label=MANIFEST_PATH)
    return float(terms["loop"]["lessons"]["retentionDays"])


def sweep(now: datetime | None = None, *, retention_days: float | None = None, checkout: Any | None = None) -> int:
    """Delete every lesson older than the brain-wide retentionDays in one dated delete; return how many went."""
    now = now or timezone.now()
    days = brain_retention_days(checkout=checkout) if retention_days is None else float(retention_days)
    cutoff = now - timedelta(days=days)
    _, per_model = Lesson.objects.filter(created_at__lt=cutoff).delete()
    deleted = per_model.get(Lesson._meta.label, 0)
    if deleted:
        log.info("lessons: swept %d lesson(s) older than %g days", deleted, days)
    return deleted
