"""A cycle row's shared facts: its terms, its live claim, the ceilings, its phase moves and its spend (seed 003).

Every stage of the loop and every steering module reads these; none of them
decides anything. The live claim is ``Cycle.claim`` — the entity's id on the
cycle that holds it, unique in the database — so racing producers, on any
number of workers, make one live cycle. A round waiting on a person's decide
or retry card holds no claim (an unanswered card cannot freeze the entity);
accepting it takes the claim back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.utils import timezone

from evolution.core import outcomes
from evolution.models import Cycle, Round
from grading.models import Entity
from singularity.fields import MoneyField

#: Producers whose analyses the seed exempts from cooldownHours and maxAnalysesPerDay.
EXEMPT_ORIGINS = frozenset({Cycle.Origin.REQUEST, Cycle.Origin.IDEA})


NOTICE_PRODUCER = "loop"
#: The words a settle's reason carries when the kill switch ended the cycle (no lesson: a call about the loop).
KILL_SWITCH_MARKS = ("loop was switched off", "kill switch")


@dataclass(frozen=True)
class Opened:
    """What an attempt to open a cycle came to: the cycle (new, existing or the refusal row), why, its first round."""

    cycle: Cycle | None
    opened: bool
    reason: str
    first_round: Round | None = None


# --- Terms --------------------------------------------------------------------


def terms_of(entity: Entity) -> dict[str, Any]:
    """The entity's resolved terms ({"evaluation", "loop", ...}) as the last brain sync stored them."""
    return entity.terms or {}


def loop_terms(entity: Entity) -> dict[str, Any]:
    return terms_of(entity).get("loop") or {}


def cooldown(loop: dict[str, Any], *, regressed: bool) -> timedelta:
    """The rest after a settle: the declared cooldownHours for both cases, else 6 h (24 h after a regression)."""
    declared = loop.get("cooldownHours")
    if declared is not None:
        return timedelta(hours=float(declared))
    return timedelta(hours=24 if regressed else 6)


def when(instant: datetime) -> str:
    """An instant for a person in the site's one format: "2026-11-30 14:05 UTC" in the project's time zone."""
    from singularity.display import instant_text

    return instant_text(instant)


# --- The claim and the ceilings ----------------------------------------------


def _live(entity: Entity) -> Cycle | None:
    return Cycle.objects.filter(claim=entity.pk).first()


#: ``holder`` not given: read the claim's holder.
UNREAD: Any = object()


def live_refusal(entity: Entity, *, holder: Cycle | None = UNREAD) -> str | None:
    """The sentence when another cycle holds the entity (one live cycle per entity), else None.

    ``holder`` is the cycle holding the entity's claim (None: no cycle does) when the caller already read it.
    """
    if holder is UNREAD:
        holder = _live(entity)
    if holder is None:
        return None
    if holder.phase == Cycle.Phase.REVERTING:
        revert = holder.rounds.exclude(revert_pr_number=None).order_by("-number").first()
        number = f"PR #{revert.revert_pr_number}" if revert else "its PR"
        return f"waiting on the revert of cycle {holder.pk} ({number})"
    return f"cycle {holder.pk} is live ({outcomes.phase_label(holder.phase)})"


def ceiling_refusal(entity: Entity, *, now: datetime) -> str | None:
    """The sentence when cooldownHours or maxAnalysesPerDay refuses an ordinary analysis now, else None.

    Both bounds count only analyses that ran: a refusal costs nothing and starts no rest. maxAnalysesPerDay counts
    proposer calls (R7.6): a cycle's first analysis and each refinement or Retry round opened since.
    """
    return ceilings_many([entity], now=now).get(entity.pk)


#: Each entity's newest settled analysis (when, how), its analyses started after an instant and the later rounds
#: (refinements, Retry rounds: each one more proposer call, R7.6) opened after it, in one statement: correlated
#: subqueries over ``(entity, -started_at)``, ``(entity, status, -completed_at)`` and each live or recent cycle's
#: rounds (``{ids}``: the entities, ``among``; the instant is given twice).
CEILINGS = """
SELECT e.id,
    (SELECT c.completed_at FROM evolution_cycle c
     WHERE c.analysed AND c.entity_id = e.id AND c.completed_at IS NOT NULL ORDER BY c.completed_at DESC LIMIT 1),
    (SELECT c.status FROM evolution_cycle c
     WHERE c.analysed AND c.entity_id = e.id AND c.completed_at IS NOT NULL ORDER BY c.completed_at DESC LIMIT 1),
    (SELECT COUNT(*) FROM evolution_cycle c WHERE c.analysed AND c.entity_id = e.id AND c.started_at > %s),
    (SELECT COUNT(*) FROM evolution_round r JOIN evolution_cycle c ON c.id = r.cycle_id
     WHERE c.analysed AND c.entity_id = e.id AND (c.completed_at IS NULL OR c.completed_at > %s)
       AND r.number > 1 AND r.created_at > %s)
FROM grading_entity e WHERE e.id {ids}
"""


def among(ids: list[Any]) -> tuple[str, list[Any]]:
    """A written-out statement's "is one of ``ids``" and its parameters: ``= ANY(%s)`` of one array on Postgres (one
    statement text whatever their number, so the driver converts it once), ``IN (%s, …)`` elsewhere."""
    from django.db import connection

    if connection.vendor == "postgresql":
        return "= ANY(%s)", [list(ids)]
    return f"IN ({', '.join(['%s'] * len(ids))})", list(ids)


def ceilings_many(entities: list[Entity], *, now: datetime) -> dict[int, str]:
    """``ceiling_refusal`` of each of ``entities`` (only the refused are keys), in one query for them all.

    Each entity's newest settled analysis and its analyses of the last 24 hours are correlated subqueries
    over ``(entity, -started_at)`` and ``(entity, status, -completed_at)``: the cost follows the entities
    asked about, not their history. The statement is written out (``CEILINGS``), not built by the ORM: a
    batch of landings asks it every time, and building its three subqueries cost more than running it.
    """
    from django.db import connection

    if not entities:
        return {}
    ids = sorted({e.pk for e in entities})
    field = Cycle._meta.get_field("completed_at")
    column = field.get_col(Cycle._meta.db_table)
    converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
    since = connection.ops.adapt_datetimefield_value(now - timedelta(hours=24))
    with connection.cursor() as cursor:
        among_ids, params = among(ids)
        cursor.execute(CEILINGS.format(ids=among_ids), [since, since, since, *params])
        rows = cursor.fetchall()
    facts = {}
    for pk, at, status, n, later_rounds in rows:
        for convert in converters:
            at = convert(at, column, connection)
        facts[pk] = (at, status or "", (n or 0) + (later_rounds or 0))
    answers: dict[int, str] = {}
    for entity in entities:
        at, status, n = facts.get(entity.pk, (None, "", 0))
        why = ceiling_words(loop_terms(entity), at, status, n, now)
        if why:
            answers[entity.pk] = why
    return answers


def ceiling_words(loop: dict[str, Any], last_at: datetime | None, last_status: str, ran: int, now: datetime) -> str:
    """Why the ceilings refuse an analysis now ("" when they do not): the rest after the last settle, the count."""
    if last_at is not None:
        rest = cooldown(loop, regressed=last_status == Cycle.Status.REGRESSED)
        until = last_at + rest
        if until > now:
            why = "a regressed settle" if last_status == Cycle.Status.REGRESSED else "a settle"
            return f"cooldown: rests until {when(until)} ({rest.total_seconds() / 3600:g} h after {why})"
    ceiling = loop.get("maxAnalysesPerDay", 3)
    if ceiling is not None and ran >= int(ceiling):
        return f"maxAnalysesPerDay: {ran} analyses in the last 24 hours (ceiling {ceiling})"
    return ""


# --- Moving ------------------------------------------------------------------


def advance(cycle: Cycle, phase: str, **fields: Any) -> Cycle:
    """Move ``cycle`` to ``phase`` (and set ``fields``), stamping its last movement."""
    now = fields.pop("now", None) or timezone.now()
    values = {"phase": phase, "moved_at": now, **fields}
    Cycle.objects.filter(pk=cycle.pk).update(**values)
    for name, value in values.items():
        setattr(cycle, name, value)
    return cycle


def take_claim(cycle: Cycle) -> bool:
    """Take the entity's live claim for ``cycle``; False when another cycle holds it."""
    if cycle.claim == cycle.entity_id:
        return True
    try:
        with transaction.atomic():
            Cycle.objects.filter(pk=cycle.pk).update(claim=cycle.entity_id)
    except IntegrityError:
        return False
    cycle.claim = cycle.entity_id
    return True


def release_claim(cycle: Cycle) -> None:
    Cycle.objects.filter(pk=cycle.pk).update(claim=None)
    cycle.claim = None


def merged_round(cycle: Cycle) -> Round | None:
    """The round whose PR merged (at most one per cycle)."""
    return cycle.rounds.exclude(merge_sha="").order_by("-number").first()


def add_spend(cycle: Cycle, amount: Any) -> None:
    """Add an agent's cost to what the cycle spent."""
    if amount:
        # The amount goes through the column's own conversion (integer units on SQLite), so the sum stays exact.
        exact = Value(Decimal(amount), output_field=MoneyField())
        Cycle.objects.filter(pk=cycle.pk).update(spent_usd=F("spent_usd") + exact)
        cycle.refresh_from_db(fields=["spent_usd"])


def live_cycles(entity_ids: list[int]) -> dict[int, Cycle]:
    """The cycle holding each entity's claim, for the entities that have one."""
    return {c.claim: c for c in Cycle.objects.filter(claim__in=entity_ids)}


def watching(entity_ids: list[int]) -> set[int]:
    """The entities among ``entity_ids`` whose cycle is watching a shipped change."""
    return set(
        Cycle.objects.filter(Q(entity_id__in=entity_ids), phase=Cycle.Phase.WATCHING).values_list(
            "entity_id", flat=True
        )
    )
