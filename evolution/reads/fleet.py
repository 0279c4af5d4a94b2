"""The fleet and loop_status: every entity in the loop, what it is doing and what it waits on (seed 003).

Read from stored facts only, in a fixed number of queries whatever the fleet holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import itemgetter
from types import SimpleNamespace
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from evolution.core.cycles import cooldown, when
from evolution.models import Cycle
from evolution.reads import checks, economics, recent
from evolution.reads.next_look import next_looks
from evolution.reads.status import (
    CARD_GATES,
    PHASE_STATE,
    STATES,
    _live_rounds,
    _newest_round,
    _pr,
    _pr_round,
    entity_named,
    needs_you,
)
from evolution.steering import groups
from evolution.steering import needs_you as wait_fields
from evolution.steering.live import (  # noqa: F401 - the fleet's names for them, as before
    RANK_CARD_FIELDS,
    RANK_CYCLE_FIELDS,
    RANK_ROUND_FIELDS,
    in_the_loop,
    live_rows,
    plain_rounds,
)
from grading.metrics import human_rated, is_bad, specs
from grading.models import Entity
from singularity import written
from singularity.apikit.pagination import page_size


def _with_last_settle(entities: QuerySet[Entity]) -> QuerySet[Entity]:
    """Annotate each entity with its newest settled analysed cycle (the cooldown's start): id, time, status."""
    last = Cycle.objects.filter(entity=OuterRef("pk"), analysed=True, completed_at__isnull=False).order_by(
        "-completed_at", "-id"
    )
    return entities.annotate(
        last_settle_id=Subquery(last.values("pk")[:1]),
        last_settle_at=Subquery(last.values("completed_at")[:1]),
        last_settle_status=Subquery(last.values("status")[:1]),
    )


def with_months(entities: list[Entity], *, now: datetime) -> list[Entity]:
    """Hand each of ``entities`` this calendar month's loop as ``economics.with_month`` annotates it (cycles
    opened, validated, regressed, each cost part), read in one statement for them all: the month's cycles of
    those entities with their cost parts (``spend.with_cost``), summed here (exact Decimals).

    The same figures as the annotation, without compiling its seven correlated subqueries (sixteen cost
    subqueries) for every page (``tests/evolution/test_fleet_month.py``).
    """
    from evolution.core import spend

    start, end = spend.month_of(now)
    by_id = {e.pk: e for e in entities}
    for entity in entities:
        entity.month_cycles = entity.month_validated = entity.month_regressed = 0  # type: ignore[attr-defined]
        for name in spend.PARTS:
            setattr(entity, f"month_{name}", spend.ZERO)
    if not by_id:
        return entities
    ids = sorted(by_id)
    cycles = written.rows_compiled_once(
        ("with_months", start, end, tuple(ids)),
        lambda: spend.with_cost(spend.opened_in(start, end).filter(entity_id__in=ids).order_by()).values_list(
            "entity_id", "status", *spend.PARTS
        ),
    )
    for entity_id, status, *parts in cycles:
        entity = by_id[entity_id]
        entity.month_cycles += 1  # type: ignore[attr-defined]
        if status == Cycle.Status.VALIDATED:
            entity.month_validated += 1  # type: ignore[attr-defined]
        elif status == Cycle.Status.REGRESSED:
            entity.month_regressed += 1  # type: ignore[attr-defined]
        for name, amount in zip(spend.PARTS, parts, strict=True):
            setattr(entity, f"month_{name}", getattr(entity, f"month_{name}") + (amount or spend.ZERO))
    return entities


def _repair(entity: Entity) -> bool:
    loop = (entity.terms or {}).get("loop") or {}
    return (loop.get("preset") or "repair") == "repair"


def _trigger(entity: Entity) -> dict[str, Any]:
    from evolution.presets.base import trigger_terms

    return trigger_terms((entity.terms or {}).get("loop") or {})


def recent_outcomes(entities: Iterable[Entity], *, now: datetime) -> dict[int, list[bool]]:
    """For each repair entity, whether each of its last ``trigger.windowRuns`` graded runs is bad (newest first).

    The trigger's own count over the runs its window would read (observed, no
    loop replays), for every entity in two queries: each entity's newest runs
    read by index, bounded by its window (``evolution.reads.recent``), and
    people's ratings of them.
    """
    from grading.ratings import people_values

    by_id = {e.pk: e for e in entities if _repair(e)}
    if not by_id:
        return {}
    sizes = {pk: int(_trigger(e)["windowRuns"]) for pk, e in by_id.items()}
    newest = recent.newest_graded(sizes, now=now)
    # People's ratings stand over a run's value only on a human-rated metric (``metrics.run_value``): the runs of
    # entities with none are counted without reading theirs.
    rated = {pk for pk, e in by_id.items() if any(human_rated(spec) for spec in specs(e.terms or {}).values())}
    ids = [g.execution_id for pk, grades in newest.items() if pk in rated for g in grades]
    people = people_values(ids) if ids else {}
    answer: dict[int, list[bool]] = {}
    for pk, entity in by_id.items():
        grades = newest.get(pk, [])
        recent.attach(grades, by_id)
        answer[pk] = [is_bad(g, entity.terms or {}, people.get(str(g.execution_id), {})) for g in grades]
    return answer


def _idle(entity: Entity, outcomes: list[bool] | None, now: datetime) -> tuple[str, str]:
    """The state and next sentence of an entity no cycle holds: its rest, or its trigger window's count."""
    settled_at = getattr(entity, "last_settle_at", None)  # read for the rows shown (``_build``)
    if settled_at is not None:
        loop = (entity.terms or {}).get("loop") or {}
        rest = cooldown(loop, regressed=entity.last_settle_status == Cycle.Status.REGRESSED)  # type: ignore[attr-defined]
        until = settled_at + rest
        if until > now:
            return "idle", (
                f"Resting until {when(until)} (cooldown after cycle {entity.last_settle_id}); "  # type: ignore[attr-defined]
                "Analyze now still opens one."
            )
    if outcomes is None:
        looked = getattr(entity, "next_look", None)  # an evolve entity's cadence, read for the rows shown
        if looked:
            return "idle", f"Preset evolve: {looked}"
        loop = (entity.terms or {}).get("loop") or {}
        every = (loop.get("trigger") or {}).get("every")
        cadence = f" (every {every})" if every else ""
        return "idle", f"Preset {loop.get('preset')}: a cycle opens on its cadence{cadence}."
    trigger = _trigger(entity)
    need, size = int(trigger["minFailures"]), int(trigger["windowRuns"])
    rule = f"a cycle opens when the newest graded run is bad and {need} of the last {size} are"
    if entity.loop_module_path:
        rule = f"{rule} (unless its loop module's should_open says otherwise)"
    if not outcomes:
        return "idle", f"No graded runs yet; {rule}."
    bad = sum(outcomes)
    meter = f"{bad} of the last {len(outcomes)} graded runs bad"
    return ("window" if bad else "idle"), f"{meter}; {rule}."


def _live_next(cycle: Cycle) -> str:
    """The next sentence for an entity whose live ``cycle`` is at its phase."""
    rnd = _newest_round(cycle)
    number = f"r{rnd.number}" if rnd else "its first round"
    phase = cycle.phase
    if phase == Cycle.Phase.ANALYSING:
        if cycle.window and cycle.window.get("ready") is False:
            return f"Cycle {cycle.pk} waits on its window: {cycle.window.get('reason') or 'not ready yet'}."
        if hasattr(cycle, "decide_gate"):  # read alone (``live_cycles``), the cycle's terms unread
            decide = cycle.decide_gate or "human"
        else:
            decide = ((cycle.terms or {}).get("loop") or {}).get("autonomy", {}).get("decide", "human")
        after = "it is applied without a card" if decide == "auto" else "a decide card follows"
        return f"Cycle {cycle.pk} is analysing {number}; {after}."
    if phase == Cycle.Phase.DECIDING:
        return f"Cycle {cycle.pk} · {number} waits on a person's answer."
    if phase == Cycle.Phase.APPLYING:
        return f"Cycle {cycle.pk} is applying {number}: a pull request opens next."
    if phase == Cycle.Phase.CHECKING:
        pr = _pr_round(cycle)
        name = f"PR #{pr.pr_number}" if pr else "The PR"
        by = f"; it answers by {when(cycle.check_deadline)}" if cycle.check_deadline else ""
        return f"{name} is {checks.progress_words(cycle)} before anyone may merge it{by}."
    if phase == Cycle.Phase.MERGE_WAIT:
        pr = _pr_round(cycle)
        name = f"PR #{pr.pr_number}" if pr else "The PR"
        by = f" by {when(cycle.merge_deadline)}" if cycle.merge_deadline else ""
        if pr is not None and pr.merge_gate == "auto":
            return f"{name} merges once its checks pass{by}."
        return f"{name} waits for a person to merge it{by}; unmerged, the cycle settles unverified."
    if phase == Cycle.Phase.WATCHING:
        progress = cycle.watch_tally or _progress_words(cycle.watch_window) or "no runs graded yet"
        by = f"; it settles by {when(cycle.watch_deadline)}" if cycle.watch_deadline else ""
        return f"Watching the change of cycle {cycle.pk}: {progress}{by}."
    if phase == Cycle.Phase.REVERTING:
        reverts = [r for r in _live_rounds(cycle) if r.revert_pr_number]
        name = f"revert PR #{reverts[-1].revert_pr_number}" if reverts else "the revert PR"
        by = f" (until {when(reverts[-1].revert_deadline)})" if reverts and reverts[-1].revert_deadline else ""
        return f"Following {name} of cycle {cycle.pk} until it merges or closes{by}; no cycle opens meanwhile."
    return ""


def _progress_words(window: dict[str, Any] | None) -> str:
    """A window's progress as a person reads it ("2 of 5 graded runs"), else its reason, else ""."""
    if not window:
        return ""
    progress = window.get("progress") or {}
    if isinstance(progress, dict) and progress.get("need") is not None:
        unit = progress.get("unit") or "runs"
        return f"{progress.get('have', 0)} of {progress['need']} {unit}"
    return str(window.get("reason") or "")


#: The story's phase a person reads of each machine phase (seed 003: observe · hypothesize · change · prove ·
#: learn). ``observe`` is an entity's with no live cycle (its window gathering); a live cycle is past it.
STORY_PHASES = {
    Cycle.Phase.ANALYSING: "hypothesize",
    Cycle.Phase.DECIDING: "hypothesize",
    Cycle.Phase.APPLYING: "change",
    Cycle.Phase.MERGE_WAIT: "change",
    Cycle.Phase.CHECKING: "prove",
    Cycle.Phase.WATCHING: "prove",
    Cycle.Phase.REVERTING: "learn",
    Cycle.Phase.SETTLED: "learn",
}


def story_phase(phase: str) -> str:
    """The story's phase of machine phase ``phase`` (``observe`` for none)."""
    return STORY_PHASES.get(phase, "observe")


def _live_dict(cycle: Cycle) -> dict[str, Any]:
    rnd = _newest_round(cycle)
    pr = _pr(_pr_round(cycle))
    watch = None
    if cycle.phase == Cycle.Phase.WATCHING or cycle.watch_window:
        window = cycle.watch_window or {}
        watch = {
            "progress": window.get("progress"),
            "reason": window.get("reason") or "",
            "tally": cycle.watch_tally,
            "deadline": cycle.watch_deadline,
        }
    return {
        "id": cycle.pk,
        "phase": cycle.phase,
        "round": rnd.number if rnd else None,
        "prUrl": pr["url"] if pr else "",
        "pr": pr,
        "origin": cycle.origin,
        "startedAt": cycle.started_at,
        "url": cycle.get_absolute_url(),
        "watch": watch,
        # loop_status (R21.11): the machine's phase under ``machine``, a bare phase is the story's.
        "machine": {"phase": cycle.phase},
        "storyPhase": story_phase(cycle.phase),
    }


def state_of(
    entity: Entity,
    live: list[Cycle],
    needs: list[dict[str, Any]],
    outcomes: list[bool] | None,
    now: datetime,
    paused: str = "",
    grouped: str = "",
) -> tuple[str, str, Cycle | None]:
    """(state, the "Next" sentence, the cycle speaking for it) of one entity: the fleet's one place for states.

    ``live`` are its live cycles, ``needs`` its needs-you items, ``outcomes`` its window's (None: not counted
    here), ``paused`` why it is paused or held, ``grouped`` the lock group's refusal.
    """
    state, primary, card = standing(entity.pk, entity.loop_enabled, live, needs, paused, grouped)
    if state == "off":
        return "off", "The loop is off for this entity.", primary
    if state == "paused":
        return "paused", paused, primary
    if card is not None:
        return "waiting_on_you", card["next"][0].upper() + card["next"][1:] + ".", primary
    if primary is not None:
        return state, _live_next(primary), primary
    if state == "held":
        return "held", f"{grouped[0].upper()}{grouped[1:]}; its next cycle opens once the group is free.", None
    state, following = _idle(entity, outcomes, now)
    window = next((item for item in needs if item["gate"] in WINDOW_GATES), None)
    if window is not None:
        state, following = "window", _window_next(entity, window)
    return state, following, None


def standing(
    pk: int, enabled: bool, live: list[Any], needs: list[dict[str, Any]], paused: str = "", grouped: str = ""
) -> tuple[str, Any, dict[str, Any] | None]:
    """(the state, the cycle speaking for the entity, its pending card's wait) from the facts read for the fleet.

    The state is "" where only the entity's own rows can tell idle from a waiting window (``_idle``): what
    ``state_of`` says, and what the fleet ranks every entity by without reading it (``rank_state``).
    """
    card = next((item for item in needs if item["gate"] in CARD_GATES), None)
    state, primary = rank_state(pk, enabled, live, card is not None, paused, grouped)
    return state, primary, card if enabled and not paused else None


def rank_state(
    pk: int, enabled: bool, live: list[Any], carded: bool, paused: str = "", grouped: str = ""
) -> tuple[str, Any]:
    """(the state, the cycle speaking for the entity) of ``standing``, from whether a decide or retry card of its
    waits on a person (``carded``): ``live`` are its live cycles, whole or the fleet's plain rows (``live_rows``)."""
    holder = next((c for c in live if c.claim == pk), None)
    primary = holder or (live[-1] if live else None)
    if not enabled:
        return "off", primary
    if paused:
        return "paused", primary
    if carded:
        return "waiting_on_you", primary
    if primary is not None:
        state = PHASE_STATE.get(primary.phase, "analysing")
        if primary.phase == Cycle.Phase.ANALYSING and _unready(primary):
            state = "window"
        return state, primary
    if grouped:
        return "held", None
    return "", None


def _unready(cycle: Any) -> bool:
    """Whether a live cycle's window said it is not ready: read as a flag of the fleet's plain rows (``unready``)."""
    flag = getattr(cycle, "unready", None)
    return bool(flag) if flag is not None else cycle.window.get("ready") is False


#: The fleet's order, what needs a person first: a state's place here (then the name; states not named last).
ATTENTION = (
    "waiting_on_you",
    "paused",
    "reverting",
    "pr_open",
    "checking",
    "applying",
    "analysing",
    "watching",
    "held",
    "window",
    "idle",
    "off",
)


def attention(state: str, needs: list[dict[str, Any]]) -> tuple[int, int]:
    """The sort key of a row: anything waiting on a person first, then the state's place in ``ATTENTION``."""
    place = ATTENTION.index(state) if state in ATTENTION else len(ATTENTION)
    if state in ("window", "idle"):
        place = ATTENTION.index("window")  # whether its window holds a bad run is read for the rows shown only
    return (0 if needs else 1, place)


def _row(
    entity: Entity,
    live: list[Cycle],
    outcomes: list[bool] | None,
    now: datetime,
    paused: str = "",
    waits: list[dict[str, Any]] | None = None,
    grouped: str = "",
) -> dict[str, Any]:
    """One entity's loop_status entry (see ``loop_status``); ``waits`` are its needs-you items."""
    needs = [item for cycle in live for item in needs_you(cycle)] if waits is None else waits
    state, following, primary = state_of(entity, live, needs, outcomes, now, paused, grouped)
    in_flight = [_live_dict(c) for c in live]
    speaking = next((dict(d) for c, d in zip(live, in_flight, strict=True) if c is primary), None)
    waits = _waits(entity)
    return {
        "entity": entity,
        "targetKind": entity.target_kind,
        "targetId": entity.slug,
        "name": entity.name or entity.slug,
        "enabled": entity.loop_enabled,
        "state": state,
        "stateLabel": STATES[state],
        "live": speaking if speaking is not None or primary is None else _live_dict(primary),
        "inFlight": in_flight,
        "next": following,
        "needsYou": needs,
        "waits": waits,
        # loop_status's ``next`` (R21.4): the sentence, what the window waits on, and its meter.
        "nextStep": {"text": following, "waits": waits, "meter": waits["progress"] if waits else None},
        "stuck": _stuck(needs, in_flight),
    }


def _stuck(needs: list[dict[str, Any]], in_flight: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entity's first step due with no worker on it (a ``stuck`` needs-you item), with its cycle's machine
    phase under ``machine`` (R21.11); None when nothing is stuck."""
    item = next((i for i in needs if i.get("gate") == "stuck"), None)
    if item is None:
        return None
    phases = {d["id"]: d["phase"] for d in in_flight}
    return {
        "cycleId": item.get("cycleId"),
        "round": item.get("round"),
        "since": item.get("since"),
        "clause": item.get("clause", ""),
        "machine": {"phase": phases.get(item.get("cycleId"), "")},
    }


#: The needs-you gates a waiting window raises (evolution.needs_you).
WINDOW_GATES = ("window", "stall")


def _window_next(entity: Entity, item: dict[str, Any]) -> str:
    """The "Next cycle" line of an entity whose window waits: "2 of 3 scored series PRs · waiting on you: …"."""
    from evolution.steering.cadence import window_of

    row = window_of(entity)
    counted = f"{row.have} of {row.need} {row.unit or 'runs'}" if row is not None and row.need else ""
    return " · ".join(part for part in (counted, item["clause"]) if part) + "."


def _waits(entity: Entity) -> dict[str, Any] | None:
    """What the entity's trigger window waits on, as last recorded (``next.waits``), or None when it does not wait."""
    from evolution.steering.cadence import waiting, window_of

    row = window_of(entity)
    if not waiting(row):
        return None
    return {
        "progress": {"have": row.have, "need": row.need, "unit": row.unit} if row.need else None,
        "reason": row.reason,
        "awaitingPerson": row.awaiting_person,
        "movedAt": row.moved_at,
        "sampledAt": row.sampled_at,
    }


@dataclass
class Facts:
    """What the fleet reads once for the entities it is about, none of them read whole: a row is built from
    these for the entities shown.

    ``live`` are each entity's live cycles as plain rows (``live_rows``), oldest first. ``mine`` are each
    entity's waits, built: every one of them when ``built``; else (the fleet's page) all but its live cycles',
    which ``waits`` hold unbuilt (a live cycle's id → ``needs_you.cycle_waits``) and a row builds for the
    cycles it shows (``_build``).
    """

    live: dict[int, list[Any]]
    paused: dict[int, str]
    found: list[dict[str, Any]]
    mine: dict[int, list[dict[str, Any]]]
    grouped: dict[int, str]
    built: bool = True
    waits: dict[int, list[tuple[str, Any, Any]]] = field(default_factory=dict)

    def needs(self, pk: int) -> tuple[bool, bool]:
        """(whether anything of entity ``pk`` waits on a person, whether a decide or retry card of it does)."""
        items = self.mine.get(pk, [])
        carded = any(item["gate"] in CARD_GATES for item in items)
        needed = bool(items)
        if not self.built:
            for cycle in self.live.get(pk, []):
                for gate, _, _ in self.waits.get(cycle.pk, []):
                    needed = True
                    carded = carded or gate == "card"  # ``cycle_waits`` names only decide and retry cards
        return needed, carded

    def waiting(self) -> int:
        """How many distinct cycles (and waits of no cycle, as one) of these entities wait on a person."""
        found = {item["cycleId"] for items in self.mine.values() for item in items}
        if not self.built:
            found |= {cycle.pk for cycles in self.live.values() for cycle in cycles if self.waits.get(cycle.pk)}
        return len(found)


#: What the fleet reads of a live cycle (``standing``, ``_live_next``, ``_live_dict``, ``needs_you.cycle_items``,
#: ``core.due``): not its frozen set (read for a checking cycle only), terms (the decide gate an analysing
#: cycle names is read alone, ``decide_gate``), judge, reason or refusals.
LIVE_CYCLE_FIELDS = (
    "id",
    "entity_id",
    "claim",
    "phase",
    "status",
    "origin",
    "window",
    "started_at",
    "applied_at",
    "moved_at",
    "next_poll_at",
    "check_deadline",
    "merge_deadline",
    "watch_window",
    "watch_tally",
    "watch_deadline",
    "reverted_by_policy",  # status_label: a policy revert says so (R13.19)
)
#: What a live cycle's item names of its entity (``needs_you._item``).
LIVE_ENTITY_FIELDS = ("entity__id", "entity__slug", "entity__target_kind", "entity__name")


def live_cycles(scope: QuerySet[Entity] | None) -> list[Cycle]:
    """Every live cycle (of ``scope``'s entities; None: all), oldest first, with its rounds and their cards:
    only the columns the fleet's rows and waits read, a checking cycle's frozen set too (two statements).

    The rounds are plain rows of ``needs_you.ROUND_WAIT_FIELDS`` with their cards (a ``Card`` of
    ``CARD_WAIT_FIELDS``), listed on each cycle as ``rounds_read`` (``status._live_rounds``): not model rows
    and their related managers, which cost a row of the page more than the rest of it."""
    from django.db.models import Case, JSONField, When
    from django.db.models.fields.json import KT

    def statement() -> QuerySet[Cycle]:
        cycles = (
            Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
            .select_related("entity")
            .only(*LIVE_CYCLE_FIELDS, *LIVE_ENTITY_FIELDS)
            .annotate(
                decide_gate=KT("terms__loop__autonomy__decide"),
                frozen_if_checking=Case(When(phase=Cycle.Phase.CHECKING, then="frozen"), output_field=JSONField()),
            )
            .order_by("started_at", "id")
        )
        return cycles if scope is None else cycles.filter(entity__in=scope.values("pk"))

    scoped = None if scope is None else written.key_of(scope)
    read = written.objects_compiled_once(("live_cycles", scoped), statement)
    for cycle in read:
        if cycle.phase == Cycle.Phase.CHECKING:  # "checking (3 of 5 pairs graded)" counts the frozen set's slots
            cycle.frozen = cycle.frozen_if_checking  # type: ignore[attr-defined]
    rounds = plain_rounds([c.pk for c in read], named=True) if read else {}
    for cycle in read:
        cycle.rounds_read = rounds.get(cycle.pk, [])  # type: ignore[attr-defined]
    return read


def _as_row(cycle: Cycle) -> SimpleNamespace:
    """A live cycle read whole (``live_cycles``) as the plain row ``live_rows(named=True)`` reads of it."""
    columns = {f"{n}_id" if n == "entity" else n: getattr(cycle, f"{n}_id" if n == "entity" else n) for n in
               wait_fields.CYCLE_WAIT_FIELDS}  # fmt: skip
    entity = SimpleNamespace(
        pk=cycle.entity.pk, **{n: getattr(cycle.entity, n) for n in wait_fields.NAMED if n != "id"}
    )
    return SimpleNamespace(pk=cycle.pk, **columns, entity=entity, unready=_unready(cycle), rounds=_live_rounds(cycle))


def _facts(
    scope: QuerySet[Entity], *, now: datetime, whole: bool, build: bool = True, rows: list[Any] | None = None
) -> Facts:
    """The facts of ``scope``'s entities in a fixed number of queries, none reading a grade or every entity.

    The live cycles as plain rows (``live_rows``; ``rows`` when the caller read them, whole or plain), the
    pauses and holds, the waits on a person (``needs_you.fleet_collect``: only the entities that can raise one
    are read) and the lock groups a sibling's change holds (only entities that name a group are read).
    ``build`` False (the fleet's page) builds no live cycle's wait: each is counted from its plain rows
    (``Facts.waits``).
    """
    from evolution.steering import needs_you as waits_on

    if rows is None:
        rows = live_rows(None if whole else scope, named=build)
    live = _by_entity(rows)
    read = waits_on.fleet_collect(now, scope, live=rows, whole=whole, items_of_live=build)
    waits = {} if build else {cycle.pk: waits_on.cycle_waits(cycle, cycle.rounds, now) for cycle in rows}
    mine: dict[int, list[dict[str, Any]]] = {}
    for item in read.found:
        if item["_entity"] is not None:
            mine.setdefault(item["_entity"], []).append(item)
    idle = [e for e in read.read if e.pk not in live and groups.locking(e)]  # only these can a sibling hold
    grouped = groups.holders_many(idle) if idle else {}
    # The monthly spend ceiling pauses an idle entity until the month turns (its needs-you item says so).
    spent = {i["_entity"]: i["clause"] for i in read.found if i["gate"] == "budget" and i["_entity"] is not None}
    return Facts(live, {**spent, **read.held, **read.breaker}, read.found, mine, grouped, build, waits)


def _shown(scope: QuerySet[Entity], ids: list[int], *, now: datetime) -> list[Entity]:
    """The entities ``ids`` names (of ``scope``), in that order, with their last settles (``_idle``), read in
    one statement, whole but for what no row shows."""
    from evolution.steering import needs_you as waits_on

    if not ids:
        return []

    def statement() -> QuerySet[Entity]:
        return _with_last_settle(scope.filter(pk__in=ids).select_related("waiting_window").defer(*waits_on.UNREAD))

    read = {e.pk: e for e in written.objects_compiled_once(("shown", written.key_of(scope), tuple(ids)), statement)}
    # This month's loop spend and what it moved (issue 16): one statement for the page's rows.
    return with_months([read[pk] for pk in ids if pk in read], now=now)


def _build(
    shown: list[Entity], facts: Facts, *, now: datetime, live: dict[int, list[Cycle]] | None = None
) -> list[dict[str, Any]]:
    """The rows of ``shown`` (read by ``_shown``): their live cycles read whole (``live_cycles``; ``live`` when
    the caller read them) and their recent outcomes, for them only."""
    from evolution.steering import needs_you as waits_on

    running = [e.pk for e in shown if e.pk in facts.live]
    if live is None:
        ids = written.known_as(Entity.objects.filter(pk__in=running), "ids", tuple(running))
        live = _by_entity(live_cycles(ids) if running else [])
    checks.progress_many([c for pk in running for c in live.get(pk, [])])  # "checking (3 of 5 pairs graded)"
    idle = [e for e in shown if e.loop_enabled and e.pk not in facts.live]
    outcomes = recent_outcomes(idle, now=now)
    looks = next_looks(idle, now=now)
    for e in idle:
        e.next_look = looks.get(e.pk)  # type: ignore[attr-defined]
    rows = []
    for e in shown:
        needs = facts.mine.get(e.pk, [])
        if not facts.built and e.pk in live:  # its live cycles' waits, built from their whole rows
            needs = _oldest_first(
                [item for c in live[e.pk] for item in waits_on.cycle_items(c, _live_rounds(c), now)] + needs, now
            )
        paused, grouped = facts.paused.get(e.pk, ""), facts.grouped.get(e.pk, "")
        row = _row(e, live.get(e.pk, []), outcomes.get(e.pk), now, paused, waits_on.public(needs), grouped)
        row["month"] = economics.month_of_row(e)  # read with the row (``_shown``), no query
        rows.append(row)
    return rows


def _by_entity(cycles: list[Any]) -> dict[int, list[Any]]:
    """``cycles`` by their entity's id, in their order."""
    answer: dict[int, list[Any]] = {}
    for cycle in cycles:
        answer.setdefault(cycle.entity_id, []).append(cycle)
    return answer


def _oldest_first(items: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """``items`` in ``needs_you.collect``'s order: the oldest wait first, then by gate (a stable sort: an entity's
    live cycles' items, then its others in the order ``collect`` gave them, keep that order among equals)."""
    from evolution.steering import needs_you as waits_on

    far = now + timedelta(days=36500)
    gates = waits_on.GATES
    return sorted(
        items, key=lambda i: (i["since"] or far, gates.index(i["gate"]) if i["gate"] in gates else len(gates))
    )


def _gather(
    entities: QuerySet[Entity], *, now: datetime, whole: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(loop_status rows for every entity of ``entities``, by kind and id; the needs-you items).

    ``whole`` also keeps the items of no listed entity (the fleet's answer).
    """
    from evolution.steering import needs_you as waits_on

    cycles = live_cycles(None if whole else entities)  # every entity is shown: its live cycles read whole once
    facts = _facts(entities, now=now, whole=whole, rows=[_as_row(cycle) for cycle in cycles])
    rows = entities.select_related("waiting_window").defer(*waits_on.UNREAD).order_by("target_kind", "slug")
    shown = list(economics.with_month(_with_last_settle(rows), now=now))
    if not shown and not whole:
        return [], []
    return _build(shown, facts, now=now, live=_by_entity(cycles)), waits_on.public(facts.found)


@dataclass
class FleetPage:
    """One page of the fleet, what needs a person first: its rows, how many entities matched, the page's place."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    per_page: int
    #: Distinct cycles (and waits of no cycle) of the matched entities that wait on a person, and the forge's
    #: rate limit while it stands (it holds every entity's GitHub calls).
    need_you: int
    #: "GitHub rate limit until 14:05 UTC: <GitHub's words>" while one stands, else "" (the needs-you forge item).
    forge: str = ""


#: Rows on one page of the fleet: what needs a person comes first (``attention``), a search finds the rest. Each
#: row reads its entity whole, its live cycles whole and its month: at a thousand entities a page of 50 cost the
#: table half its time (docs/performance.md, seventh pass), 25 a quarter.
PER_PAGE = 25


def ranked(scope: QuerySet[Entity], facts: Facts) -> list[int]:
    """The ids of ``scope``'s entities, what needs a person first (``attention``), then by name and id.

    Ranked from the facts and one read of every entity's id, name and slug (three short columns): an entity
    nothing stands on ranks with the idle and the waiting windows, which only its own rows tell apart.
    """
    places = {state: attention(state or "window", [])[1] for state in (*STATES, "")}  # each state's place
    # An entity no fact names (no live cycle, wait, pause or sibling's hold: most of a fleet) ranks by whether its
    # loop is on alone: its place is worked out twice, not once an entity.
    named = facts.live.keys() | facts.mine.keys() | facts.paused.keys() | facts.grouped.keys()
    quiet = {on: (1, places[rank_state(0, on, [], False)[0]]) for on in (True, False)}

    def place(pk: int, enabled: bool) -> tuple[int, int]:
        needed, carded = facts.needs(pk)
        state, _ = rank_state(
            pk, enabled, facts.live.get(pk, []), carded, facts.paused.get(pk, ""), facts.grouped.get(pk, "")
        )
        return (0 if needed else 1, places[state])

    rows = written.rows_compiled_once(
        ("ranked", written.key_of(scope)), lambda: scope.values_list("pk", "name", "slug", "loop_enabled")
    )
    # Each row's key, then the ids in its order (a stable sort: rows equal in all four keep the statement's order).
    keyed = [
        ((*(quiet[enabled] if pk not in named else place(pk, enabled)), (name or slug).lower(), slug), pk)
        for pk, name, slug, enabled in rows
    ]
    keyed.sort(key=itemgetter(0))
    return [pk for _, pk in keyed]


def fleet_page(*, query: str = "", page: int = 1, per_page: int = PER_PAGE, now: datetime | None = None) -> FleetPage:
    """One page of the fleet: the entities in the loop matching ``query`` (name or id), attention first.

    Every matched entity is ranked (``ranked``) from facts that read only what stands on some entity (live
    cycles as plain rows, waits counted unbuilt, pauses, holds, lock groups); the rows are built for the page
    only, so the cost of a page follows what waits and the page's size, never the fleet's history nor every
    entity's terms, nor how many cycles are live.
    """
    now = now or timezone.now()
    entities = in_the_loop()
    if query:
        entities = entities.filter(Q(name__icontains=query) | Q(slug__icontains=query))
        written.known_as(entities, "in the loop", "found by", query)
    facts = _facts(entities, now=now, whole=False, build=False)
    order = ranked(entities, facts)
    pages = max(1, -(-len(order) // per_page))
    page = min(max(1, page), pages)
    shown = _shown(entities, order[(page - 1) * per_page : page * per_page], now=now)
    forge = _forge_words()
    return FleetPage(
        _build(shown, facts, now=now), len(order), page, pages, per_page, facts.waiting() + bool(forge), forge
    )


def _forge_words() -> str:
    """The forge's standing rate limit as the needs-you page says it ("" when none): one read of one table."""
    from evolution.forges import rate_limit, rate_limit_words

    limit = rate_limit()
    return "" if limit is None else f"{rate_limit_words(limit[0])}: {limit[1]}"


def fleet(*, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every entity in the loop (loop on, present in the brain) with its state, next step and cycles in flight.

    Each row is a loop_status entry plus ``entity`` (the model row, for
    links). A fixed number of queries whatever the fleet's size.
    """
    entities = in_the_loop()
    return _gather(entities, now=now or timezone.now(), whole=True)[0]


#: Entities one page of loop_status answers when called without a ``limit``: the dashboard's page. Through the
#: API a page is every list's (``apikit.pagination``: ``limit`` 1 to 100, 20 by default). Every page lists the
#: whole fleet's waits, so a page of 100 cost a fifth more.
STATUS_PAGE = PER_PAGE


def loop_status(
    entity: Entity | None = None, *, now: datetime | None = None, limit: int = STATUS_PAGE, cursor: str = ""
) -> dict[str, Any]:
    """loop_status: the fleet (``entity`` None) or one entity, in one shape.

    Returns {"entities": [...], "needsYou": n, "needsYouItems": [...], "nextCursor": str | None} where
    each entry is {targetKind, targetId, name, enabled, state, stateLabel,
    live, inFlight, next, needsYou[], waits} — ``live`` is the cycle holding
    the entity (else its newest live one): {id, phase, round, prUrl, pr,
    origin, startedAt, url, watch}; ``needsYou`` the entity's waits on a
    person (``evolution.needs_you``: decide, retry, grant, merge, revert,
    rearm, window, stall, failure, config) each with who acts next and where;
    ``waits`` what its trigger window waits on (None when it does not). One
    entity is answered even with its loop off (state "off"). At the top,
    ``needsYouItems`` lists every wait (the fleet's includes those of no
    entity in it, e.g. a grant card naming none) and ``needsYou`` counts them:
    the dashboard's "N need you". The fleet's entities come ``limit`` at a
    time by kind and id: ``nextCursor`` (``<kind>:<id>`` of the last one
    answered) asks for the next page, None on the last. Only the page's
    entities are read whole.
    """
    now = now or timezone.now()
    if entity is not None:
        rows, found = _gather(Entity.objects.filter(pk=entity.pk), now=now, whole=False)
        return {"entities": rows, "needsYou": len(found), "needsYouItems": found, "nextCursor": None}
    from evolution.steering import needs_you as waits_on

    scope = in_the_loop()
    facts = _facts(scope, now=now, whole=True)
    rest = scope
    if cursor:
        kind, slug = cursor.split(":", 1)
        rest = rest.filter(Q(target_kind__gt=kind) | Q(target_kind=kind, slug__gt=slug))
    ids = list(rest.order_by("target_kind", "slug").values_list("pk", flat=True)[: limit + 1])
    shown = _shown(scope, ids[:limit], now=now)
    found = waits_on.public(facts.found)
    more = len(ids) > limit
    return {
        "entities": _build(shown, facts, now=now),
        "needsYou": len(found),
        "needsYouItems": found,
        "nextCursor": f"{shown[-1].target_kind}:{shown[-1].slug}" if more and shown else None,
    }


def status_for(
    target_kind: str | None,
    target_id: str | None,
    *,
    now: datetime | None = None,
    limit: Any = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """loop_status named as the API names it: both halves or neither, a ``limit`` as every list's (1–100, 20 by
    default) and a ``cursor`` of ``<kind>:<id>``; ValueError naming the parameter / NotFound otherwise."""
    size = page_size(limit)
    if cursor and ":" not in cursor:
        raise ValueError(f"cursor: {cursor[:60]!r} is not a page of loop_status (a previous answer's nextCursor)")
    return loop_status(entity_named(target_kind, target_id), now=now, limit=size, cursor=cursor or "")
