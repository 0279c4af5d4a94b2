"""What opens a cycle: a landing grade, a look on the cadence, "Analyze now" (seed 003, "trigger").

A landing grade asks the preset's (or the entity's) ``window()`` then
``should_open()`` — three tiers, resolved in ``evolution.presets.resolve``;
``loop.enabled`` is settled before either is asked. The hourly sweep
delivers queued ideas (``evolution.loop.intake``) and looks at every entity
whose ``trigger.every`` came round: the window a look reads is the preset's
(under repair the last windowRuns graded runs through the moment of the
look), then the trigger rule over the runs that window names, newest first.
A look that opens nothing costs nothing: no cycle row, no proposer — its only
trace is the reason in the log. Every opening goes through the machine.

The decision for one landing grade costs a fixed number of queries whatever
the entity's history: a healthy grade none beyond the batch read, a bad one
the window read plus what opening needs.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

from django.utils import timezone

from evolution.core import cycles, periods
from evolution.core.cycles import UNREAD
from evolution.loop import freeze, intake, machine, opening
from evolution.models import Cycle
from evolution.presets import evolve
from evolution.presets.base import RuleError, outcomes, trigger_terms
from evolution.presets.ready import ready_at as ready_many
from evolution.presets.repair import UNREAD_CHANGE, WINDOW_COLUMNS, repair_window, windows_for
from evolution.presets.resolve import (
    ask_should_open,
    ask_window,
    module_function,
    pinned_modules,
    preset_counts,
    preset_of,
    project_rule,
    request_window,
)
from evolution.steering import groups
from evolution.steering.cadence import drop_stale, due, record_window
from grading import observed as O
from grading.metrics import is_bad
from grading.models import Entity, Execution, Grade, read_only
from grading.people import people_values

log = logging.getLogger(__name__)

__all__ = ["RuleError", "analyze_now", "decide", "look", "on_landed", "sweep"]


def decide(
    entity: Entity,
    grade: Grade,
    *,
    now: datetime,
    idea_queued: bool = False,
    runs: list[Grade] | None = None,
    ready: Any = UNREAD,
    changed: Any = UNREAD_CHANGE,
    past: Any = None,
    bad: bool | None = None,
    memo: dict[Any, dict[str, Any]] | None = None,
    people: Any = None,
) -> tuple[dict[str, Any] | None, str]:
    """Ask whether ``grade`` opens a cycle; return (the window to open on, or None, and the reason).

    ``runs`` and ``changed`` are the window a batch read and the lock group's clean base it read it from.
    ``past`` is a replayed history (``evolution.loop.backtest``): the entity's own window() reads it, not the tables.
    ``bad`` is whether the landed grade is bad when the batch asked already; ``memo`` the batch's outcomes by run
    id, shared between the windows the preset's own rule reads (``outcomes``).
    """
    terms = cycles.terms_of(entity)
    loop = terms.get("loop") or {}
    if not entity.loop_enabled or not loop.get("enabled", entity.loop_enabled):
        return None, "the loop is off"
    if past is None and (grade.plan_terms or {}).get("enabled") is False:
        # A workflow run's plan froze loop.enabled when it started (R5.19): switched on since, not for this run.
        return None, "the loop was off when this run was planned"
    if (loop.get("preset") or "repair") == "evolve":
        return decide_evolve(entity, grade, terms, now=now, idea_queued=idea_queued, ready=ready, past=past)
    if idea_queued:
        # A queued idea outranks the rule (never the gates): should_open is not asked.
        window = repair_window(entity, terms, anchor=grade, now=now)
        window.pop("_grades")
        return window, "an idea is queued"
    own_rule = entity.loop_module_path and module_function(entity, "should_open") is not None
    own_window = module_function(entity, "window") is not None  # the entity's, else the project's LOOP_WINDOW
    preset_rule = not own_rule and not own_window and not project_rule()
    if preset_rule and not (is_bad(grade, terms) if bad is None else bad):
        return None, "the run that landed is not bad"
    window = repair_window(entity, terms, anchor=grade, now=now, runs=runs, changed=changed)
    grades = window.pop("_grades")
    if own_window:
        # ctx.since is the previous window's mark whoever asks (R6.19): a landing's as a look's.
        since = past.mark if past is not None else evolve.mark(entity)
        window, grades = ask_window(entity, terms, window, grades, anchor=grade, now=now, since=since, past=past)
        if not window.get("ready", True):
            return None, window.get("reason") or "the window is not ready"
        if grades and grades[0].execution_id != grade.execution_id:
            # The window left the landed run out: the newest run it kept anchors the cycle (R6.23).
            window["_anchor"] = grades[0].execution
    if not grades:
        return None, "the window names no graded run"
    if not own_window and grades[0].execution_id != grade.execution_id:
        return None, "the landed run is not the newest graded run of its window"
    # The batch's outcomes are shared only between windows sliced from the batch's one read (``runs``).
    from_batch = grades is runs  # the batch's own read: its ratings were read with it (``people``)
    shown = outcomes(
        grades, terms, memo=memo if preset_rule and from_batch else None, people=people if from_batch else None
    )
    answer = ask_should_open(entity, shown, trigger_terms(loop))
    window["reason"] = answer["reason"] or window["reason"]
    return (window if answer["open"] else None), answer["reason"]


def decide_evolve(
    entity: Entity,
    grade: Grade,
    terms: dict[str, Any],
    *,
    now: datetime,
    idea_queued: bool,
    ready: Any = UNREAD,
    past: Any = None,
) -> tuple[dict[str, Any] | None, str]:
    """The evolve trigger at a landing: the window is every grade since the previous cycle's mark; the preset
    opens when it holds trigger.windowRuns (``ready``: when the batch read it became ready, or UNREAD); the
    entity's own window() and should_open() replace the preset's. ``past`` (a backtest) holds the mark and the
    grades since it."""
    own_rule = bool(entity.loop_module_path) and module_function(entity, "should_open") is not None
    own_window = module_function(entity, "window") is not None  # the entity's, else the project's LOOP_WINDOW
    if not (idea_queued or own_rule or own_window or project_rule()):
        if ready is UNREAD:
            ready = evolve.ready_at({entity.pk: entity}, now=now)[entity.pk]
        if ready is None or grade.graded_at is None or grade.graded_at < ready:
            size = evolve.cadence(terms)
            return None, f"fewer than {size} graded runs since the previous cycle's window (the cadence is {size})"
    since = past.mark if past is not None else evolve.mark(entity)
    held = past.since_mark() if past is not None else None
    window = evolve.evolve_window(entity, terms, now=now, since=since, runs=held)
    grades = window.pop("_grades")
    if idea_queued:
        return window, "an idea is queued"
    if own_window:
        window, grades = ask_window(entity, terms, window, grades, anchor=grade, now=now, since=since, past=past)
    if not window.get("ready", True):
        return None, window.get("reason") or "the window is not ready"
    owed = periods.problem(terms, window)  # a declared period metric nobody measured: a load error (R14.15)
    if owed:
        return None, owed
    if not grades:
        return None, "the window names no graded run"
    every = ((terms.get("loop") or {}).get("trigger") or {}).get("every")
    trigger = {"windowRuns": evolve.cadence(terms), "every": every}
    answer = ask_should_open(entity, outcomes(grades, terms), trigger)
    window["reason"] = answer["reason"] or window["reason"]
    return (window if answer["open"] else None), answer["reason"]


def on_landed(grade_ids: list[Any], *, now: datetime | None = None) -> int:
    """Hear grades that just settled: hand watched entities' to the watch, open cycles where the rule says.

    Returns how many cycles opened. Grades of entities out of the loop are left out of the first read (one
    query, nothing else loaded). The bad landings of a batch share one read of their windows, of the claims'
    holders and of the gates (holds, lock groups, ceilings: ``opening.refusals_many``); an entity's refused
    landings fold into its refusal row once per batch, every entity's in one statement
    (``opening.record_refusals_many``). The cycles a batch opens freeze one base commit (the
    remote's default branch is read once a batch, ``freeze.one_base_per_batch``); a loop module's functions are
    read once per batch (``resolve.pinned_modules``).
    """
    # A loop module's functions are read once per batch (at each entity's commit), not several times a landing.
    with freeze.one_base_per_batch(), pinned_modules():
        return _on_landed(grade_ids, now=now or timezone.now())


#: What the trigger and an opening never read of a landed grade's entity (its terms are what they read): the
#: definition's text, its own frontmatter and the provenance of its terms (read on first use if ever asked).
UNREAD_ENTITY = ("body", "frontmatter", "provenance")

#: What the trigger reads of the cycle holding an entity's claim (its refusal's words, a landing's own cycle): the
#: rest of the row (its window, frozen set, terms and watch, tens of kilobytes) is read on first use if ever asked.
HOLDER = ("id", "entity_id", "key", "claim", "phase", "status")

#: What the trigger reads of a landed grade and of its run (the rest is read on first use, as a deferred field).
LANDED_GRADE = WINDOW_COLUMNS
LANDED_RUN = ("entity_id", "status", "loop_launched", "started_at", "completed_at")


#: ``LANDED_GRADE`` and ``LANDED_RUN`` of the graded ones among some grades (``{ids}``: ``cycles.among``) whose entity
#: is in the loop, oldest graded first.
LANDED = """
SELECT {columns}
FROM grading_grade g JOIN grading_entity n ON n.id = g.entity_id JOIN grading_execution r ON r.id = g.execution_id
WHERE g.execution_id {ids} AND g.status = %s AND n.loop_enabled
ORDER BY g.graded_at
"""


def landed_grades(grade_ids: list[Any]) -> list[Grade]:
    """The graded ones of ``grade_ids`` whose entity is in the loop, oldest graded first, each with its run: the
    columns the trigger reads (``LANDED_GRADE``, ``LANDED_RUN``) in one written-out statement, each value through
    its field's own conversion, built without the models' per-field construction (a batch is a hundred grades
    and their runs, read on every landing)."""
    from django.db import connection

    if not grade_ids:
        return []
    key = Grade._meta.pk
    ids = [key.get_db_prep_value(key.to_python(pk), connection) for pk in grade_ids]
    fields = [(f"g.{name}", Grade._meta.get_field(name)) for name in LANDED_GRADE]
    fields += [(f"r.{name}", Execution._meta.get_field(name)) for name in LANDED_RUN]
    converters = []  # (index, column, its conversions) of the columns whose values the database does not give as is
    for index, (_name, field) in enumerate(fields):
        column = field.get_col(field.model._meta.db_table)
        convert = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if convert:
            converters.append((index, column, convert))
    among_ids, params = cycles.among(ids)
    statement = LANDED.format(columns=", ".join(column for column, _ in fields), ids=among_ids)
    with connection.cursor() as cursor:
        cursor.execute(statement, [*params, Grade.Status.GRADED.value])
        rows = cursor.fetchall()
    grades = []
    width = len(LANDED_GRADE)
    for row in rows:
        values = list(row)
        for index, column, convert in converters:
            for step in convert:
                values[index] = step(values[index], column, connection)
        run = read_only(Execution, {"id": values[0], **dict(zip(LANDED_RUN, values[width:], strict=True))})
        grades.append(Grade.read_only(dict(zip(LANDED_GRADE, values[:width], strict=True)), execution=run))
    return grades


#: Of each entity (``{ids}``: the entities, ``cycles.among``): whether a cycle of it watches a shipped change, whether an
#: approved idea of it is queued, and the cycle holding its claim.
LOOP_FACTS = """
SELECT e.id,
    EXISTS (SELECT 1 FROM evolution_cycle c WHERE c.entity_id = e.id AND c.phase = %s),
    EXISTS (SELECT 1 FROM evolution_idea i WHERE i.entity_id = e.id AND i.status = %s AND i.approved),
    (SELECT c.id FROM evolution_cycle c WHERE c.claim = e.id)
FROM grading_entity e WHERE e.id {ids}
"""


def loop_facts(entity_ids: list[int]) -> tuple[set[int], set[int], dict[int, int]]:
    """What a batch asks of its entities' cycles and ideas, in one statement: (the entities whose cycle is watching
    a shipped change, those with an approved idea queued, {entity: the id of the cycle holding its claim})."""
    from django.db import connection

    from evolution.models import Idea

    if not entity_ids:
        return set(), set(), {}
    with connection.cursor() as cursor:
        among_ids, params = cycles.among(entity_ids)
        cursor.execute(
            LOOP_FACTS.format(ids=among_ids), [Cycle.Phase.WATCHING.value, Idea.Status.QUEUED.value, *params]
        )
        rows = cursor.fetchall()
    watched = {pk for pk, watching, _queued, _claim in rows if watching}
    queued = {pk for pk, _watching, queued, _claim in rows if queued}
    return watched, queued, {pk: claim for pk, _watching, _queued, claim in rows if claim is not None}


def _on_landed(grade_ids: list[Any], *, now: datetime) -> int:
    grades = landed_grades(grade_ids)
    if not grades:
        return 0  # nothing of an entity in the loop: nothing else is read
    entities = Entity.objects.defer(*UNREAD_ENTITY).in_bulk(sorted({g.entity_id for g in grades}))
    looped = {pk for pk, e in entities.items() if e.loop_enabled}
    if not looped:
        return 0
    watched, queued, claimed = loop_facts(sorted(looped))
    if watched:
        machine.on_grades([g.pk for g in grades if g.entity_id in watched])
    considered = [
        g for g in grades if g.entity_id in looped and g.entity_id not in watched and not g.execution.loop_launched
    ]
    for grade in considered:
        grade.entity = entities[grade.entity_id]
    # The windows of the bad landings the preset's count decides, and the claims' holders: one read each.
    # A landing the repair preset counts is decided on its window when it is bad; one whose entity (or the
    # project) answers should_open or window() itself is decided on its window whatever it came to.
    bad: dict[Any, bool] = {}  # whether a landing the preset counts is bad, asked once
    for g in considered:
        if g.entity_id not in queued and preset_of(g.entity) == "repair" and preset_counts(g.entity):
            bad[g.pk] = is_bad(g, g.entity.terms)
    counted = [
        g for g in considered if g.entity_id not in queued and preset_of(g.entity) == "repair" and bad.get(g.pk, True)
    ]
    # A lock group's clean base, read once per entity of the batch (not per landing).
    bases = {pk: groups.changed_at(entities[pk]) for pk in sorted({g.entity_id for g in counted})}
    landed = Counter(g.entity_id for g in considered)
    runs = windows_for(counted, entities, now=now, after=bases, landed=landed)
    # People's ratings of every run of the batch's windows, in one read (only entities that have a rated metric):
    # each window's outcomes read them there (``grading.observed``) rather than once a landing.
    rated = {pk for pk in {g.entity_id for g in counted} if O.rated_ids(entities[pk].terms or {})}  # once an entity
    rated_runs = [g.execution_id for window in runs.values() for g in window if g.entity_id in rated]
    people = people_values(rated_runs) if rated_runs else {}
    # Evolve entities the preset's cadence decides: when each window became ready (one read for the batch).
    cadenced = {
        g.entity_id: g.entity
        for g in considered
        if g.entity_id not in queued and preset_of(g.entity) == "evolve" and not _own_functions(g.entity)
    }
    ready = ready_many(cadenced, now=now) if cadenced else {}
    counted += [g for g in considered if g.entity_id in ready and _is_ready(g, ready[g.entity_id])]
    # The claims' holders of the counted entities (the columns the trigger asks of them), read only when one is held.
    held = sorted({claimed[g.entity_id] for g in counted if g.entity_id in claimed})
    holders: dict[int, Cycle | None] = (
        {c.claim: c for c in Cycle.objects.filter(pk__in=held).only(*HOLDER) if c.claim is not None} if held else {}
    )
    gates: dict[int, str | None] | None = None
    refused: dict[int, list[tuple[str, Any, int]]] = {}
    memo: dict[int, dict[Any, dict[str, Any]]] = {}  # each entity's window outcomes by run id, for the preset's rule
    opened = 0
    for grade in considered:
        entity = entities[grade.entity_id]
        try:
            if entity.pk in ready and _is_ready(grade, ready[entity.pk]) and holders.get(entity.pk) is not None:
                # A live cycle holds the entity: the opening refuses (folded) before it would read the window.
                machine.open_cycle(
                    entity,
                    origin=Cycle.Origin.GRADE,
                    anchor=grade.execution,
                    now=now,
                    known={"holder": holders.get(entity.pk), "idea_checked": True},
                )
                continue
            window, reason = decide(
                entity,
                grade,
                now=now,
                idea_queued=entity.pk in queued,
                runs=runs.get(grade.pk),
                ready=ready.get(entity.pk, UNREAD),
                changed=bases[entity.pk] if grade.pk in runs else UNREAD_CHANGE,
                bad=bad.get(grade.pk),
                memo=memo.setdefault(entity.pk, {}),
                people=people,
            )
        except Exception as exc:  # noqa: BLE001 - the brain's rule failed: the grade stands, the next one asks again
            log.warning("loop: %s: the trigger withheld run %s: %s", entity, grade.execution_id, exc)
            continue
        if window is None:
            log.debug("loop: %s: run %s opens nothing: %s", entity, grade.execution_id, reason)
            continue
        anchor = window.pop("_anchor", None) or grade.execution  # the newest run the window kept (R6.23)
        known: dict[str, Any] = {}
        if grade.pk in runs and entity.pk not in queued:
            holder = holders.get(entity.pk)
            if holder is not None and holder.key == opening.cycle_key(entity, Cycle.Origin.GRADE, anchor, now):
                continue  # a grade delivered twice meets its own cycle: nothing to refuse
            if gates is None:  # the batch's gates, read once, when the first bad landing passes the count
                wanted = list({g.entity_id: g.entity for g in counted}.values())
                gates = opening.refusals_many(wanted, origin=Cycle.Origin.GRADE, now=now, holders=holders)
            why = gates.get(entity.pk)
            if why:
                log.info("loop: %s: no cycle (%s): %s", entity, Cycle.Origin.GRADE, why)
                _count_refusal(refused.setdefault(entity.pk, []), why, grade.execution)
                continue
            known = {"holder": holder, "idea_checked": True, "gates_checked": True}
        elif entity.pk in ready and entity.pk not in queued:
            known = {"holder": holders.get(entity.pk), "idea_checked": True}
        result = machine.open_cycle(
            entity, origin=Cycle.Origin.GRADE, anchor=anchor, window=window, now=now, known=known
        )
        if result.opened:
            holders[entity.pk] = result.cycle
            if gates is not None:
                gates[entity.pk] = cycles.live_refusal(entity, holder=result.cycle)
        opened += int(result.opened)
    if refused:  # every entity's refusals of the batch in two statements (a fold, an insert), not one or two each
        opening.record_refusals_many(
            {entities[pk]: batch for pk, batch in refused.items()}, origin=Cycle.Origin.GRADE, now=now
        )
    return opened


def _count_refusal(found: list[tuple[str, Any, int]], why: str, anchor: Any) -> None:
    """Add one refusal to an entity's batch: consecutive ones of one kind are one (the last words, the first run)."""
    if found and opening.kind_of(found[-1][0]) == opening.kind_of(why):
        _, first, times = found[-1]
        found[-1] = (why, first, times + 1)
    else:
        found.append((why, anchor, 1))


def _own_functions(entity: Entity) -> bool:
    """Whether the entity's loop module (or the project) answers window() or should_open() itself."""
    if project_rule() or module_function(entity, "window") is not None:  # the entity's window, or LOOP_WINDOW
        return True
    if not entity.loop_module_path:
        return False
    return module_function(entity, "should_open") is not None


def _is_ready(grade: Grade, ready: datetime | None) -> bool:
    return ready is not None and grade.graded_at is not None and grade.graded_at >= ready


def sample(entity: Entity, *, now: datetime) -> dict[str, Any]:
    """The window a look with no grade behind it reads: the entity's own window() over the preset's, when it
    declares one (RuleError or the brain's own exception when that fails), else the preset's."""
    window = request_window(entity, now=now)
    if module_function(entity, "window") is None:
        return window
    terms = cycles.terms_of(entity)
    since = evolve.mark(entity)
    answered, _grades = ask_window(entity, terms, window, [], anchor=None, now=now, since=since)
    return answered


def analyze_now(entity: Entity, *, user: Any | None = None, now: datetime | None = None) -> cycles.Opened:
    """Open a cycle on request (the dashboard's Analyze now, the API, the command): exempt from the ceilings."""
    now = now or timezone.now()
    try:
        window = sample(entity, now=now)
    except Exception as exc:  # noqa: BLE001 - the brain's window() failed: a person asked, so the preset's answers
        log.warning("loop: %s: window() failed for Analyze now, the preset's window is read: %s", entity, exc)
        window = request_window(entity, now=now)
    return machine.open_cycle(entity, origin=Cycle.Origin.REQUEST, window=window, requested_by=user, now=now)


# --- The cadence ------------------------------------------------------------


def rule_answer(entity: Entity, window: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """Ask the trigger rule about ``window`` (no anchor): {open, reason}; trigger.RuleError on a bad answer.

    The rule reads the runs the window names as the engine re-reads them —
    the entity's own graded runs, never a loop replay — newest first.
    """
    terms = cycles.terms_of(entity)
    ids = [str(run_id) for run_id in window.get("runIds") or []]
    grades = list(
        Grade.objects.filter(
            entity=entity, status=Grade.Status.GRADED, execution_id__in=ids, execution__loop_launched=False
        ).order_by("-graded_at", "-execution_id")
    )
    for grade in grades:
        grade.entity = entity
    loop = terms.get("loop") or {}
    return ask_should_open(entity, outcomes(grades, terms), trigger_terms(loop))


def look(entity: Entity, *, now: datetime | None = None) -> bool:
    """One scheduled look at ``entity``: return whether it opened a cycle (origin cadence).

    loop.enabled is settled before the window is sampled; a window() or a
    rule that fails withholds the look (logged; the record stays as it was).
    A look that opens nothing — not ready, the rule says no, or a refusal —
    writes no cycle row: its reason goes to the log only.
    """
    now = now or timezone.now()
    loop = cycles.loop_terms(entity)
    if not entity.loop_enabled or loop.get("enabled") is False:
        log.info("loop: %s: the scheduled look opens nothing: the loop is off", entity)
        return False
    try:
        window = sample(entity, now=now)
        record_window(entity, window, now)
        if window.get("ready") is False:
            reason = f"the window is not ready ({window.get('reason') or 'no reason given'})"
        else:
            answer = rule_answer(entity, window, now=now)
            reason = "" if answer["open"] else (answer["reason"] or "the trigger rule says no")
    except Exception as exc:  # noqa: BLE001 - the brain's window() or rule failed: the look is withheld, logged
        log.warning("loop: %s: the scheduled look was withheld: %s", entity, exc)
        return False
    if reason:
        log.info("loop: %s: the scheduled look opens nothing: %s", entity, reason)
        return False
    refused = opening.refusal(entity, origin=Cycle.Origin.CADENCE, now=now)
    if refused:
        log.info("loop: %s: the scheduled look opens nothing: refused: %s", entity, refused)
        return False
    result = machine.open_cycle(entity, origin=Cycle.Origin.CADENCE, window=window, now=now)
    if not result.opened:
        log.info("loop: %s: the scheduled look opens nothing: %s", entity, result.reason)
    return result.opened


def sweep(now: datetime | None = None) -> int:
    """The hourly sweep: deliver queued ideas, drop stale waiting records, look at every entity whose cadence is due.

    Returns how many cycles opened (ideas' and scheduled looks'). One
    entity's failure is logged and the sweep goes on.
    """
    now = now or timezone.now()
    opened = _deliver_ideas(now)
    drop_stale(now)
    for entity in due(now):
        try:
            opened += int(look(entity, now=now))
        except Exception:  # noqa: BLE001 - one entity's broken look must not stop the others'
            log.exception("loop: %s: the scheduled look failed", entity)
    return opened


def _deliver_ideas(now: datetime) -> int:
    """Ask for the cycle of every entity with a queued idea; a failure must not stop the scheduled looks."""
    try:
        return int(intake.deliver_queued(now) or 0)
    except Exception:  # noqa: BLE001 - the ideas' sweep failing must not stop the scheduled looks
        log.exception("loop: the hourly sweep could not deliver queued ideas")
        return 0
