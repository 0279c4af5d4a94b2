"""What the loop cost and what it bought (issue 16): an entity's months, the fleet's month, loop_summary.

Every amount is ``evolution.core.spend``'s: a cycle's whole cost, exact, in the month it opened. What a cycle
moved is read off its verdict records, as the cycle's grade is (``evolution.core.outcomes``):

- validated: the objective's gain and its interval off the watch's record (evolve), else the count's tally
  (repair: "5 of 5 graded runs, 0 bad");
- regressed: where its revert ended ("Reverted", "Regressed, revert closed", "Closed by the check");
- measured nothing: a settled cycle neither the check nor the watch measured (skipped, failed, never merged,
  a blind verdict) — what it cost is the spend that bought no evidence;
- in flight: a live cycle, its cost so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Count, IntegerField, Prefetch, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone

from evolution.core import outcomes, spend
from evolution.models import Cycle, Round
from evolution.presets.readings import shown
from evolution.reads.history import parse_instant
from grading.models import Entity
from singularity.fields import MoneyField

ZERO = Decimal(0)
#: Months the entity page shows, this one first.
MONTHS = 6
#: The grades loop_summary counts by (the seed's five), and "ungraded" for a settle with no verdict.
GRADES = ("improvement", "regression", "tradeoff", "tie", "inconclusive", "ungraded")


#: What a month's line reads of a cycle (``_line``; its grade, strength and what it moved through ``outcomes``)
#: beside its cost: the frozen set, the window and the terms stay unread.
LINE_FIELDS = (
    "id",
    "phase",
    "status",
    "reason",
    "started_at",
    "watch_verdict",
    "watch_window",
    "confounded_by",
    "confounded_by_edit",
    "reverted_by_policy",  # status_label: a policy revert says so (R13.19)
)


def _rounds() -> Prefetch:
    fields = ("id", "cycle_id", "number", "merge_sha", "check_verdict", "check_run_ids", "revert_outcome")
    return Prefetch("rounds", queryset=Round.objects.only(*fields).order_by("number"))


def measured(cycle: Cycle) -> bool:
    """Whether the check or the watch measured anything of ``cycle``'s change (its rounds prefetched)."""
    if outcomes.strength(cycle) in (outcomes.PAIRED, outcomes.MEASURED):
        return True
    return any(outcomes.check_measured(r.check_verdict) for r in cycle.rounds.all())


def moved_words(cycle: Cycle) -> str:
    """What a settled cycle moved, in words: the objective's gain and interval, the count's tally, the revert."""
    if cycle.status == Cycle.Status.REGRESSED:
        return outcomes.status_label(cycle)
    record = cycle.watch_verdict if isinstance(cycle.watch_verdict, dict) else {}
    for entry in record.get("perMetric") or []:
        if not isinstance(entry, dict) or entry.get("role") != "objective":
            continue
        words = f"{entry.get('metric')} {shown(entry.get('gain'))}"
        spread = entry.get("spread")
        if isinstance(spread, list) and len(spread) == 2:
            confidence = entry.get("confidence")
            at = f" at {float(confidence):.0%}" if isinstance(confidence, (int, float)) else ""
            words += f" in [{shown(spread[0])}, {shown(spread[1])}]{at}"
        return words
    return str(record.get("tally") or record.get("summary") or cycle.reason or "")


def _kind(cycle: Cycle) -> str:
    """validated | regressed | nothing (measured nothing) | measured (unvalidated, measured) | live."""
    if cycle.live:
        return "live"
    if cycle.status in (Cycle.Status.VALIDATED, Cycle.Status.REGRESSED):
        return str(cycle.status)
    return "measured" if measured(cycle) else "nothing"


def _line(cycle: Cycle) -> dict[str, Any]:
    grade = outcomes.grade(cycle)
    return {
        "id": cycle.pk,
        "url": cycle.get_absolute_url(),
        "kind": _kind(cycle),
        "status": outcomes.status_label(cycle),
        "grade": {"label": grade[0], "n": grade[1]} if grade else None,
        "moved": moved_words(cycle) if cycle.status else "",
        "cost": {name: getattr(cycle, name) or ZERO for name in spend.PARTS},
        "cost_usd": spend.total(cycle),
        "started_at": cycle.started_at,
    }


@dataclass
class Month:
    """One calendar month of an entity's loop: what its cycles cost and what they moved."""

    start: datetime
    spent_usd: Decimal = ZERO
    parts: dict[str, Decimal] = field(default_factory=lambda: {name: ZERO for name in spend.PARTS})
    validated: list[dict[str, Any]] = field(default_factory=list)
    regressed: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    nothing_usd: Decimal = ZERO
    nothing_n: int = 0
    live_usd: Decimal = ZERO
    live_n: int = 0

    @property
    def label(self) -> str:
        return f"{timezone.localtime(self.start):%B %Y}"

    @property
    def judge_usd(self) -> Decimal:
        """The judge's share: the check's replays graded and the watch's exempt gradings."""
        return self.parts["check_judge_usd"] + self.parts["watch_judge_usd"]

    @property
    def cycles(self) -> int:
        return len(self.validated) + len(self.regressed) + len(self.others)

    def add(self, line: dict[str, Any]) -> None:
        self.spent_usd += line["cost_usd"]
        for name in spend.PARTS:
            self.parts[name] += line["cost"][name]
        kind = line["kind"]
        if kind == "validated":
            self.validated.append(line)
        elif kind == "regressed":
            self.regressed.append(line)
        else:
            self.others.append(line)
        if kind == "nothing":
            self.nothing_usd += line["cost_usd"]
            self.nothing_n += 1
        elif kind == "live":
            self.live_usd += line["cost_usd"]
            self.live_n += 1


def _months_back(now: datetime, count: int) -> list[datetime]:
    """The first instants of the ``count`` months up to ``now``'s, newest first."""
    starts = [spend.month_of(now)[0]]
    while len(starts) < count:
        starts.append(spend.month_of(starts[-1] - timedelta(days=1))[0])
    return starts


def entity_months(entity: Entity, *, now: datetime | None = None, months: int = MONTHS) -> dict[str, Any]:
    """The entity page's Spend section: {months (newest first), ceiling, refused, turns_at} in two queries, of
    what the months' lines read of their cycles (``LINE_FIELDS``) and rounds.

    ``refused`` is the monthly ceiling's refusal standing now ("" when it opens).
    """
    now = now or timezone.now()
    starts = _months_back(now, months)
    by_start = {start: Month(start) for start in starts}
    mine = spend.opened_in(starts[-1], spend.month_of(now)[1]).filter(entity=entity).only(*LINE_FIELDS)
    cycles = spend.with_cost(mine).prefetch_related(_rounds()).order_by("started_at", "id")
    for cycle in cycles:
        by_start[spend.month_of(cycle.started_at)[0]].add(_line(cycle))
    ceiling = spend.month_ceiling(entity)
    this = by_start[starts[0]]
    refused = (
        spend.month_words(this.spent_usd, ceiling, now) if ceiling is not None and this.spent_usd >= ceiling else ""
    )
    return {
        "months": [by_start[s] for s in starts],
        "ceiling": ceiling,
        "refused": refused,
        "turns_at": spend.turns_at(now),
        "this_month": this,
    }


#: What ``with_month`` annotates on an entity, and a fleet row's month reads back.
MONTH_FIELDS = ("month_cycles", "month_validated", "month_regressed", *(f"month_{name}" for name in spend.PARTS))


def with_month(entities: QuerySet[Entity], *, now: datetime) -> QuerySet[Entity]:
    """``entities`` annotated with this calendar month's loop: cycles opened, validated, regressed, each cost part.

    Correlated subqueries in the entities' own query (the fleet reads its page's rows in one query), written out
    (``MONTH``): built by the ORM they were seven subqueries holding sixteen more, which cost several times
    running them on every read. The same sums as ``spend.with_cost``'s parts of each of the month's cycles
    (``tests/evolution/test_fleet_month.py``).
    """
    start, end = (connection.ops.adapt_datetimefield_value(at) for at in spend.month_of(now))
    money, count = MoneyField(), IntegerField()
    return entities.annotate(
        **{
            name: RawSQL(sql, (start, end, *more), output_field=money if name.endswith("_usd") else count)
            for name, (sql, more) in MONTH.items()
        }
    )


#: An entity's cycles (``c``) that opened in a month (its first instant and the next's: two parameters) and could
#: have spent (``spend.opened_in``). ``grading_entity`` is the row of the query annotated.
_MINE = "c.entity_id = grading_entity.id AND c.analysed AND c.started_at >= %s AND c.started_at < %s"
_COUNTED = f"SELECT COUNT(*) FROM evolution_cycle c WHERE {_MINE}"
#: Their replays' runs (``x``), as ``spend.with_cost`` reads them: a replay not yet run has none.
_REPLAYED = (
    "evolution_cycle c JOIN evolution_round r ON r.cycle_id = c.id JOIN evolution_replay p ON p.round_id = r.id "
    "JOIN grading_execution x ON x.id = p.execution_id"
)
#: ``with_month``'s figures: {name: (a subquery of the entity's row, its parameters after the month's two)}. Money
#: (``_usd``) is summed as stored (SQLite's integer units, Postgres's numeric) and read through ``MoneyField``:
#: exact on both.
MONTH: dict[str, tuple[str, tuple[str, ...]]] = {
    "month_cycles": (_COUNTED, ()),
    "month_validated": (f"{_COUNTED} AND c.status = %s", (Cycle.Status.VALIDATED.value,)),
    "month_regressed": (f"{_COUNTED} AND c.status = %s", (Cycle.Status.REGRESSED.value,)),
    "month_proposer_usd": (f"SELECT COALESCE(SUM(c.spent_usd), 0) FROM evolution_cycle c WHERE {_MINE}", ()),
    "month_replays_usd": (f"SELECT COALESCE(SUM(x.cost_usd), 0) FROM {_REPLAYED} WHERE {_MINE}", ()),
    "month_check_judge_usd": (
        f"SELECT COALESCE(SUM(g.cost_usd), 0) FROM {_REPLAYED} JOIN grading_grade g ON g.execution_id = x.id "
        f"WHERE {_MINE}",
        (),
    ),
    # The watch's exempt gradings name their cycle and were booked since it opened: each counts for one cycle.
    "month_watch_judge_usd": (
        "SELECT COALESCE(SUM(g.cost_usd), 0) FROM evolution_cycle c JOIN grading_grade g ON g.entity_id = c.entity_id "
        f"WHERE {_MINE} AND g.booked_at >= c.started_at AND g.reason = %s || CAST(c.id AS TEXT) "
        "AND g.reason LIKE 'exempt:watch:%%'",  # the condition of ``grade_watch_exempt``: the few grades it holds
        (spend.WATCH_REASON,),
    ),
}


def month_of_row(entity: Entity) -> dict[str, Any]:
    """A fleet row's month from an entity ``with_month`` annotated: {spent_usd, validated, regressed, cycles,
    ceiling_usd}."""
    return {
        "spent_usd": sum((getattr(entity, f"month_{name}", None) or ZERO for name in spend.PARTS), ZERO),
        "validated": getattr(entity, "month_validated", 0) or 0,
        "regressed": getattr(entity, "month_regressed", 0) or 0,
        "cycles": getattr(entity, "month_cycles", 0) or 0,
        "ceiling_usd": spend.month_ceiling(entity),
    }


# --- loop_summary -----------------------------------------------------------------------------


class SummaryRefused(ValueError):
    """A loop_summary argument is not one: the message names it."""


def _target(target_kind: str | None, target_id: str | None) -> Entity | None:
    from evolution.reads.status import entity_named

    try:
        return entity_named(target_kind, target_id, names=("targetKind", "targetId"))  # as the API spells them
    except ValueError as refused:
        raise SummaryRefused(str(refused)) from refused


def _instant(value: str | datetime, name: str) -> datetime:
    """An ISO 8601 instant the database can compare (a year-1 instant east of UTC is not one)."""
    instant = parse_instant(value, name=name)
    try:
        instant.astimezone(UTC)
    except OverflowError:
        raise SummaryRefused(f"{name}: {str(value)[:60]!r} is outside the instants a database holds") from None
    return instant


def _grade_key(cycle: Cycle) -> str:
    grade = outcomes.grade(cycle)
    key = grade[0].lower() if grade else "ungraded"
    return key if key in GRADES else "ungraded"


def _settled(entity: Entity | None, since: datetime, until: datetime) -> QuerySet[Cycle]:
    cycles = Cycle.objects.filter(phase=Cycle.Phase.SETTLED, completed_at__gte=since, completed_at__lt=until)
    return cycles.filter(entity=entity) if entity is not None else cycles


def summary(
    *,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    target_kind: str | None = None,
    target_id: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """loop_summary: a window's settles counted by grade and by status, and what those settled cycles cost.

    The window is [since, until) over when each cycle settled; ``since`` defaults to the first instant of this
    calendar month and ``until`` to now. SummaryRefused names a bad argument; NotFound an entity that is not.
    A refusal row (no analysis opened) is a skipped settle with no grade and no cost; ``refused`` counts the
    asks such rows fold.
    """
    now = now or timezone.now()
    start = _instant(since, "since") if since not in (None, "") else spend.month_of(now)[0]
    end = _instant(until, "until") if until not in (None, "") else now
    if end <= start:
        raise SummaryRefused(f"until: {end.isoformat()} is not after since ({start.isoformat()})")
    entity = _target(target_kind, target_id)
    settled = _settled(entity, start, end)
    by_grade = dict.fromkeys(GRADES, 0)
    spent_by_grade = dict.fromkeys(GRADES, ZERO)
    by_status = dict.fromkeys(Cycle.Status.values, 0)
    parts = dict.fromkeys(spend.PARTS, ZERO)
    nothing = ZERO
    unanalysed = (
        settled.filter(analysed=False).order_by().values("status").annotate(n=Count("id"), asks=Sum("refusals"))
    )
    refused = 0
    for row in unanalysed:
        by_status[row["status"]] = by_status.get(row["status"], 0) + row["n"]
        by_grade["ungraded"] += row["n"]
        refused += row["asks"] or 0
    for cycle in spend.with_cost(settled.filter(analysed=True)).prefetch_related(_rounds()).order_by():
        cost = spend.total(cycle)
        key = _grade_key(cycle)
        by_grade[key] += 1
        spent_by_grade[key] += cost
        by_status[cycle.status] = by_status.get(cycle.status, 0) + 1
        for name in spend.PARTS:
            parts[name] += getattr(cycle, name) or ZERO
        if not measured(cycle):
            nothing += cost
    return {
        "since": start,
        "until": end,
        "target_kind": entity.target_kind if entity is not None else None,
        "target_id": entity.slug if entity is not None else None,
        "settled": sum(by_status.values()),
        "by_grade": by_grade,
        "by_status": by_status,
        "refused": refused,
        "spent_usd": sum(parts.values(), ZERO),
        **parts,
        "spent_by_grade_usd": spent_by_grade,
        "spent_measured_nothing_usd": nothing,
    }
