"""Opening: the one door every producer uses — the gates, the claim, the ceilings and the judge pin (seed 003).

``open_cycle`` refuses loudly: a refusal is a skipped cycle row carrying the
reason (consecutive refusals of one kind are folded into one row, see
docs/decisions.md), and costs no cooldown and no daily slot. An opened cycle
holds the entity's live claim (``Cycle.claim``, unique in the database) so
racing producers on any number of workers make one live cycle; its first
round waits for the analysis, which the machine starts after commit.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from evolution.core import notify as outbound
from evolution.core.cycles import (
    EXEMPT_ORIGINS,
    UNREAD,
    Opened,
    ceiling_refusal,
    live_refusal,
    loop_terms,
    terms_of,
)
from evolution.core.spend import month_refusal, month_refusals
from evolution.loop.freeze import FreezeRefused, freeze
from evolution.loop.pipelines import refusal as proposer_refusal
from evolution.models import Cycle, Round
from evolution.presets.resolve import request_window
from evolution.steering import groups
from evolution.steering.ideas import next_idea, unsettled_refusal
from evolution.steering.supervision import hold_refusal
from grading.current_judge import JudgeUnresolved, current_judge
from grading.models import Entity, Execution

log = logging.getLogger(__name__)


def _row_refusal(entity: Entity) -> str | None:
    """What the entity's own row refuses: it does not load, its loop or its grading is off."""
    if not entity.present or entity.load_error:
        return f"{entity} does not load: {entity.load_error or 'it is gone from the brain'}"
    if not entity.loop_enabled:
        return f"the loop is off for {entity}"
    if not entity.evaluation_enabled:
        return f"grading is off for {entity}: the loop reads graded runs only"
    return None


def refusals_many(
    entities: list[Entity], *, origin: str, now: datetime, holders: dict[int, Cycle | None]
) -> dict[int, str | None]:
    """``refusal`` for many entities at once (a batch of landings): {entity id: why, or None when it may open}.

    ``holders`` are the claims' holders the caller read. The holds, the lock groups and the ceilings are
    read once for them all (a fixed number of queries); the gates are asked in ``refusal``'s order.
    """
    from evolution.core.cycles import ceilings_many
    from evolution.steering.supervision import holds_many

    answers: dict[int, str | None] = {}
    rest = []
    for entity in entities:
        why = _row_refusal(entity) or live_refusal(entity, holder=holders.get(entity.pk))
        if why:
            answers[entity.pk] = why
        else:
            rest.append(entity)
    held, grouped = holds_many(rest), groups.holders_many(rest)
    ceilings = ceilings_many(rest, now=now) if origin not in EXEMPT_ORIGINS else {}
    monthly = month_refusals(rest, now=now)  # no origin is exempt from a spend ceiling
    for entity in rest:
        why = held.get(entity.pk) or grouped.get(entity.pk)
        if not why and (loop_terms(entity).get("proposer") or {}).get("pipeline"):
            why = proposer_refusal(entity)
        answers[entity.pk] = (
            why or ceilings.get(entity.pk) or outbound.month_reached(entity, monthly.get(entity.pk), now)
        )
    return answers


def refusal(entity: Entity, *, origin: str, now: datetime, holder: Cycle | None = UNREAD) -> str | None:
    """Why the entity cannot open a cycle from ``origin`` now, or None when it can (``holder``: see live_refusal)."""
    row = _row_refusal(entity)
    if row:
        return row
    live = live_refusal(entity, holder=holder)
    if live:
        return live
    held = hold_refusal(entity)
    if held:
        return held
    grouped = groups.refusal(entity)
    if grouped:
        return grouped
    if (loop_terms(entity).get("proposer") or {}).get("pipeline"):
        proposer = proposer_refusal(entity)
        if proposer:
            return proposer
    if origin not in EXEMPT_ORIGINS:
        ceiling = ceiling_refusal(entity, now=now)
        if ceiling:
            return ceiling
    # loop.budget.maxUsdPerMonth (issue 16): a spend ceiling, so no origin is exempt from it (as maxUsdPerRun).
    return outbound.month_reached(entity, month_refusal(entity, now=now), now)


def kind_of(reason: str) -> str:
    """A refusal's kind (its words before the first colon): consecutive refusals of one kind share a row."""
    return reason.split(":", 1)[0].split(" (", 1)[0][:40]


#: Fold a refusal into the entity's newest cycle when that is a refusal of the same kind (one statement).
FOLD_REFUSAL = """
UPDATE evolution_cycle SET reason = %s, refusals = refusals + %s, completed_at = %s, moved_at = %s
WHERE id = (SELECT id FROM evolution_cycle WHERE entity_id = %s ORDER BY started_at DESC, id DESC LIMIT 1)
  AND analysed = %s AND status = %s AND reason LIKE %s ESCAPE '!'
"""


def _fold_refusal(entity: Entity, reason: str, now: datetime, times: int = 1) -> bool:
    """Fold ``times`` refusals for ``reason`` into the entity's newest refusal row of the same kind; return whether
    one was there."""
    from django.db import connection

    moment = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(
            FOLD_REFUSAL,
            [reason, times, moment, moment, entity.pk, False, Cycle.Status.SKIPPED.value, _like_kind(reason)],
        )
        return cursor.rowcount > 0


def record_refusal(
    entity: Entity, *, origin: str, reason: str, now: datetime, anchor: Execution | None = None, times: int = 1
) -> Cycle | None:
    """Record a refused analysis as a skipped cycle; a run of refusals of one kind is folded into one row.

    Folding is one conditional UPDATE of the entity's newest cycle (when it is a refusal of the same kind):
    it returns None then; a new refusal row is returned. ``times`` refusals of one batch fold at once.
    """
    if _fold_refusal(entity, reason, now, times):
        return None
    row = _refusal_row(entity, origin=origin, reason=reason, now=now, anchor=anchor, times=times)
    row.save(force_insert=True)
    return row


#: ``FOLD_REFUSAL`` for many entities at once, one row each (``{rows}``: "(%s, %s, %s, %s)" per entity, its id, the
#: reason, how many refusals and the kind's LIKE pattern); returns the entities whose newest cycle took the fold.
FOLD_REFUSALS = """
WITH v (entity, reason, times, kind) AS (VALUES {rows})
UPDATE evolution_cycle SET reason = v.reason, refusals = evolution_cycle.refusals + v.times, completed_at = %s,
    moved_at = %s
FROM v
WHERE evolution_cycle.id = (
        SELECT newest.id FROM evolution_cycle AS newest WHERE newest.entity_id = v.entity
        ORDER BY newest.started_at DESC, newest.id DESC LIMIT 1
    )
  AND evolution_cycle.analysed = %s AND evolution_cycle.status = %s AND evolution_cycle.reason LIKE v.kind ESCAPE '!'
RETURNING evolution_cycle.entity_id
"""


def _like_kind(reason: str) -> str:
    """The LIKE pattern a refusal of ``reason``'s kind folds into (its kind, escaped, then anything)."""
    return kind_of(reason).replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def record_refusals_many(
    refusals: dict[Entity, list[tuple[str, Execution | None, int]]], *, origin: str, now: datetime
) -> None:
    """``record_refusal`` for a batch: {entity: [(reason, anchor, times), …]}, each entity's refusals in order.

    Each entity's first refusal folds into its newest cycle when that is a refusal of the same kind, all in one
    statement (``FOLD_REFUSALS``, the same conditions ``FOLD_REFUSAL`` checks, each against that entity's newest
    row as the statement finds it); the first refusals that found none are inserted together. An entity's later
    refusals of the batch (another kind) are recorded one after another as alone.
    """
    from django.db import connection

    firsts = [(entity, found[0]) for entity, found in refusals.items() if found]
    if not firsts:
        return
    moment = connection.ops.adapt_datetimefield_value(now)
    values = ", ".join(["(%s, %s, %s, %s)"] * len(firsts))
    params: list[Any] = []
    for entity, (reason, _anchor, times) in firsts:
        params += [entity.pk, reason, times, _like_kind(reason)]
    params += [moment, moment, False, Cycle.Status.SKIPPED.value]
    with connection.cursor() as cursor:
        cursor.execute(FOLD_REFUSALS.format(rows=values), params)
        folded = {pk for (pk,) in cursor.fetchall()}
    rows = [
        _refusal_row(entity, origin=origin, reason=reason, now=now, anchor=anchor, times=times)
        for entity, (reason, anchor, times) in firsts
        if entity.pk not in folded
    ]
    if rows:
        # A row whose key is taken is this landing's refusal recorded already (a landing heard twice): it stands.
        Cycle.objects.bulk_create(rows, ignore_conflicts=True)
    for entity, found in refusals.items():
        for reason, anchor, times in found[1:]:
            record_refusal(entity, origin=origin, reason=reason, now=now, anchor=anchor, times=times)


def _refusal_row(
    entity: Entity, *, origin: str, reason: str, now: datetime, anchor: Execution | None, times: int
) -> Cycle:
    """A new refusal row (unsaved): a skipped cycle carrying the reason, ``times`` refusals folded in it."""
    return Cycle(
        entity=entity,
        key=f"{cycle_key(entity, origin, anchor, now)}:refused",
        origin=origin,
        phase=Cycle.Phase.SETTLED,
        status=Cycle.Status.SKIPPED,
        reason=reason,
        analysed=False,
        refusals=times,
        anchor=anchor,
        window={},
        started_at=now,
        completed_at=now,
        moved_at=now,
    )


def cycle_key(entity: Entity, origin: str, anchor: Execution | None, now: datetime, *, idea: Any = None) -> str:
    """``<kind>:<id>:<origin>:<anchor run or instant>`` — one grade delivered twice opens one cycle.

    An idea's cycle is keyed ``<kind>:<id>:idea:<idea id>:<instant>``: an ask that stepped aside does not use
    the idea up, and only one cycle can take it (the take is conditional on the idea still being queued).
    """
    if idea is not None:
        return f"{entity.target_kind}:{entity.slug}:idea:{idea.pk}:{now.isoformat()}"
    mark = str(anchor.pk) if anchor is not None else now.isoformat()
    return f"{entity.target_kind}:{entity.slug}:{origin}:{mark}"


def open_cycle(
    entity: Entity,
    *,
    origin: str,
    anchor: Execution | None = None,
    window: dict[str, Any] | None = None,
    requested_by: Any | None = None,
    idea: Any | None = None,
    now: datetime | None = None,
    known: dict[str, Any] | None = None,
) -> Opened:
    """Open a cycle for ``entity`` and start its first analysis, or record why not.

    Returns Opened(cycle, True, "opened", its first round) for a new cycle (the machine starts its analysis); the cycle already
    opened under the same key (a grade delivered twice) with opened False;
    or the refusal and its reason (with the refusal row when a new one was
    written, None when it was folded into the previous one).

    ``known`` carries what a batch caller already read for the entity:
    ``holder`` (the cycle holding its claim, or None), ``idea_checked``
    (no queued idea) and ``gates_checked`` (``refusals_many`` found no
    refusal), so one landing costs no second read of them.
    """
    now = now or timezone.now()
    known = known or {}
    if idea is None and origin != Cycle.Origin.IDEA and not known.get("idea_checked"):
        # Whoever opens the next cycle opens it on the oldest queued idea.
        idea = next_idea(entity)
    if idea is not None:
        origin = Cycle.Origin.IDEA
    key = cycle_key(entity, origin, anchor, now, idea=idea)
    if "holder" in known:
        # A batch read the claim's holder; a grade delivered twice meets its own cycle there (or the unique key).
        holder = known["holder"]
        if holder is not None and holder.key == key:
            return Opened(holder, False, f"cycle {holder.pk} was already opened on this")
    else:
        # The cycle already opened on this key and the one holding the entity's claim: one read for both.
        seen = list(Cycle.objects.filter(Q(key=key) | Q(claim=entity.pk)))
        existing = next((c for c in seen if c.key == key), None)
        if existing is not None:
            return Opened(existing, False, f"cycle {existing.pk} was already opened on this")
        holder = next((c for c in seen if c.claim == entity.pk), None)
    if idea is not None:
        # Ideas run strictly one after another: an idea waits even on a proposal whose card holds no claim,
        # and its waiting is the queue's own state, not a refused analysis (no row).
        waiting = unsettled_refusal(entity)
        if waiting:
            log.info("loop: %s: idea %s waits: %s", entity, idea.pk, waiting)
            return Opened(None, False, waiting)
    # A batch caller that asked refusals_many already knows the gates let it open (``gates_checked``).
    why = None if known.get("gates_checked") else refusal(entity, origin=origin, now=now, holder=holder)
    if why:
        log.info("loop: %s: no cycle (%s): %s", entity, origin, why)
        return Opened(record_refusal(entity, origin=origin, reason=why, now=now, anchor=anchor), False, why)
    if window is None:
        window = request_window(entity, now=now)
    try:
        judge = current_judge(entity)
    except JudgeUnresolved as exc:
        return _judge_unresolved(entity, origin=origin, anchor=anchor, window=window, now=now, error=str(exc))
    # Right after the judge, what the check will measure on: written once, never recomputed.
    try:
        frozen = freeze(Cycle(entity=entity, anchor=anchor, window=window, judge=judge), now=now)
    except FreezeRefused as exc:
        return _judge_unresolved(
            entity, origin=origin, anchor=anchor, window=window, now=now, error=str(exc), kind="freeze-refused"
        )
    try:
        with transaction.atomic():
            cycle = Cycle.objects.create(
                entity=entity,
                key=key,
                claim=entity.pk,
                origin=origin,
                phase=Cycle.Phase.ANALYSING,
                analysed=True,
                anchor=anchor,
                window=window,
                judge=judge,
                frozen=frozen,
                terms=terms_of(entity),
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                idea=idea,
                started_at=now,
                moved_at=now,
            )
            hours = float((terms_of(entity).get("loop") or {}).get("reviewDeadlineHours") or 72)
            first = Round.objects.create(
                cycle=cycle, number=1, status=Round.Status.ANALYSING, created_at=now, review_hours=hours
            )
            if idea is not None and not _take_idea(idea, cycle):
                raise IntegrityError(f"idea {idea.pk} was taken by another cycle")
    except IntegrityError:
        # A rival producer took the key or the entity's claim between our read and our insert.
        rival = Cycle.objects.filter(key=key).first()
        if rival is not None:
            return Opened(rival, False, f"cycle {rival.pk} was already opened on this")
        if idea is not None:
            from evolution.models import Idea

            state = Idea.objects.filter(pk=idea.pk).values_list("status", flat=True).first()
            if state == Idea.Status.WITHDRAWN:
                # The cycle on its way is recorded skipped (R18.14): no round, no proposer, no rest, no daily slot.
                why = "the idea was withdrawn before its cycle started"
                return Opened(record_refusal(entity, origin=origin, reason=why, now=now, anchor=anchor), False, why)
            if state == Idea.Status.TAKEN:
                return Opened(None, False, "another cycle took the idea first")
        why = live_refusal(entity) or "another cycle took the entity first"
        return Opened(record_refusal(entity, origin=origin, reason=why, now=now, anchor=anchor), False, why)
    log.info("loop: %s: cycle %s opened (%s)", entity, cycle.pk, origin)
    return Opened(cycle, True, "opened", first)


def _take_idea(idea: Any, cycle: Cycle) -> bool:
    """Give ``idea`` to ``cycle`` if it is still queued; False when another cycle took it first."""
    from evolution.models import Idea

    return bool(
        Idea.objects.filter(pk=idea.pk, status=Idea.Status.QUEUED).update(status=Idea.Status.TAKEN, cycle=cycle)
    )


def _judge_unresolved(
    entity: Entity,
    *,
    origin: str,
    anchor: Execution | None,
    window: dict[str, Any],
    now: datetime,
    error: str,
    kind: str = "judge-unresolved",
) -> Opened:
    """A judge that cannot be resolved (or a frozen set the brain will not yield, ``kind`` "freeze-refused") ends the
    proposal before anything is paid for or applied: the cycle's row settles skipped and a notice names the file
    (seed 003, "The judge is pinned to the cycle", "What a cycle freezes").
    """
    from evolution.core.cycles import NOTICE_PRODUCER
    from hitl.actions import post_notice

    reason = f"{error} — a change the loop cannot measure is a change it will not make; nothing was proposed"
    cycle, created = Cycle.objects.get_or_create(
        key=f"{cycle_key(entity, origin, anchor, now)}:{'judge' if kind == 'judge-unresolved' else 'freeze'}",
        defaults={
            "entity": entity,
            "origin": origin,
            "phase": Cycle.Phase.SETTLED,
            "status": Cycle.Status.SKIPPED,
            "reason": reason,
            "analysed": False,
            "anchor": anchor,
            "window": window,
            "started_at": now,
            "completed_at": now,
            "moved_at": now,
        },
    )
    if not created:
        return Opened(cycle, False, cycle.reason)
    what = "its judge cannot be resolved" if kind == "judge-unresolved" else "its check's inputs cannot be frozen"
    post_notice(
        producer=NOTICE_PRODUCER,
        kind=kind,
        title=f"{entity.name or entity.slug}: cycle {cycle.pk} set aside — {what}",
        text=reason,
        subject=f"cycle {cycle.pk}",
    )
    log.warning("loop: %s: cycle %s skipped: %s", entity, cycle.pk, error)
    return Opened(cycle, False, reason)
