"""When a landing grade opens a cycle: window() then should_open(), three tiers (seed 003, "trigger").

The repair preset's window is the entity's last ``trigger.windowRuns`` graded
runs through the grade that landed (ungraded runs take no slot, the loop's
own replays are never in it, runs still waiting on a rating card are left
out); its rule opens when the landed run is itself bad and at least
``trigger.minFailures`` of the window are. The entity's loop module may
replace either function (``window(ctx)``, ``should_open(window, trigger)``);
a project-wide replacement is a setting naming a callable
(``LOOP_SHOULD_OPEN``). ``loop.enabled`` is settled before either is asked.

The decision for one landing grade costs a fixed number of queries whatever
the entity's history: a healthy grade none beyond the batch read, a bad one
the window read plus what opening needs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from evolution import cycles
from evolution.models import Cycle
from grading.cards import observed
from grading.metrics import is_bad
from grading.models import Entity, Grade

log = logging.getLogger(__name__)


class RuleError(Exception):
    """A window() or should_open() answered in a shape the engine cannot read; the message names the function."""


def trigger_terms(loop: dict[str, Any]) -> dict[str, Any]:
    """The trigger block as the preset's count reads it, with the loop's threshold beside it."""
    trigger = dict(loop.get("trigger") or {})
    trigger.setdefault("windowRuns", 5)
    trigger.setdefault("minFailures", 2)
    trigger["threshold"] = loop.get("threshold")
    return trigger


#: What the rule reads of a window's grades (``outcomes``, ``is_bad``): the rest of the rows is left unread.
WINDOW_FIELDS = (
    "entity_id",
    "status",
    "graded_at",
    "score",
    "passed",
    "failure_category",
    "metrics",
    "judge",
    "execution__loop_launched",
)


def graded_window(entity: Entity, *, through: Grade | None, size: int, now: datetime) -> list[Grade]:
    """The entity's last ``size`` graded runs through ``through`` (or now), newest first."""
    grades = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)
    if through is not None and through.graded_at is not None:
        grades = grades.filter(graded_at__lte=through.graded_at)
    grades = observed(grades, now=now)
    runs = list(grades.select_related("execution").only(*WINDOW_FIELDS).order_by("-graded_at", "-execution_id")[:size])
    for run in runs:
        run.entity = entity  # is_bad reads the terms through grade.entity: one row read per grade otherwise
    return runs


def windows_for(landings: list[Grade], entities: dict[int, Entity], *, now: datetime) -> dict[Any, list[Grade]]:
    """The repair window of each landing (newest first), read for the whole batch at once.

    Per entity, its last windowRuns + (its landings in the batch) graded runs through its newest landing are
    read (one UNION ALL statement on Postgres, one indexed read per entity on SQLite); each landing's window
    is then the first windowRuns of them at or before it. A landing whose slice comes up short while the read
    was full is left out (its caller reads it alone).
    """
    from django.db import connection

    if not landings:
        return {}
    by_entity: dict[int, list[Grade]] = {}
    for grade in landings:
        by_entity.setdefault(grade.entity_id, []).append(grade)
    sizes = {pk: int(trigger_terms((entities[pk].terms or {}).get("loop") or {})["windowRuns"]) for pk in by_entity}
    wanted = {pk: sizes[pk] + len(grades) for pk, grades in by_entity.items()}
    if connection.vendor == "postgresql":
        read = _lateral_windows(by_entity, wanted, now=now)
    else:
        base = observed(Grade.objects.filter(status=Grade.Status.GRADED, execution__loop_launched=False), now=now)
        read = [
            grade
            for pk, grades in by_entity.items()
            for grade in base.filter(entity_id=pk, graded_at__lte=max(g.graded_at for g in grades))
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
        read = sorted(rows.get(pk, []), key=lambda g: (g.graded_at, str(g.execution_id)), reverse=True)
        for landing in grades:
            mark = (landing.graded_at, str(landing.execution_id))
            window = [g for g in read if (g.graded_at, str(g.execution_id)) <= mark][: sizes[pk]]
            if len(window) == sizes[pk] or len(read) < wanted[pk]:
                answers[landing.pk] = window
    return answers


#: Each entity's newest graded runs through a mark, one index scan per entity (the same rules as graded_window).
LATERAL_WINDOWS = """
SELECT g.execution_id, g.entity_id, g.status, g.graded_at, g.score, g.passed, g.failure_category, g.metrics, g.judge
FROM unnest(%s::bigint[], %s::timestamptz[], %s::int[]) AS t(entity_id, through, size)
CROSS JOIN LATERAL (
    SELECT gg.execution_id, gg.entity_id, gg.status, gg.graded_at, gg.score, gg.passed, gg.failure_category,
           gg.metrics, gg.judge
    FROM grading_grade gg JOIN grading_execution e ON e.id = gg.execution_id
    WHERE gg.entity_id = t.entity_id AND gg.status = %s AND gg.graded_at <= t.through AND NOT e.loop_launched
      AND (e.awaiting_rating_until IS NULL OR e.awaiting_rating_until <= %s
           OR EXISTS (SELECT 1 FROM grading_rating r WHERE r.execution_id = gg.execution_id))
    ORDER BY gg.graded_at DESC, gg.execution_id DESC
    LIMIT t.size
) g
"""


def _lateral_windows(by_entity: dict[int, list[Grade]], wanted: dict[int, int], *, now: datetime) -> list[Grade]:
    """Postgres: every entity's newest graded runs in one statement (a LATERAL join, one index scan each)."""
    ids = list(by_entity)
    params = [
        ids,
        [max(g.graded_at for g in by_entity[pk]) for pk in ids],
        [wanted[pk] for pk in ids],
        Grade.Status.GRADED,
        now,
    ]
    return list(Grade.objects.raw(LATERAL_WINDOWS, params))


def repair_window(
    entity: Entity,
    terms: dict[str, Any],
    *,
    anchor: Grade | None,
    now: datetime,
    runs: list[Grade] | None = None,
) -> dict[str, Any]:
    """The repair preset's window: the last windowRuns graded runs, ready (the count is the whole question).

    ``runs`` is the window when a batch already read it (``windows_for``).
    """
    size = int(trigger_terms(terms.get("loop") or {})["windowRuns"])
    if runs is None:
        runs = graded_window(entity, through=anchor, size=size, now=now)
    window = {
        "from": None,
        "to": now.isoformat(),
        "runIds": [str(g.execution_id) for g in reversed(runs)],
        "reason": f"the last {size} graded runs",
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


def _module_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    """The entity's loop module function ``name`` at its commit, or None (no module, or no such function)."""
    if not entity.loop_module_path or not entity.commit:
        return None
    from grading.methods import brain_checkout
    from singularity.brain.modules import load_at

    loaded = load_at(brain_checkout(None), entity.commit, entity.loop_module_path)
    return getattr(loaded.module, name, None)


def _project_rule() -> Callable[..., Any] | None:
    path = getattr(settings, "LOOP_SHOULD_OPEN", "")
    return import_string(path) if path else None


def ask_should_open(entity: Entity, window: list[dict[str, Any]], trigger: dict[str, Any]) -> dict[str, Any]:
    """Ask the nearest should_open (the entity's module, the project's, the preset's); RuleError on a bad shape."""
    rule = _module_function(entity, "should_open") or _project_rule() or repair_should_open
    if inspect.iscoroutinefunction(rule):
        raise RuleError(f"{entity}: should_open must answer synchronously; it is declared async")
    answer = rule(window=window, trigger=trigger)
    if isinstance(answer, bool) or not isinstance(answer, dict) or not isinstance(answer.get("open"), bool):
        raise RuleError(f"{entity}: should_open must answer {{open, reason}}, not {answer!r}")
    return {"open": answer["open"], "reason": str(answer.get("reason") or "")}


def ask_window(
    entity: Entity,
    terms: dict[str, Any],
    preset: dict[str, Any],
    grades: list[Grade],
    *,
    anchor: Grade | None,
    now: datetime,
) -> tuple[dict[str, Any], list[Grade]]:
    """Ask the entity's own window(ctx) at the trigger; return its answer and the graded runs it names, newest first.

    The answer is recorded (a waiting window, or the end of one; a ready window carrying awaitingPerson is a load
    error) and its run ids are re-filtered by the engine's rules: the entity's own graded runs, never the loop's
    replays; an id that fails is dropped; a window naming one run twice is refused.
    """
    from types import SimpleNamespace

    from evolution import cadence

    function = _module_function(entity, "window")
    shown = {k: v for k, v in preset.items() if not k.startswith("_")}
    ctx = SimpleNamespace(
        targetKind=entity.target_kind,
        targetId=entity.slug,
        phase="trigger",
        now=now,
        anchor={"id": str(anchor.execution_id), "createdAt": anchor.graded_at.isoformat()} if anchor else None,
        since=None,
        groupChangedAt=None,
        terms=terms,
        preset=SimpleNamespace(window=lambda _ctx=None: dict(shown)),
    )
    if inspect.iscoroutinefunction(function):
        raise RuleError(f"{entity}: window must answer synchronously here; it is declared async")
    answer = function(ctx)
    cadence.check_window(entity, answer)
    cadence.record_window(entity, answer, now)
    ids = [str(i) for i in answer.get("runIds") or []]
    if len(ids) != len(set(ids)):
        raise RuleError(f"{entity}: window() named a run twice: a run is one vote")
    kept = {
        str(g.execution_id): g
        for g in Grade.objects.filter(
            entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False, execution_id__in=ids
        ).select_related("execution")
    }
    rejected = [i for i in ids if i not in kept]
    if rejected:
        log.info("loop: %s: window() named %d runs the engine does not count (rejected)", entity, len(rejected))
    survivors = [kept[i] for i in ids if i in kept]
    window = {**answer, "runIds": [str(g.execution_id) for g in survivors]}
    return window, sorted(survivors, key=lambda g: (g.graded_at, str(g.execution_id)), reverse=True)


def outcomes(grades: Iterable[Grade], terms: dict[str, Any]) -> list[dict[str, Any]]:
    """Each grade as the trigger rule reads it: run id, score, passed, bad, metrics (newest first as given)."""
    return [
        {
            "runId": str(g.execution_id),
            "overallScore": g.score,
            "passed": g.passed,
            "bad": is_bad(g, terms),
            "metrics": g.metrics,
            "failureCategory": g.failure_category,
        }
        for g in grades
    ]


def decide(
    entity: Entity, grade: Grade, *, now: datetime, idea_queued: bool = False, runs: list[Grade] | None = None
) -> tuple[dict[str, Any] | None, str]:
    """Ask whether ``grade`` opens a cycle; return (the window to open on, or None, and the reason)."""
    terms = cycles.terms_of(entity)
    loop = terms.get("loop") or {}
    if not entity.loop_enabled or not loop.get("enabled", entity.loop_enabled):
        return None, "the loop is off"
    if (loop.get("preset") or "repair") != "repair":
        return None, f"preset {loop.get('preset')} opens on its cadence, not on a bad run"
    if idea_queued:
        # A queued idea outranks the rule (never the gates): should_open is not asked.
        window = repair_window(entity, terms, anchor=grade, now=now)
        window.pop("_grades")
        return window, "an idea is queued"
    own_rule = entity.loop_module_path and _module_function(entity, "should_open") is not None
    own_window = entity.loop_module_path and _module_function(entity, "window") is not None
    if not own_rule and not own_window and not _project_rule() and not is_bad(grade, terms):
        return None, "the run that landed is not bad"
    window = repair_window(entity, terms, anchor=grade, now=now, runs=runs)
    grades = window.pop("_grades")
    if own_window:
        window, grades = ask_window(entity, terms, window, grades, anchor=grade, now=now)
        if not window.get("ready", True):
            return None, window.get("reason") or "the window is not ready"
    if not grades:
        return None, "the window names no graded run"
    if not own_window and grades[0].execution_id != grade.execution_id:
        return None, "the landed run is not the newest graded run of its window"
    answer = ask_should_open(entity, outcomes(grades, terms), trigger_terms(loop))
    window["reason"] = answer["reason"] or window["reason"]
    return (window if answer["open"] else None), answer["reason"]


def on_landed(grade_ids: list[Any], *, now: datetime | None = None) -> int:
    """Hear grades that just settled: hand watched entities' to the watch, open cycles where the rule says.

    Returns how many cycles opened.
    """
    now = now or timezone.now()
    grades = list(
        Grade.objects.filter(pk__in=grade_ids, status=Grade.Status.GRADED)
        .select_related("execution")
        .order_by("graded_at")
    )
    if not grades:
        return 0
    entity_ids = sorted({g.entity_id for g in grades})
    entities = Entity.objects.in_bulk(entity_ids)
    looped = {pk for pk, e in entities.items() if e.loop_enabled}
    if not looped:
        return 0
    watched = cycles.watching(sorted(looped))
    if watched:
        from evolution import watch

        watch.on_grades([g.pk for g in grades if g.entity_id in watched])
    from evolution.models import Idea

    queued = set(
        Idea.objects.filter(entity_id__in=sorted(looped), status=Idea.Status.QUEUED, approved=True).values_list(
            "entity_id", flat=True
        )
    )
    considered = [
        g for g in grades if g.entity_id in looped and g.entity_id not in watched and not g.execution.loop_launched
    ]
    for grade in considered:
        grade.entity = entities[grade.entity_id]
    # The windows of the bad landings the preset's count decides, and the claims' holders: one read each.
    counted = [
        g for g in considered if g.entity_id not in queued and _preset_counts(g.entity) and is_bad(g, g.entity.terms)
    ]
    runs = windows_for(counted, entities, now=now)
    holders = (
        {c.claim: c for c in Cycle.objects.filter(claim__in=sorted({g.entity_id for g in counted}))} if counted else {}
    )
    opened = 0
    for grade in considered:
        entity = entities[grade.entity_id]
        try:
            window, reason = decide(entity, grade, now=now, idea_queued=entity.pk in queued, runs=runs.get(grade.pk))
        except Exception as exc:  # noqa: BLE001 - the brain's rule failed: the grade stands, the next one asks again
            log.warning("loop: %s: the trigger withheld run %s: %s", entity, grade.execution_id, exc)
            continue
        if window is None:
            log.debug("loop: %s: run %s opens nothing: %s", entity, grade.execution_id, reason)
            continue
        known: dict[str, Any] = {}
        if grade.pk in runs and entity.pk not in queued:
            known = {"holder": holders.get(entity.pk), "idea_checked": True}
        result = cycles.open_cycle(
            entity, origin=Cycle.Origin.GRADE, anchor=grade.execution, window=window, now=now, known=known
        )
        if result.opened:
            holders[entity.pk] = result.cycle
        opened += int(result.opened)
    return opened


def _preset_counts(entity: Entity) -> bool:
    """Whether the repair preset's own count decides this entity's landings (no rule or window of its own)."""
    loop = (entity.terms or {}).get("loop") or {}
    if (loop.get("preset") or "repair") != "repair" or _project_rule():
        return False
    if not entity.loop_module_path:
        return True
    return _module_function(entity, "should_open") is None and _module_function(entity, "window") is None


def request_window(entity: Entity, *, now: datetime) -> dict[str, Any]:
    """The window an "Analyze now" or a scheduled look reads: the last windowRuns graded runs through now."""
    terms = cycles.terms_of(entity)
    window = repair_window(entity, terms, anchor=None, now=now)
    window.pop("_grades")
    return window


def analyze_now(entity: Entity, *, user: Any | None = None, now: datetime | None = None) -> cycles.Opened:
    """Open a cycle on request (the dashboard's Analyze now, the API, the command): exempt from the ceilings."""
    now = now or timezone.now()
    return cycles.open_cycle(
        entity, origin=Cycle.Origin.REQUEST, window=request_window(entity, now=now), requested_by=user, now=now
    )
