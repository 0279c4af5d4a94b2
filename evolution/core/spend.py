"""What the loop spent: a cycle's cost to the quantum, an entity's loop spend in a calendar month, the monthly ceiling.

A cycle's cost is derived at read, never stored, from the exact amounts already
priced where each call was paid (issue 16):

- ``proposer_usd``: every proposer call of every round, failed attempts included (``Cycle.spent_usd``, the
  ledger the decide card's "spend so far" and ``budget.maxUsdPerRun`` read);
- ``replays_usd``: the pre-merge check's replays' own model calls (the ``cost_usd`` of each ``Replay``'s run);
- ``check_judge_usd``: the judge's grading of those replays (their grades' ``cost_usd``);
- ``watch_judge_usd``: the judge's grading of the entity's own runs the watch booked exempt for this cycle
  (grades whose reason is ``exempt:watch:<cycle id>``, booked since the cycle opened — the exemption's own
  words, so no grade is counted for two cycles and none is guessed from a time span).

A cycle's whole cost belongs to the calendar month (the project's time zone) in which it opened, so a month's
row lists its cycles and their cost together. ``loop.budget.maxUsdPerMonth`` (ours, brain-wide) refuses new
cycles of an entity whose cycles opened this month cost at least the ceiling, until the month turns.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import CharField, F, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Cast, Coalesce, Concat
from django.utils import timezone

from evolution.models import Cycle, Replay
from grading.models import Entity, Grade
from singularity.display import usd_text
from singularity.fields import MoneyField

#: The parts of a cycle's cost, in the order people read them.
PARTS = ("proposer_usd", "replays_usd", "check_judge_usd", "watch_judge_usd")
#: The grade reason the watch's exemption writes (grading.booking: ``exempt:`` + the watch's ``watch:<id>``).
WATCH_REASON = "exempt:watch:"
ZERO = Decimal(0)


def _money(expression: Any) -> Any:
    return Coalesce(expression, Value(ZERO, output_field=MoneyField()), output_field=MoneyField())


def _summed(queryset: QuerySet[Any], group: str, column: str) -> Subquery:
    return Subquery(
        queryset.order_by().values(group).annotate(total=Sum(column, output_field=MoneyField())).values("total")[:1],
        output_field=MoneyField(),
    )


def with_cost(cycles: QuerySet[Cycle]) -> QuerySet[Cycle]:
    """``cycles`` annotated with each part of ``PARTS`` (exact Decimals; 0 when none): ``total`` adds them."""
    return cycles.annotate(**_cost_parts())


@functools.cache
def _cost_parts() -> dict[str, Any]:
    """``with_cost``'s annotations, built once a process: they name their cycle only through ``OuterRef``, so their
    shape never changes, and annotating copies an expression as it resolves it (the ones built here are never
    changed). Building their three subqueries cost more than running them, on every read of a cycle's cost."""
    replays = Replay.objects.filter(round__cycle=OuterRef("pk"))
    watch = Grade.objects.filter(
        entity=OuterRef("entity_id"),
        booked_at__gte=OuterRef("started_at"),
        reason__startswith=WATCH_REASON,  # the condition of ``grade_watch_exempt``: the few grades it holds
        reason=Concat(Value(WATCH_REASON), Cast(OuterRef("pk"), output_field=CharField()), output_field=CharField()),
    )
    # The parts are added in Python (``total``): Django types a sum of two money columns as a plain decimal,
    # which SQLite would CAST to NUMERIC and read back as integer units.
    return {
        "proposer_usd": F("spent_usd"),
        "replays_usd": _money(_summed(replays, "round__cycle", "execution__cost_usd")),
        "check_judge_usd": _money(_summed(replays, "round__cycle", "execution__grade__cost_usd")),
        "watch_judge_usd": _money(_summed(watch, "entity", "cost_usd")),
    }


def total(row: Any) -> Decimal:
    """The sum of ``PARTS`` of a row (a dict or a cycle annotated by ``with_cost``), exact."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name, None)
    return sum((get(name) or ZERO for name in PARTS), ZERO)


def cost_of(cycle: Cycle) -> dict[str, Decimal]:
    """{each part of ``PARTS``, ``total_usd``} of one cycle, exact to the quantum (one query)."""
    row = with_cost(Cycle.objects.filter(pk=cycle.pk)).values(*PARTS).first() or {}
    parts = {name: row.get(name) or ZERO for name in PARTS}
    return {**parts, "total_usd": total(parts)}


# --- Months -------------------------------------------------------------------------------


def month_of(instant: datetime) -> tuple[datetime, datetime]:
    """The calendar month holding ``instant`` in the project's time zone: (its first instant, the next month's)."""
    local = timezone.localtime(instant)
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (
        start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    )
    zone = timezone.get_current_timezone()
    # Re-anchored in the zone: a month that crosses a daylight-saving change keeps midnight.
    return (
        timezone.make_aware(start.replace(tzinfo=None), zone),
        timezone.make_aware(following.replace(tzinfo=None), zone),
    )


def opened_in(start: datetime, end: datetime) -> QuerySet[Cycle]:
    """The cycles that opened in [start, end) and could have spent (a refusal row opened no analysis)."""
    return Cycle.objects.filter(analysed=True, started_at__gte=start, started_at__lt=end)


def spent_many(entity_ids: Iterable[int], *, now: datetime) -> dict[int, Decimal]:
    """Each entity's loop spend in the calendar month holding ``now``: {entity id: Decimal} for those that spent.

    Three grouped statements for them all, each one pass over the month's rows (no per-cycle subquery): the
    proposer's spend of the month's cycles, their replays' runs and gradings, and the watch's exempt gradings
    whose reason names one of those cycles.
    """
    ids = sorted(set(entity_ids))
    if not ids:
        return {}
    start, end = month_of(now)
    cycles = opened_in(start, end).filter(entity_id__in=ids)
    money = MoneyField()
    totals: dict[int, Decimal] = {}

    def add(rows: Any) -> None:
        for pk, *amounts in rows:
            totals[pk] = totals.get(pk, ZERO) + sum((a or ZERO for a in amounts), ZERO)

    add(
        cycles.order_by()
        .values("entity_id")
        .annotate(t=Sum("spent_usd", output_field=money))
        .values_list("entity_id", "t")
    )
    add(
        Replay.objects.filter(round__cycle__in=cycles.values("pk"))
        .order_by()
        .values("round__cycle__entity_id")
        .annotate(
            run=Sum("execution__cost_usd", output_field=money),
            judge=Sum("execution__grade__cost_usd", output_field=money),
        )
        .values_list("round__cycle__entity_id", "run", "judge")
    )
    reasons = cycles.annotate(
        watch_reason=Concat(Value(WATCH_REASON), Cast("pk", output_field=CharField()), output_field=CharField())
    ).values("watch_reason")
    add(
        Grade.objects.filter(
            entity_id__in=ids, booked_at__gte=start, reason__startswith=WATCH_REASON, reason__in=reasons
        )
        .order_by()
        .values("entity_id")
        .annotate(t=Sum("cost_usd", output_field=money))
        .values_list("entity_id", "t")
    )
    return {pk: total for pk, total in totals.items() if total}


# --- The monthly ceiling ------------------------------------------------------------------


def month_ceiling(entity: Entity) -> Decimal | None:
    """The entity's ``loop.budget.maxUsdPerMonth`` as a Decimal, or None (no ceiling, the engine default)."""
    budget = ((entity.terms or {}).get("loop") or {}).get("budget") or {}
    value = budget.get("maxUsdPerMonth")
    return None if value is None else Decimal(str(value))


def turns_at(now: datetime) -> datetime:
    """When the month holding ``now`` ends: the instant new cycles may open again."""
    return month_of(now)[1]


def month_words(spent: Decimal, ceiling: Decimal, now: datetime) -> str:
    """The refusal's sentence: what the month's cycles cost against the ceiling, and when the month turns."""
    turn = timezone.localtime(turns_at(now))
    return (
        f"maxUsdPerMonth: the loop spent {usd_text(spent)} on this entity this month, the brain's ceiling is "
        f"{usd_text(ceiling)} (loop.budget.maxUsdPerMonth); new cycles open again on {turn:%b} {turn.day}"
    )


def ceiling_sentence(refusal: str) -> str:
    """The refusal as the fleet and needs-you say it to a person: a sentence, not a row's reason."""
    return "Monthly spend ceiling reached: " + refusal.removeprefix("maxUsdPerMonth: ") + "."


def month_refusals(entities: Iterable[Entity], *, now: datetime) -> dict[int, str]:
    """{entity id: the refusal} for each of ``entities`` whose month's loop spend reached its ceiling.

    No query when no entity has a ceiling; else one for them all (``spent_many``).
    """
    return _reached({e.pk: c for e in entities if (c := month_ceiling(e)) is not None}, now)


def month_refusals_in(scope: QuerySet[Entity], *, now: datetime) -> dict[int, str]:
    """``month_refusals`` of every entity of ``scope`` (a queryset) without reading the entities whole.

    One statement reads each entity's ceiling from the column the database keeps from its terms
    (``Entity.loop_month_ceiling``: no entity's terms unpacked; nothing more when no tier writes one); when
    some are set, one more sums the month's cycles of those entities (``spent_many``).
    """
    from singularity import written

    rows = written.rows_compiled_once(
        ("month_ceilings", written.key_of(scope)),
        lambda: (
            scope.filter(loop_month_ceiling__isnull=False)
            .exclude(loop_month_ceiling="null")  # SQLite's ->> reads a JSON null as the text null
            .values_list("pk", "loop_month_ceiling")
        ),
    )
    return _reached({pk: Decimal(str(text)) for pk, text in rows}, now)


def _reached(ceilings: dict[int, Decimal], now: datetime) -> dict[int, str]:
    """{entity id: the refusal} of the ``ceilings`` their month's spend reached (one query, none for no ceiling)."""
    if not ceilings:
        return {}
    spent = spent_many(ceilings, now=now)
    return {
        pk: month_words(spent.get(pk, ZERO), limit, now)
        for pk, limit in ceilings.items()
        if spent.get(pk, ZERO) >= limit
    }


def month_refusal(entity: Entity, *, now: datetime) -> str | None:
    """The refusal when ``entity``'s loop spend this month reached ``loop.budget.maxUsdPerMonth``, else None."""
    return month_refusals([entity], now=now).get(entity.pk)
