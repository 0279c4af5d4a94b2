"""One cycle's story: its window, every round, the check and the watch, the lesson it left (seed 003, "What a settled cycle keeps")."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import Prefetch, prefetch_related_objects

from evolution.core import outcomes as verdicts
from evolution.core import spend
from evolution.core.links import file_change
from evolution.core.outcomes import aside_words, no_lesson_words
from evolution.models import Cycle, Lesson, Recall, Round
from evolution.reads import checks
from evolution.reads.status import ENDED, NotFound, _pr, ended, grade_of, label, line_of, needs_you, strength_of
from grading.metrics import is_bad
from grading.models import Entity, Execution, Grade


def _uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    found = []
    for value in values:
        try:
            found.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # a custom window may name runs this deployment never stored; the story lists them as ids
    return found


def run_rows(entity: Entity, run_ids: list[str], executions: dict[str, Execution], people: dict) -> list[dict]:
    """The runs a window names, in its order: id, status, grade outcome, bad for the trigger, metrics, url."""
    rows = []
    for run_id in run_ids:
        execution = executions.get(str(run_id))
        grade = getattr(execution, "grade", None) if execution is not None and hasattr(execution, "grade") else None
        bad = None
        if grade is not None and grade.status == Grade.Status.GRADED:
            grade.entity = entity
            bad = is_bad(grade, entity.terms or {}, people.get(str(run_id), {}))
        rows.append(
            {
                "id": str(run_id),
                "status": execution.status if execution else None,
                "gradeStatus": grade.status if grade else None,
                "passed": grade.passed if grade else None,
                "score": grade.score if grade else None,
                "bad": bad,
                "metrics": dict(grade.metrics or {}) if grade else {},
                "failureCategory": grade.failure_category if grade else "",
                "completedAt": execution.completed_at if execution else None,
                "url": execution.get_absolute_url() if execution else "",
            }
        )
    return rows


def _round_dict(rnd: Round) -> dict[str, Any]:
    card = rnd.card
    revert = None
    if rnd.revert_pr_number:
        revert = {
            "number": rnd.revert_pr_number,
            "url": rnd.revert_pr_url or f"/evolution/pulls/{rnd.revert_pr_number}/",
            "openedAt": rnd.revert_opened_at,
            "deadline": rnd.revert_deadline,
            "outcome": rnd.revert_outcome,
            "mergedAt": rnd.revert_merged_at,
            "mergeGate": rnd.revert_merge_gate,
        }
    files = [f for f in (rnd.files or []) if isinstance(f, dict)]
    return {
        "number": rnd.number,
        "parent": rnd.parent.number if rnd.parent_id and rnd.parent else None,
        "status": rnd.status,
        "author": rnd.author,
        "summary": rnd.summary,
        "hypothesis": rnd.hypothesis,
        "refinement": rnd.refinement,
        "files": [str(f.get("path", "")) for f in files],
        "changes": [file_change(f) for f in files],
        "citedLessons": list(rnd.cited_lessons or []),
        "error": rnd.error,
        "costUsd": rnd.cost_usd,
        "reads": [r for r in (rnd.reads or []) if isinstance(r, dict)],
        "createdAt": rnd.created_at,
        "proposedAt": rnd.proposed_at,
        "decidedAt": rnd.decided_at,
        "decidedBy": rnd.decided_by,
        "decisionNote": rnd.decision_note,
        "rejection": rnd.rejection,
        "setAside": rnd.set_aside,
        "asideWords": aside_words(rnd) if rnd.rejection == Round.Rejection.ASIDE else "",
        "reviewDeadline": rnd.review_deadline,
        "card": (
            {"id": str(card.pk), "kind": card.kind, "status": card.status, "url": card.get_absolute_url()}
            if card is not None
            else None
        ),
        "mergeGate": rnd.merge_gate,
        "pr": _pr(rnd),
        "branch": rnd.branch,
        "baseSha": rnd.base_sha,
        "headSha": rnd.head_sha,
        "mergeSha": rnd.merge_sha,
        "gate": rnd.gate or {},
        "checkedSha": rnd.checked_sha,
        "checkVerdict": rnd.check_verdict,
        "check": checks.check_view(rnd.cycle, rnd),
        "pairs": pairs(rnd),
        "statuses": statuses(rnd),
        "revert": revert,
    }


def pairs(rnd: Round) -> list[dict[str, Any]]:
    """The round's check pairs input by input as the check compared them: [{slot, trial, input, baseline, candidate}].

    ``baseline`` is the incumbent's run id (a fresh replay, or the history run whose frozen grade stood in),
    ``candidate`` the replay at the PR's head; a side that never ran is null.
    """
    return checks.compare_pairs(rnd)


def statuses(rnd: Round) -> list[dict[str, Any]]:
    """The commit statuses the local forge holds on the round's checked commit (else its head); [] elsewhere."""
    from django.conf import settings

    sha = rnd.checked_sha or rnd.head_sha
    if not sha or settings.LOOP_FORGE != "local":
        return []
    from evolution.models import CommitStatus

    return [
        {"sha": sha, "context": s.context, "state": s.state, "description": s.description, "updatedAt": s.updated_at}
        for s in CommitStatus.objects.filter(sha=sha).order_by("context")
    ]


def _lesson_dict(lesson: Lesson) -> dict[str, Any]:
    return {
        "id": lesson.pk,
        "round": lesson.round.number,
        "outcome": lesson.outcome,
        "ended": ENDED.get(lesson.outcome, lesson.outcome),
        "summary": lesson.summary,
        "hypothesis": lesson.hypothesis,
        "rejection": lesson.rejection,
        "asideWords": aside_words(lesson.round) if lesson.rejection == Round.Rejection.ASIDE else "",
        "note": lesson.note,
        "decidedBy": lesson.round.decided_by,
        "perMetric": lesson.per_metric,
        "reason": lesson.reason,
        "files": lesson.files,
        "helpful": lesson.helpful,
        "harmful": lesson.harmful,
        "createdAt": lesson.created_at,
    }


def _remembered(cycle: Cycle) -> list[dict[str, Any]]:
    """The lessons this cycle's rounds were handed ("It remembered"), each named by the cycle it came from."""
    recalls = (
        Recall.objects.filter(round__cycle=cycle)
        .select_related("lesson__cycle", "lesson__round", "round")
        .prefetch_related(Prefetch("lesson__cycle__rounds", queryset=Round.objects.order_by("number")))
        .order_by("round__number", "lesson_id")
    )
    rows = []
    for recall in recalls:
        lesson = recall.lesson
        how = ENDED.get(lesson.outcome, lesson.outcome)
        strength = strength_of(lesson.cycle)
        rows.append(
            {
                "lessonId": lesson.pk,
                "cycleId": lesson.cycle_id,
                "round": lesson.round.number,
                "ended": how,
                "strength": strength,
                "label": label(lesson.cycle_id, lesson.round.number, how, strength),
                "summary": lesson.summary,
                "rejection": lesson.rejection,
                "note": lesson.note,
                "decidedBy": lesson.round.decided_by,
                "recalledIn": recall.round.number,
            }
        )
    return rows


def _recalled_by(cycle: Cycle) -> list[dict[str, Any]]:
    """The later cycles whose rounds were handed this cycle's lessons."""
    recalls = (
        Recall.objects.filter(lesson__cycle=cycle)
        .exclude(round__cycle=cycle)
        .select_related("round__cycle", "lesson")
        .prefetch_related(Prefetch("round__cycle__rounds", queryset=Round.objects.order_by("number")))
        .order_by("round__cycle__started_at", "round__number")
    )
    return [
        {
            "lessonId": recall.lesson_id,
            "cycleId": recall.round.cycle_id,
            "round": recall.round.number,
            "ended": ended(recall.round.cycle),
            "strength": strength_of(recall.round.cycle) if recall.round.cycle.status else None,
            "label": line_of(recall.round.cycle, recall.round.number),
        }
        for recall in recalls
    ]


def get_cycle(pk: Any) -> Cycle:
    """The cycle ``pk`` names with its entity; NotFound naming it otherwise."""
    cycle = Cycle.objects.select_related("entity", "requested_by", "anchor").filter(pk=pk).first()
    if cycle is None:
        raise NotFound(f"cycle {pk} names no cycle")
    return cycle


def cycle_detail(cycle: Cycle) -> dict[str, Any]:
    """loop_get_cycle: the cycle with every round (decisions, PR, gate, check pairs), its window and runs,
    its watch, the lessons it wrote, what it remembered and who recalled it, its strength and grade.
    """
    from grading.ratings import people_values

    prefetch_related_objects(
        [cycle], Prefetch("rounds", queryset=Round.objects.select_related("card", "parent").order_by("number"))
    )
    rounds = list(cycle.rounds.all())
    window = cycle.window or {}
    watch_window = cycle.watch_window or {}
    window_ids = [str(v) for v in window.get("runIds") or []]
    watch_ids = [str(v) for v in watch_window.get("runIds") or []]
    wanted = _uuids(window_ids + watch_ids)
    executions = {str(e.pk): e for e in Execution.objects.filter(pk__in=wanted).select_related("grade")}
    people = people_values(wanted) if wanted else {}
    lessons = list(cycle.lessons.select_related("round").order_by("id"))
    entity = cycle.entity
    return {
        "id": cycle.pk,
        "targetKind": entity.target_kind,
        "targetId": entity.slug,
        "name": entity.name or entity.slug,
        "origin": cycle.origin,
        "status": cycle.status or None,
        "ended": ended(cycle),
        "phase": cycle.phase,
        "reason": cycle.reason,
        "confoundedBy": cycle.confounded_by,
        "confoundedByEdit": cycle.confounded_by_edit,
        "analysed": cycle.analysed,
        "requestedBy": cycle.requested_by.get_username() if cycle.requested_by else "",
        "anchor": str(cycle.anchor_id) if cycle.anchor_id else None,
        "spentUsd": cycle.spent_usd,
        # Its whole cost to the last decimal, by part (issue 16): evolution.core.spend.
        "cost": spend.cost_of(cycle),
        "startedAt": cycle.started_at,
        "proposedAt": cycle.proposed_at,
        "appliedAt": cycle.applied_at,
        "mergedAt": cycle.merged_at,
        "completedAt": cycle.completed_at,
        "movedAt": cycle.moved_at,
        "mergeDeadline": cycle.merge_deadline,
        "window": window,
        "windowRuns": run_rows(entity, window_ids, executions, people),
        "frozen": cycle.frozen,
        "frozenSet": checks.frozen_view(cycle),
        "checkDeadline": cycle.check_deadline,
        "judge": cycle.judge or {},
        "rounds": [_round_dict(r) for r in rounds],
        "watch": {
            "openedAt": cycle.watch_opened_at,
            "deadline": cycle.watch_deadline,
            "window": cycle.watch_window,
            "tally": cycle.watch_tally,
            "verdict": cycle.watch_verdict,
            "runs": run_rows(entity, watch_ids, executions, people),
        },
        "lessons": [_lesson_dict(lesson) for lesson in lessons],
        "lessonError": cycle.lesson_error,
        "noLesson": no_lesson_words(cycle) if cycle.status else "",
        "remembered": _remembered(cycle),
        "recalledBy": _recalled_by(cycle),
        "strength": strength_of(cycle),
        "strengthWords": verdicts.strength_words(cycle),
        "seenOnly": verdicts.seen_only(cycle),
        "grade": grade_of(cycle),
        "needsYou": needs_you(cycle) if cycle.live else [],
        "url": cycle.get_absolute_url(),
    }
