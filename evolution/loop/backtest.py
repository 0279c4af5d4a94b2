"""Backtest: what a loop policy would have done over an entity's graded history (issue 16).

``backtest`` replays the entity's own graded runs in time order — one
streamed read, whatever the history's length — through the live loop's own
functions: ``trigger.decide`` (the preset's or the loop module's window()
and should_open(), under the brain code's deadline, reading the replayed
history instead of the tables), then the gates in ``opening.refusal``'s
order: one live cycle per entity, holds and lock groups as they stood then
(``steering.past``), and the ceilings' own rule (``cycles.ceiling_words``).
Each cycle it opens is held for the median time the entity's real cycles
took to settle. Cycles that opened on an idea, on request or on the cadence
are kept as they really happened (a person or a clock opened them, not the
trigger). Nothing outside runs: no proposer, no judge, no replay; nothing is
written here (``run`` keeps the report).

Not a stage: no stage imports it; the command, the API and the Policy view do.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from statistics import median
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from evolution.core.cycles import ceiling_words, cooldown, when
from evolution.loop import trigger
from evolution.models import Backtest, Cycle, Round
from evolution.presets.base import outcomes, trigger_terms
from evolution.presets.evolve import WINDOW_BOUND, cadence
from evolution.presets.repair import WINDOW_FIELDS
from evolution.presets.resolve import module_function, pinned_modules, preset_counts, preset_of, project_rule
from evolution.steering.past import GroupHistory, HoldHistory
from grading.metrics import is_bad
from grading.models import Entity, Grade
from singularity.money import money_str

#: How many graded runs one database round trip of the stream carries.
CHUNK = 2000
#: How many opened cycles and refusals a report lists one by one (the counts are always whole).
LISTED = 200
#: The refusal kinds a report counts, in ``opening.refusal``'s order.
KINDS = ("live_cycle", "hold", "lock_group", "cooldown", "daily_cap")
KIND_WORDS = {
    "live_cycle": "a cycle already live",
    "hold": "held",
    "lock_group": "lock group busy",
    "cooldown": "cooling down",
    "daily_cap": "daily cap reached",
    "other": "other",
}
SINCE = re.compile(r"^(\d{1,4})([hdw])$")
#: ``Past.move`` not told to move that one.
UNSET: Any = object()


def parse_since(raw: Any, *, now: datetime) -> datetime:
    """``30d``, ``12h``, ``2w``, an ISO date or an instant before now; ValueError naming what is wrong."""
    text = str(raw or "").strip()
    found = SINCE.match(text)
    if found:
        number, unit = int(found.group(1)), found.group(2)
        if number < 1:
            raise ValueError(f"since: {text!r} is not a period of at least 1 {unit}")
        return now - {"h": timedelta(hours=number), "d": timedelta(days=number), "w": timedelta(weeks=number)}[unit]
    instant = parse_datetime(text) if "T" in text or " " in text else None
    if instant is None and parse_date(text) is not None:
        instant = datetime.combine(parse_date(text), datetime.min.time())  # type: ignore[arg-type]
    if instant is None:
        raise ValueError(f"since: {text!r} is neither a period (30d, 12h, 2w) nor a date or an instant")
    if timezone.is_naive(instant):
        instant = timezone.make_aware(instant)
    if instant >= now:
        raise ValueError(f"since: {text!r} is not in the past")
    return instant


def refusal_kind(reason: str) -> str:
    """Which gate a refusal's words come from (the live loop's sentences, or the backtest's own)."""
    if reason.startswith("cooldown"):
        return "cooldown"
    if reason.startswith("maxAnalysesPerDay"):
        return "daily_cap"
    if reason.startswith("held by"):
        return "hold"
    if reason.startswith("lock group") or " lock group " in reason:
        return "lock_group"
    if reason.startswith(("cycle ", "waiting on the revert", "another cycle took")):
        return "live_cycle"
    return "other"


@dataclass
class Held:
    """A cycle of the replay: one the backtest opened, or a real one kept as it happened."""

    at: datetime
    #: When it lets the claim go (None: it still holds it).
    until: datetime | None
    status: str = ""
    anchor: str | None = None
    real: int | None = None
    #: When it settles (the cooldown counts from there); None: not in the period. Unset: when it lets the claim go.
    settles: datetime | None | str = "claim"

    def __post_init__(self) -> None:
        if self.settles == "claim":
            self.settles = self.until


@dataclass
class Past:
    """The history replayed so far, as ``trigger.decide`` and the entity's window() read it."""

    entity: Entity
    seen: deque[Grade] = field(default_factory=lambda: deque(maxlen=WINDOW_BOUND))
    mark: datetime | None = None
    changed_at: datetime | None = None
    #: The runs since the mark (never before the clean base), oldest first: kept as runs land, not re-read.
    fresh: deque[Grade] = field(default_factory=lambda: deque(maxlen=WINDOW_BOUND))

    #: Whether anything reads the runs since the mark (evolve's cadence, the entity's own window()).
    tracking: bool = True

    def land(self, grade: Grade) -> None:
        if self.tracking:  # the repair preset's count reads only the trigger's window (the caller's)
            self.seen.append(grade)
            self.fresh.append(grade)

    def move(self, *, mark: Any = UNSET, changed_at: Any = UNSET) -> None:
        """Move the mark (a cycle opened) or the clean base (a group's change): the runs since are read again."""
        if mark is not UNSET:
            self.mark = mark
        if changed_at is not UNSET:
            if changed_at == self.changed_at and mark is UNSET:
                return
            self.changed_at = changed_at
        if not self.tracking:
            return
        start = max((at for at in (self.mark, self.changed_at) if at is not None), default=None)
        self.fresh = deque((g for g in self.seen if start is None or g.graded_at > start), maxlen=WINDOW_BOUND)

    def since_mark(self) -> list[Grade]:
        """The graded runs since the mark (the previous cycle's start, never before the clean base), newest first."""
        return list(reversed(self.fresh))

    def ready_at(self, size: int) -> datetime | None:
        """When the window since the mark became ready: its ``size``-th run's grade, or None while it has fewer."""
        return self.fresh[size - 1].graded_at if len(self.fresh) >= size else None

    def graded_runs(self, since: Any, through: Any, limit: Any) -> dict[str, Any]:
        """``ctx.gradedRuns`` over the replayed runs (ungraded runs are not replayed: 0)."""
        low = parse_datetime(since) if isinstance(since, str) else since
        high = parse_datetime(through) if isinstance(through, str) else through
        bound = min(int(limit), WINDOW_BOUND) if limit else WINDOW_BOUND
        runs = [
            g
            for g in reversed(self.seen)
            if (low is None or g.graded_at > low) and (high is None or g.graded_at <= high)
        ][:bound]
        return {"comparable": outcomes(runs, self.entity.terms or {}), "ungraded": 0}

    def kept(self, ids: list[str]) -> dict[str, Grade]:
        wanted = set(ids)
        return {str(g.execution_id): g for g in self.seen if str(g.execution_id) in wanted}


def _as_policy(entity: Entity, terms: dict[str, Any]) -> Entity:
    """An unsaved copy of ``entity`` under ``terms`` with its loop on ("if this policy had been on")."""
    policy = copy.copy(entity)
    policy.terms = copy.deepcopy(terms)
    policy.terms.setdefault("loop", {})["enabled"] = True
    policy.loop_enabled = True
    return policy


def settle_time(entity: Entity) -> tuple[timedelta, timedelta | None, str]:
    """How long an opened cycle holds the claim and when it settles: (claim, settle or None, where that comes from).

    The entity's settled cycles answer: the median settle, the claim held for it less the median wait between
    proposal and apply (a proposal waiting on a person holds no claim). With none settled but proposals of its
    waiting on a person, a cycle holds the claim for its median analysis and does not settle in the period. Else
    the fleet's median settle; else 0 (each cycle settles as it opens).
    """
    analysed = Cycle.objects.filter(analysed=True)
    settled = analysed.exclude(completed_at=None).order_by("-completed_at")
    fields = ("started_at", "proposed_at", "applied_at", "completed_at")
    own = list(settled.filter(entity=entity).values_list(*fields)[:10000])
    if own:
        spans = [done - start for start, _p, _a, done in own]
        waits = [(a - p if p and a and a > p else timedelta(0)) for _s, p, a, _d in own]
        held = max(timedelta(0), median(spans) - median(waits))
        return held, median(spans), f"the median of the entity's {len(own)} settled cycles"
    waiting = list(
        analysed.filter(entity=entity, phase=Cycle.Phase.DECIDING)
        .exclude(proposed_at=None)
        .values_list("started_at", "proposed_at")[:10000]
    )
    if waiting:
        analysis = median([p - s for s, p in waiting])
        return analysis, None, f"its analysis: the entity's {len(waiting)} proposals wait on a person, none settled"
    spans = [done - start for start, done in settled.values_list("started_at", "completed_at")[:10000]]
    if spans:
        return median(spans), median(spans), f"the median of the fleet's {len(spans)} settled cycles"
    return timedelta(0), timedelta(0), "no cycle has settled yet: each settles as it opens (the ceilings space them)"


def median_costs(entity: Entity) -> dict[str, Any]:
    """The entity's recorded median cost per settled cycle: its proposer's spend and its check's judge spend."""
    rows = list(
        Cycle.objects.filter(entity=entity, analysed=True).exclude(completed_at=None).values_list("pk", "spent_usd")
    )
    if not rows:
        return {"cycles": 0, "proposer_usd": Decimal(0), "judge_usd": Decimal(0)}
    runs: dict[int, set[str]] = {pk: set() for pk, _ in rows}
    for cycle_id, checked, baseline in Round.objects.filter(cycle_id__in=list(runs)).values_list(
        "cycle_id", "check_run_ids", "baseline_run_ids"
    ):
        runs[cycle_id].update(str(r) for r in [*(checked or []), *(baseline or [])])
    owner = {run: pk for pk, ids in runs.items() for run in ids}
    judged: dict[int, Decimal] = {pk: Decimal(0) for pk in runs}
    if owner:
        for execution_id, cost in Grade.objects.filter(execution_id__in=list(owner)).values_list(
            "execution_id", "cost_usd"
        ):
            judged[owner[str(execution_id)]] += Decimal(cost or 0)
    return {
        "cycles": len(rows),
        "proposer_usd": _median([Decimal(spent or 0) for _, spent in rows]),
        "judge_usd": _median(list(judged.values())),
    }


def _median(values: list[Decimal]) -> Decimal:
    """The exact median (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


#: What the replay reads of each graded run as it comes (the trigger's rule reads no more).
STREAM = ("entity_id", "status", "score", "passed", "failure_category")


def _stream(entity: Entity, policy: Entity, since: datetime, until: datetime) -> Iterator[Grade]:
    """The entity's own graded runs after ``since`` through ``until``, oldest first: one query, read in chunks.

    Each row becomes a Grade holding only what the trigger reads (``_replayed``). The run id, the instant, the
    metrics and the judge come as text — the driver's own parsing of 100,000 timestamps and UUIDs costs more
    than the replay — and each distinct metrics or judge text is decoded once (most runs of an entity share
    them).
    """
    rows = (
        Grade.objects.filter(
            entity=entity,
            status=Grade.Status.GRADED,
            execution__loop_launched=False,
            graded_at__gt=since,
            graded_at__lte=until,
        )
        .order_by("graded_at", "execution_id")
        .values_list(
            *STREAM,
            Cast("execution_id", TextField()),
            Cast("graded_at", TextField()),
            Cast("metrics", TextField()),
            Cast("judge", TextField()),
        )
    )
    decoded: dict[str | None, Any] = {None: {}}
    for row in rows.iterator(CHUNK):
        metrics, judge = row[-2], row[-1]
        if metrics not in decoded:
            decoded[metrics] = json.loads(metrics)
        if judge not in decoded:
            decoded[judge] = json.loads(judge)
        yield _replayed(row, decoded[metrics], decoded[judge], policy)


def _run_id(text: str) -> str:
    """A run id as ``str(uuid)`` writes it (SQLite stores the 32 hex digits bare)."""
    if len(text) == 32:
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


def _instant(text: str) -> datetime:
    """A stored instant's text as an aware datetime (Postgres writes its UTC offset; SQLite stores UTC bare)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _replayed(row: tuple[Any, ...], metrics: Any, judge: Any, policy: Entity) -> Grade:
    """A Grade of the stream without the model's per-field construction (100,000 of them per backtest): the
    fields the trigger reads set (the run id as text), the entity the policy, the rest never read."""
    entity_id, status, score, passed, category, run, instant = row[:7]
    return Grade.read_only(
        {
            "entity_id": entity_id,
            "status": status,
            "score": score,
            "passed": passed,
            "failure_category": category,
            "execution_id": _run_id(run),
            "graded_at": _instant(instant),
            "metrics": metrics,
            "judge": judge,
            # A backtest asks what the policy's threshold would have done: read live, never a plan's (R5.19).
            "plan_terms": None,
        },
        entity=policy,
    )


def _before(entity: Entity, since: datetime, size: int) -> list[Grade]:
    """The ``size`` graded runs right before ``since``, oldest first: the windows the first replayed runs read."""
    rows = Grade.objects.filter(
        entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False, graded_at__lte=since
    )
    found = list(rows.select_related("execution").only(*WINDOW_FIELDS).order_by("-graded_at", "-execution_id")[:size])
    for grade in found:
        grade.plan_terms = None  # the policy's threshold, as the stream reads it (``_replayed``)
    return list(reversed(found))


def _real_cycles(entity: Entity, since: datetime, until: datetime, reach: timedelta) -> list[Cycle]:
    """The entity's real cycles that bear on the period: those in it, and the analysed ones just before it."""
    return list(
        Cycle.objects.filter(entity=entity, started_at__lte=until)
        .filter(
            Q(started_at__gt=since)
            | Q(analysed=True, completed_at=None)
            | Q(analysed=True, completed_at__gt=since - reach)
            | Q(analysed=True, started_at__gt=since - reach)
        )
        .only(
            "pk", "origin", "analysed", "status", "reason", "refusals", "anchor_id", "key", "started_at", "completed_at"
        )
        .order_by("started_at", "pk")
    )


@dataclass
class Replay:
    """The state of one replay: the cycles held so far and what the gates refused."""

    policy: Entity
    hold: timedelta
    settle: timedelta | None
    holds: HoldHistory
    groups: GroupHistory
    held: list[Held] = field(default_factory=list)
    opened: list[Held] = field(default_factory=list)
    day: deque[datetime] = field(default_factory=deque)
    refused: Counter[str] = field(default_factory=Counter)
    samples: list[dict[str, str]] = field(default_factory=list)
    #: Runs the brain's window() or should_open() failed on (withheld, as the live trigger withholds them).
    failed: int = 0
    failure: str = ""

    def live_at(self, at: datetime) -> Held | None:
        for cycle in reversed(self.held[-50:]):
            if cycle.at <= at and (cycle.until is None or at < cycle.until):
                return cycle
        return None

    def refusal_at(self, at: datetime, *, words: bool = True) -> str | None:
        """``opening.refusal`` over the replay at ``at``: the live cycle, a hold, a lock group, the ceilings.

        ``words`` False spares the live cycle's sentence its instants (the kind is all a count needs).
        """
        live = self.live_at(at)
        if live is not None:
            if not words:
                return "cycle is live"
            ends = f"until {when(live.until)}" if live.until else "still live"
            return f"cycle opened {when(live.at)} is live ({ends})"
        why = self.holds.refusal_at(at) or self.groups.refusal_at(at)
        if why:
            return why
        settled = [c for c in self.held[-50:] if isinstance(c.settles, datetime) and c.settles <= at]
        last = max(settled, key=lambda c: c.settles, default=None)  # type: ignore[arg-type, return-value]
        day = self.day  # the starts of the last 24 hours (cycles are held in the order they start)
        while day and day[0] <= at - timedelta(hours=24):
            day.popleft()
        ran = len(day)
        loop = (self.policy.terms or {}).get("loop") or {}
        words = ceiling_words(loop, last.settles if last else None, last.status if last else "", ran, at)
        return words or None

    def refuse(self, why: str, at: datetime, anchor: str) -> None:
        kind = refusal_kind(why)
        self.refused[kind] += 1
        if len(self.samples) < LISTED:
            self.samples.append({"at": at.isoformat(), "kind": kind, "anchor": anchor, "reason": why})

    def keep(self, cycle: Held) -> None:
        """Hold a cycle: the claim until it settles, a start in the day's count."""
        self.held.append(cycle)
        self.day.append(cycle.at)

    def open(self, at: datetime, anchor: str) -> Held:
        settles = None if self.settle is None else at + self.settle
        cycle = Held(at=at, until=at + self.hold, anchor=anchor, settles=settles)
        self.keep(cycle)
        self.opened.append(cycle)
        return cycle


def backtest(
    entity: Entity,
    *,
    since: datetime,
    terms: dict[str, Any] | None = None,
    now: datetime | None = None,
    label: str = Backtest.Label.CURRENT,
) -> dict[str, Any]:
    """Replay the entity's graded history since ``since`` through ``terms`` (its resolved terms when None).

    Returns the report: the cycles that would have opened (when, on which anchor run), the refusals by kind, the
    hold used, the spend that implies at the entity's median cost per cycle and, for today's policy, how far the
    replay reproduces the cycles that really opened. Writes nothing.
    """
    now = now or timezone.now()
    policy = _as_policy(entity, entity.terms if terms is None else terms)
    loop = policy.terms.get("loop") or {}
    hold, settle, hold_source = settle_time(entity)
    reach = max(timedelta(hours=48), cooldown(loop, regressed=True) + timedelta(hours=24))
    real = _real_cycles(entity, since, now, reach)
    replay = Replay(
        policy=policy, hold=hold, settle=settle, holds=HoldHistory.read(entity), groups=GroupHistory.read(entity)
    )
    # Cycles a person, an idea or the clock opened stay as they happened; before the period, every real one does.
    kept = [
        c for c in real if c.analysed and (c.started_at <= since or c.origin != Cycle.Origin.GRADE) and not _skip_row(c)
    ]
    evolving = preset_of(policy) == "evolve"
    own = bool(project_rule()) or (
        bool(policy.loop_module_path)
        and (module_function(policy, "window") is not None or module_function(policy, "should_open") is not None)
    )
    size = int(trigger_terms(loop)["windowRuns"])
    past = Past(entity=policy, tracking=evolving or own)
    window: deque[Grade] = deque(maxlen=size)
    runs = 0
    for grade in _before(entity, since, WINDOW_BOUND if (evolving or own) else size):
        grade.entity = policy
        past.land(grade)
        window.append(grade)
    past.move(mark=max((c.started_at for c in kept if c.started_at <= since), default=None))
    pending = deque(c for c in kept if c.started_at > since)
    for c in kept:
        if c.started_at <= since:
            replay.keep(Held(c.started_at, c.completed_at, c.status, real=c.pk))
    with pinned_modules(), transaction.atomic():
        if connection.vendor == "postgresql":
            # The stream is one cursor read to its end: plan for the whole result, not for its first rows.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL cursor_tuple_fraction = 1.0")
        counts = preset_counts(policy)
        size_evolve = cadence(policy.terms)
        for grade in _stream(entity, policy, since, now):
            at = grade.graded_at
            while pending and pending[0].started_at <= at:
                c = pending.popleft()
                replay.keep(Held(c.started_at, c.completed_at, c.status, real=c.pk))
                past.move(mark=c.started_at)
            runs += 1
            past.land(grade)
            window.append(grade)
            if counts and not is_bad(grade, policy.terms):
                continue  # what on_landed leaves out before deciding: the repair count never opens on a good run
            base = replay.groups.changed_at(at)
            past.move(changed_at=base)
            ready = past.ready_at(size_evolve) if evolving and not own else trigger.UNREAD
            recent = [g for g in reversed(window) if base is None or g.graded_at > base]
            try:
                opens, _reason = trigger.decide(
                    policy, grade, now=at, runs=recent, changed=base, ready=ready, past=past
                )
            except Exception as exc:  # noqa: BLE001 - the brain's rule failed: the live trigger withholds the run too
                replay.failed += 1
                replay.failure = replay.failure or f"{type(exc).__name__}: {exc}"
                continue
            if opens is None:
                continue
            why = replay.refusal_at(at, words=len(replay.samples) < LISTED)
            if why:
                replay.refuse(why, at, str(grade.execution_id))
                continue
            replay.open(at, str(grade.execution_id))
            past.move(mark=at)
    report = _report(entity, replay, since=since, until=now, runs=runs, hold=hold, hold_source=hold_source)
    report["policy"] = label
    report["preset"] = preset_of(policy)
    report["kept_as_they_happened"] = [
        {"cycle": c.pk, "origin": c.origin, "at": c.started_at.isoformat()} for c in kept if c.started_at > since
    ]
    if label == Backtest.Label.CURRENT:
        report["reproduction"] = _reproduction(replay, [c for c in real if c.started_at > since])
    return report


def _skip_row(cycle: Cycle) -> bool:
    """A row the judge or the freeze set aside (``opening._judge_unresolved``): nothing analysed, no claim."""
    return cycle.key.endswith((":judge", ":freeze"))


def _report(
    entity: Entity,
    replay: Replay,
    *,
    since: datetime,
    until: datetime,
    runs: int,
    hold: timedelta,
    hold_source: str,
) -> dict[str, Any]:
    costs = median_costs(entity)
    opened = len(replay.opened)
    proposer, judge = costs["proposer_usd"] * opened, costs["judge_usd"] * opened
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "graded_runs": runs,
        "opened": opened,
        "cycles": [
            {
                "at": c.at.isoformat(),
                "anchor": c.anchor,
                "settles_at": c.settles.isoformat() if isinstance(c.settles, datetime) else None,
            }
            for c in replay.opened[:LISTED]
        ],
        "refusals": {kind: replay.refused.get(kind, 0) for kind in (*KINDS, "other")},
        "refused": sum(replay.refused.values()),
        "refusal_samples": replay.samples,
        "rule_failures": replay.failed,
        "rule_failure": replay.failure,
        "held_for_seconds": int(hold.total_seconds()),
        "held_for": hold_source,
        "spend": {
            "cycles_priced": costs["cycles"],
            "per_cycle_proposer_usd": money_str(costs["proposer_usd"]),
            "per_cycle_judge_usd": money_str(costs["judge_usd"]),
            "proposer_usd": money_str(proposer),
            "judge_usd": money_str(judge),
            "total_usd": money_str(proposer + judge),
        },
    }


def _reproduction(replay: Replay, real: list[Cycle]) -> dict[str, Any]:
    """How the replay of today's policy meets what really happened in the period."""
    opened = [c for c in real if c.analysed and c.origin == Cycle.Origin.GRADE]
    anchors = {str(c.anchor_id) for c in opened if c.anchor_id}
    replayed = {c.anchor for c in replay.opened}
    refused: Counter[str] = Counter()
    for c in real:
        if not c.analysed and c.status == Cycle.Status.SKIPPED and c.origin == Cycle.Origin.GRADE and not _skip_row(c):
            refused[refusal_kind(c.reason)] += max(1, c.refusals)
    cannot = [
        {"cycle": c.pk, "origin": c.origin, "why": ORIGIN_WORDS.get(c.origin, c.origin)}
        for c in real
        if c.analysed and c.origin != Cycle.Origin.GRADE
    ]
    cannot += [
        {"cycle": c.pk, "origin": c.origin, "why": "set aside before it analysed (its judge or its check's inputs)"}
        for c in real
        if _skip_row(c)
    ]
    really = {kind: refused.get(kind, 0) for kind in (*KINDS, "other")}
    same_refusals = really == {kind: replay.refused.get(kind, 0) for kind in (*KINDS, "other")}
    return {
        "really_opened": len(opened),
        "matched": len(anchors & replayed),
        "missed": sorted(anchors - replayed),
        "extra": sorted(replayed - anchors),
        "really_refused": really,
        "reproduced": anchors == replayed and same_refusals,
        "not_reproducible": cannot,
    }


ORIGIN_WORDS = {
    Cycle.Origin.IDEA: "opened by an idea: kept as it happened",
    Cycle.Origin.REQUEST: "opened by hand (Analyze now): kept as it happened",
    Cycle.Origin.CADENCE: "opened by a scheduled look: kept as it happened",
}


def run(
    entity: Entity,
    *,
    since: datetime,
    changes: list[Any] | None = None,
    actor: str,
    now: datetime | None = None,
) -> tuple[Backtest, Backtest | None]:
    """Backtest today's policy and, with ``changes``, the proposed one; keep both reports (proposed beside current).

    Raises ValueError for a bad ``since`` and SettingsRefusal for a change the settings writes refuse.
    """
    from evolution.steering.settings.preview import proposed_terms

    now = now or timezone.now()
    proposed = proposed_terms(entity, changes, actor=actor)[0] if changes else None
    current = Backtest.objects.create(
        entity=entity,
        label=Backtest.Label.CURRENT,
        since=since,
        until=now,
        created_by=actor[:200],
        result=backtest(entity, since=since, now=now),
    )
    if proposed is None:
        return current, None
    other = Backtest.objects.create(
        entity=entity,
        label=Backtest.Label.PROPOSED,
        changes=[c.as_json() for c in changes or []],
        since=since,
        until=now,
        created_by=actor[:200],
        compared_with=current,
        result=backtest(entity, since=since, terms=proposed, now=now, label=Backtest.Label.PROPOSED),
    )
    return current, other


def period_words(report: dict[str, Any]) -> str:
    """The replayed period as a person says it: "the last 30 days", or "since Nov 1, 00:00 UTC"."""
    since, until = parse_datetime(report["since"]), parse_datetime(report["until"])
    if since is None or until is None:
        return "the period"
    days = (until - since) / timedelta(days=1)
    if abs(days - round(days)) < 0.01 and round(days) >= 1:
        return f"the last {round(days)} day{'s' if round(days) != 1 else ''}"
    hours = (until - since) / timedelta(hours=1)
    if abs(hours - round(hours)) < 0.01 and round(hours) >= 1:
        return f"the last {round(hours)} hour{'s' if round(hours) != 1 else ''}"
    return f"since {when(since)}"


def cycles_words(count: int) -> str:
    return f"{count} cycle{'s' if count != 1 else ''}"


def compare_words(current: dict[str, Any], proposed: dict[str, Any] | None = None) -> str:
    """One sentence: "Would have opened 14 cycles instead of 3 in the last 30 days." (today's alone without one)."""
    period = period_words(current)
    if proposed is None:
        return f"Today's policy would have opened {cycles_words(current['opened'])} in {period}."
    return (
        f"Would have opened {cycles_words(proposed['opened'])} instead of {current['opened']} in {period} "
        f"({proposed['graded_runs']:,} graded runs replayed)."
    )


def refusal_words(report: dict[str, Any]) -> str:
    """The refusals a replay met, by kind: "cooldown 4, maxAnalysesPerDay 2" ("none")."""
    counts = report.get("refusals") or {}
    said = [f"{KIND_WORDS[kind]} {counts[kind]}" for kind in (*KINDS, "other") if counts.get(kind)]
    return ", ".join(said) or "none"


def lines(report: dict[str, Any]) -> list[str]:
    """The report for a shell, line by line."""
    said = [
        f"{report['policy']} policy ({report['preset']}): {cycles_words(report['opened'])} would have opened in "
        f"{period_words(report)} over {report['graded_runs']:,} graded runs",
        f"  refused: {refusal_words(report)}",
        f"  each cycle held {timedelta(seconds=report['held_for_seconds'])} ({report['held_for']})",
        f"  implied spend: {report['spend']['total_usd']} USD (proposer {report['spend']['proposer_usd']}, "
        f"judge {report['spend']['judge_usd']}; median per cycle over {report['spend']['cycles_priced']} cycles)",
    ]
    said += [f"  opened {c['at']} on run {c['anchor']}" for c in report["cycles"][:20]]
    if report["opened"] > 20:
        said.append(f"  … and {report['opened'] - 20} more")
    repro = report.get("reproduction")
    if repro:
        verdict = "reproduced" if repro["reproduced"] else "not reproduced"
        said.append(
            f"  against what happened: {verdict} — {repro['matched']} of {repro['really_opened']} real cycles on the "
            f"same anchors, {len(repro['extra'])} extra, {len(repro['missed'])} missed"
        )
        said += [f"  cycle {c['cycle']}: {c['why']}" for c in repro["not_reproducible"]]
    return said
