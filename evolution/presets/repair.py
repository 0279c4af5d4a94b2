"""The repair preset: fix what is broken (seed 003, "Pick a preset — repair or evolve").

- ``repair_window``: the entity's last ``trigger.windowRuns`` graded runs
  through the grade that landed (ungraded runs take no slot, the loop's own
  replays are never in it, runs still waiting on a rating card are left out).
  ``windows_for`` reads the windows of a whole batch of landings at once.
- ``repair_should_open``: open when the landed run is itself bad and at least
  ``trigger.minFailures`` of the window are.
- ``count``: the post-merge comparator — ``watch.minFailures`` bad runs regress
  on the spot; a full window with fewer validates.
"""

from __future__ import annotations

import json
import uuid
from bisect import bisect_right
from datetime import datetime
from typing import Any

from evolution.models import Cycle
from evolution.presets.base import COUNT, UNIT, Answer, Observed, record, single_version, trigger_terms
from evolution.steering import groups
from evolution.steering.supervision import groups_of
from grading.cards import observed
from grading.metrics import OUTCOME_FIELDS, is_bad
from grading.models import Entity, Grade

#: ``repair_window`` not told the clean base the batch read from: it reads it.
UNREAD_CHANGE: Any = object()

#: What the rule reads of a window's grades (``outcomes``, ``is_bad``): the rest of the rows is left unread.
WINDOW_FIELDS = (*OUTCOME_FIELDS, "execution__loop_launched")


def graded_window(
    entity: Entity, *, through: Grade | None, size: int, now: datetime, after: datetime | None = None
) -> list[Grade]:
    """The entity's last ``size`` graded runs through ``through`` (or now), newest first; only those graded after
    ``after`` when given (a lock group's clean base)."""
    grades = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)
    if after is not None:
        grades = grades.filter(graded_at__gt=after)
    if through is not None and through.graded_at is not None:
        grades = grades.filter(graded_at__lte=through.graded_at)
    grades = single_version(observed(grades, now=now), entity)
    runs = list(grades.select_related("execution").only(*WINDOW_FIELDS).order_by("-graded_at", "-execution_id")[:size])
    for run in runs:
        run.entity = entity  # is_bad reads the terms through grade.entity: one row read per grade otherwise
    return runs


def windows_for(
    landings: list[Grade],
    entities: dict[int, Entity],
    *,
    now: datetime,
    after: dict[int, datetime | None] | None = None,
    landed: dict[int, int] | None = None,
) -> dict[Any, list[Grade]]:
    """The repair window of each landing (newest first), read for the whole batch at once.

    Per entity, its last windowRuns + (its landings in the batch) graded runs through its newest landing are
    read (one UNION ALL statement on Postgres, one indexed read per entity on SQLite); each landing's window
    is then the first windowRuns of them at or before it. A landing whose slice comes up short while the read
    was full is left out (its caller reads it alone). ``after`` gives an entity's clean base (a lock group's
    last change, ``groups.changed_at``): only runs graded after it are read, as ``graded_window`` does.
    ``landed`` counts every grade of an entity in the batch (its healthy ones too, which take window slots
    of the older landings): each entity's read reaches that far back.
    """
    after, landed = after or {}, landed or {}
    from django.db import connection

    if not landings:
        return {}
    by_entity: dict[int, list[Grade]] = {}
    for grade in landings:
        by_entity.setdefault(grade.entity_id, []).append(grade)
    sizes = {pk: int(trigger_terms((entities[pk].terms or {}).get("loop") or {})["windowRuns"]) for pk in by_entity}
    wanted = {pk: sizes[pk] + max(len(grades), landed.get(pk, 0)) for pk, grades in by_entity.items()}
    if connection.vendor == "postgresql":
        roles = {pk: entities[pk].kind == Entity.Kind.ROLE for pk in by_entity}
        read = _lateral_windows(by_entity, wanted, now=now, after=after, roles=roles)
    else:
        base = observed(Grade.objects.filter(status=Grade.Status.GRADED, execution__loop_launched=False), now=now)
        read = [
            grade
            for pk, grades in by_entity.items()
            for grade in single_version(base.filter(graded_at__gt=after[pk]) if after.get(pk) else base, entities[pk])
            .filter(entity_id=pk, graded_at__lte=max(g.graded_at for g in grades))
            .select_related("execution")
            .only(*WINDOW_FIELDS)
            .order_by("-graded_at", "-execution_id")[: wanted[pk]]
        ]  # SQLite: one cheap indexed read per entity
    rows: dict[int, list[Grade]] = {}
    for grade in read:
        grade.entity = entities[grade.entity_id]
        rows.setdefault(grade.entity_id, []).append(grade)
    answers: dict[Any, list[Grade]] = {}
    for pk, grades in by_entity.items():
        keyed = sorted(((g.graded_at, str(g.execution_id)), g) for g in rows.get(pk, []))  # oldest first
        keys = [key for key, _ in keyed]
        read = [g for _, g in reversed(keyed)]  # newest first
        for landing in grades:
            # The runs at or before the landing are the newest-first list's tail from here (a bisection, not a
            # pass over the read per landing).
            start = len(read) - bisect_right(keys, (landing.graded_at, str(landing.execution_id)))
            window = read[start : start + sizes[pk]]
            if len(window) == sizes[pk] or len(read) < wanted[pk]:
                answers[landing.pk] = window
    return answers


#: The columns a window's grade is read with, in ``LATERAL_WINDOWS``'s order.
WINDOW_COLUMNS = ("execution_id", *OUTCOME_FIELDS)
#: The JSON columns of ``WINDOW_COLUMNS`` (a raw read may hand them back as text).
JSON_COLUMNS = frozenset({"metrics", "judge", "plan_terms"})

#: Each entity's newest graded runs through a mark, one index scan per entity (the same rules as graded_window).
LATERAL_WINDOWS = f"""
SELECT {", ".join(f"g.{name}" for name in WINDOW_COLUMNS)}
FROM unnest(%s::bigint[], %s::timestamptz[], %s::int[], %s::timestamptz[], %s::boolean[])
     AS t(entity_id, through, size, after, role)
CROSS JOIN LATERAL (
    SELECT {", ".join(f"gg.{name}" for name in WINDOW_COLUMNS)}
    FROM grading_grade gg JOIN grading_execution e ON e.id = gg.execution_id
    WHERE gg.entity_id = t.entity_id AND gg.status = %s AND gg.graded_at <= t.through AND NOT e.loop_launched
      AND (t.after IS NULL OR gg.graded_at > t.after)
      AND (e.awaiting_rating_until IS NULL OR e.awaiting_rating_until <= %s
           OR EXISTS (SELECT 1 FROM grading_rating r WHERE r.execution_id = gg.execution_id))
      AND NOT (t.role AND EXISTS (SELECT 1 FROM grading_episode ep
                                  WHERE ep.execution_id = gg.execution_id AND ep.mixed_versions))
    ORDER BY gg.graded_at DESC, gg.execution_id DESC
    LIMIT t.size
) g
"""


def _lateral_windows(
    by_entity: dict[int, list[Grade]],
    wanted: dict[int, int],
    *,
    now: datetime,
    after: dict[int, datetime | None],
    roles: dict[int, bool] | None = None,
) -> list[Grade]:
    """Postgres: every entity's newest graded runs in one statement (a LATERAL join, one index scan each); a chat
    role's (``roles``) without its episodes that ran under two role versions."""
    ids = list(by_entity)
    from django.db import connection

    params = [
        ids,
        [max(g.graded_at for g in by_entity[pk]) for pk in ids],
        [wanted[pk] for pk in ids],
        [after.get(pk) for pk in ids],
        [bool((roles or {}).get(pk)) for pk in ids],
        Grade.Status.GRADED,
        now,
    ]
    with connection.cursor() as cursor:
        cursor.execute(LATERAL_WINDOWS, params)
        rows = cursor.fetchall()
    return window_grades(rows)


def window_grades(rows: list[tuple[Any, ...]], *, share_text: bool = False) -> list[Grade]:
    """Grades of ``WINDOW_COLUMNS`` rows (JSON as text, a run id as the database gives it), built without the
    model's per-field construction (``Grade.read_only``): a batch's windows, or a page's, hold hundreds of rows.
    The other columns are read on first use, as deferred fields. With ``share_text`` each distinct metrics or
    judge text is decoded once (most runs share their judge) and grades with the same text share one value: only
    for a reader that never hands them on (the fleet's ``is_bad``); a window a brain's code may be given decodes
    its own."""
    decoded: dict[str, Any] = {}

    def value(raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        if not share_text:
            return json.loads(raw)
        if raw not in decoded:
            decoded[raw] = json.loads(raw)
        return decoded[raw]

    grades = []
    for row in rows:
        fields = dict(zip(WINDOW_COLUMNS, row, strict=True))
        run_id = fields["execution_id"]
        fields["execution_id"] = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
        for name in JSON_COLUMNS:
            fields[name] = value(fields[name])
        grades.append(Grade.read_only(fields))
    return grades


def repair_window(
    entity: Entity,
    terms: dict[str, Any],
    *,
    anchor: Grade | None,
    now: datetime,
    runs: list[Grade] | None = None,
    changed: Any = UNREAD_CHANGE,
) -> dict[str, Any]:
    """The repair preset's window: the last windowRuns graded runs, ready (the count is the whole question).

    ``runs`` is the window when a batch already read it (``windows_for``). For a member of a lock group only
    runs graded after the group last changed count (the clean base: a sibling's change, or its revert, is never
    answered by a repair of this entity for failures produced before it); ``changed`` is that instant when the
    batch read its window from it (else the batch's runs of a group member are read again here).
    """
    size = int(trigger_terms(terms.get("loop") or {})["windowRuns"])
    batch_base = changed is not UNREAD_CHANGE
    if not batch_base:
        changed = groups.changed_at(entity)
    if runs is None or (changed is not None and not batch_base):
        runs = graded_window(entity, through=anchor, size=size, now=now, after=changed)
    window = {
        "from": None,
        "to": now.isoformat(),
        "runIds": [str(g.execution_id) for g in reversed(runs)],
        "reason": f"the last {size} graded runs"
        + (f" since lock group {', '.join(groups_of(entity))} last changed ({changed.isoformat()})" if changed else ""),
        "ready": True,
        "progress": {"have": len(runs), "need": size, "unit": "graded runs"},
        "metrics": [],
    }
    window["_grades"] = runs  # newest first; dropped before storing
    return window


def repair_should_open(window: list[dict[str, Any]], trigger: dict[str, Any]) -> dict[str, Any]:
    """k of n with the newest run itself bad: ``window`` is the runs' outcomes, newest first."""
    if not window:
        return {"open": False, "reason": "no graded runs"}
    bad = sum(1 for run in window if run["bad"])
    need = int(trigger["minFailures"])
    if not window[0]["bad"]:
        return {"open": False, "reason": "the run that landed is not bad"}
    if bad < need:
        return {"open": False, "reason": f"{bad} of the last {len(window)} graded runs bad (needs {need})"}
    return {"open": True, "reason": f"{bad} of the last {len(window)} graded runs bad"}


def count(cycle: Cycle, seen: Observed) -> Answer:
    """The engine's count by the trigger's rule: minFailures bad regress on the spot; a full window validates."""
    terms = cycle.entity.terms or {}
    bad = 0
    for index, grade in enumerate(seen.window):
        bad += int(is_bad(grade, terms))
        if bad >= seen.min_failures:
            runs = [str(g.execution_id) for g in seen.window[: index + 1]]
            tally = f"{len(runs)} of {seen.need} {UNIT}, {bad} bad"
            reason = (
                f"{bad} bad of {len(runs)} {UNIT} since the merge (minFailures {seen.min_failures}): "
                "the entity would have triggered again"
            )
            answer = record("regressed", reason, tally, comparator=COUNT, n=len(runs), bad=bad)
            _with_power(answer, cycle)
            return Answer("regressed", answer, reason, runs, bad)
    runs = [str(g.execution_id) for g in seen.window]
    if not seen.full:
        return Answer(None, run_ids=runs, bad=bad)
    tally = f"{seen.have} of {seen.need} {UNIT}, {bad} bad"
    reason = f"{tally} since the merge (regresses at {seen.min_failures}): the entity would not have triggered again"
    answer = record("validated", reason, tally, comparator=COUNT, n=seen.have, bad=bad)
    _with_power(answer, cycle)
    return Answer("validated", answer, reason, runs, bad)


def _with_power(answer: dict[str, Any], cycle: Cycle) -> None:
    """The watch's power, fixed when it opened, kept on its verdict record (issue 31)."""
    stated = (cycle.watch_window or {}).get("power")
    if stated:
        answer["power"] = stated
