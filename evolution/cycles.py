"""Opening and settling cycles: the one live claim per entity, the ceilings, the settle (seed 003).

``open_cycle`` is the one door every producer uses — a landing grade, a
scheduled look, "Analyze now", an idea. It refuses loudly: a refusal is a
skipped cycle row carrying the reason (consecutive refusals of one kind are
folded into one row, see docs/decisions.md), and costs no cooldown and no
daily slot. ``settle`` is the one way a cycle ends: it writes the terminal,
releases the claim (or keeps it while a revert is followed), writes the
lesson and tells people.

The live claim is ``Cycle.claim`` — the entity's id on the cycle that holds
it, unique in the database — so racing producers, on any number of workers,
make one live cycle. A round waiting on a person's decide or retry card holds
no claim (an unanswered card cannot freeze the entity); accepting it takes
the claim back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.utils import timezone

from evolution.models import Cycle, Round
from grading.models import Entity, Execution, Grade
from singularity.fields import MoneyField

log = logging.getLogger(__name__)

#: Producers whose analyses the seed exempts from cooldownHours and maxAnalysesPerDay.
EXEMPT_ORIGINS = frozenset({Cycle.Origin.REQUEST, Cycle.Origin.IDEA})

NOTICE_PRODUCER = "loop"


@dataclass(frozen=True)
class Opened:
    """What an attempt to open a cycle came to: the cycle (new, existing or the refusal row), and why."""

    cycle: Cycle | None
    opened: bool
    reason: str


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
    """An instant for a person: "Nov 30, 14:05 UTC" in the project's time zone."""
    local = timezone.localtime(instant)
    return f"{local:%b} {local.day}, {local:%H:%M} {local.tzname()}"


# --- Refusals -----------------------------------------------------------------


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
    return f"cycle {holder.pk} is live ({holder.get_phase_display()})"


def ceiling_refusal(entity: Entity, *, now: datetime) -> str | None:
    """The sentence when cooldownHours or maxAnalysesPerDay refuses an ordinary analysis now, else None.

    Both bounds count only analyses that ran: a refusal costs nothing and starts no rest.
    """
    loop = loop_terms(entity)
    last = (
        Cycle.objects.filter(entity=entity, analysed=True)
        .exclude(completed_at=None)
        .order_by("-completed_at")
        .only("completed_at", "status")
        .first()
    )
    if last is not None:
        rest = cooldown(loop, regressed=last.status == Cycle.Status.REGRESSED)
        until = last.completed_at + rest
        if until > now:
            why = "a regressed settle" if last.status == Cycle.Status.REGRESSED else "a settle"
            return f"cooldown: rests until {when(until)} ({rest.total_seconds() / 3600:g} h after {why})"
    ceiling = loop.get("maxAnalysesPerDay", 3)
    if ceiling is not None:
        ran = Cycle.objects.filter(entity=entity, analysed=True, started_at__gt=now - timedelta(hours=24)).count()
        if ran >= int(ceiling):
            return f"maxAnalysesPerDay: {ran} analyses in the last 24 hours (ceiling {ceiling})"
    return None


def refusal(entity: Entity, *, origin: str, now: datetime, holder: Cycle | None = UNREAD) -> str | None:
    """Why the entity cannot open a cycle from ``origin`` now, or None when it can (``holder``: see live_refusal)."""
    if not entity.present or entity.load_error:
        return f"{entity} does not load: {entity.load_error or 'it is gone from the brain'}"
    if not entity.loop_enabled:
        return f"the loop is off for {entity}"
    if not entity.evaluation_enabled:
        return f"grading is off for {entity}: the loop reads graded runs only"
    live = live_refusal(entity, holder=holder)
    if live:
        return live
    from evolution.supervision import hold_refusal

    held = hold_refusal(entity)
    if held:
        return held
    if (loop_terms(entity).get("proposer") or {}).get("pipeline"):
        from evolution.proposer import refusal as proposer_refusal

        proposer = proposer_refusal(entity)
        if proposer:
            return proposer
    if origin not in EXEMPT_ORIGINS:
        return ceiling_refusal(entity, now=now)
    return None


def _kind_of(reason: str) -> str:
    return reason.split(":", 1)[0].split(" (", 1)[0][:40]


#: Fold a refusal into the entity's newest cycle when that is a refusal of the same kind (one statement).
FOLD_REFUSAL = """
UPDATE evolution_cycle SET reason = %s, refusals = refusals + 1, completed_at = %s, moved_at = %s
WHERE id = (SELECT id FROM evolution_cycle WHERE entity_id = %s ORDER BY started_at DESC, id DESC LIMIT 1)
  AND analysed = %s AND status = %s AND reason LIKE %s ESCAPE '!'
"""


def _fold_refusal(entity: Entity, reason: str, now: datetime) -> bool:
    """Fold ``reason`` into the entity's newest refusal row of the same kind; return whether one was there."""
    from django.db import connection

    kind = _kind_of(reason).replace("!", "!!").replace("%", "!%").replace("_", "!_")
    moment = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(FOLD_REFUSAL, [reason, moment, moment, entity.pk, False, Cycle.Status.SKIPPED.value, f"{kind}%"])
        return cursor.rowcount > 0


def record_refusal(
    entity: Entity, *, origin: str, reason: str, now: datetime, anchor: Execution | None = None
) -> Cycle | None:
    """Record a refused analysis as a skipped cycle; a run of refusals of one kind is folded into one row.

    Folding is one conditional UPDATE of the entity's newest cycle (when it is a refusal of the same kind):
    it returns None then; a new refusal row is returned.
    """
    if _fold_refusal(entity, reason, now):
        return None
    return Cycle.objects.create(
        entity=entity,
        key=f"{cycle_key(entity, origin, anchor, now)}:refused",
        origin=origin,
        phase=Cycle.Phase.SETTLED,
        status=Cycle.Status.SKIPPED,
        reason=reason,
        analysed=False,
        refusals=1,
        anchor=anchor,
        window={},
        started_at=now,
        completed_at=now,
        moved_at=now,
    )


# --- Opening ------------------------------------------------------------------


def cycle_key(entity: Entity, origin: str, anchor: Execution | None, now: datetime, *, idea: Any = None) -> str:
    """``<kind>:<id>:<origin>:<anchor run or instant>`` — one grade delivered twice opens one cycle.

    An idea's cycle is keyed ``<kind>:<id>:idea:<idea id>:<instant>``: an ask that stepped aside does not use
    the idea up, and only one cycle can take it (the take is conditional on the idea still being queued).
    """
    if idea is not None:
        return f"{entity.target_kind}:{entity.slug}:idea:{idea.pk}:{now.isoformat()}"
    mark = str(anchor.pk) if anchor is not None else now.isoformat()
    return f"{entity.target_kind}:{entity.slug}:{origin}:{mark}"


def pinned_judge(entity: Entity, anchor: Execution | None) -> dict[str, Any]:
    """The judge the cycle pins: the anchor's grade's, else the entity's newest graded run's."""
    grades = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED)
    if anchor is not None:
        grade = grades.filter(execution_id=anchor.pk).only("judge").first()
        if grade is not None:
            return grade.judge or {}
    newest = grades.order_by("-graded_at").only("judge").first()
    return (newest.judge or {}) if newest is not None else {}


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

    Returns Opened(cycle, True, "opened") for a new cycle; the cycle already
    opened under the same key (a grade delivered twice) with opened False;
    or the refusal and its reason (with the refusal row when a new one was
    written, None when it was folded into the previous one).

    ``known`` carries what a batch caller already read for the entity:
    ``holder`` (the cycle holding its claim, or None) and ``idea_checked``
    (no queued idea), so one landing costs no second read of them.
    """
    now = now or timezone.now()
    known = known or {}
    if idea is None and origin != Cycle.Origin.IDEA and not known.get("idea_checked"):
        # Whoever opens the next cycle opens it on the oldest queued idea.
        from evolution.ideas import next_idea

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
        from evolution.ideas import unsettled_refusal

        waiting = unsettled_refusal(entity)
        if waiting:
            log.info("loop: %s: idea %s waits: %s", entity, idea.pk, waiting)
            return Opened(None, False, waiting)
    why = refusal(entity, origin=origin, now=now, holder=holder)
    if why:
        log.info("loop: %s: no cycle (%s): %s", entity, origin, why)
        return Opened(record_refusal(entity, origin=origin, reason=why, now=now, anchor=anchor), False, why)
    if window is None:
        from evolution.trigger import request_window

        window = request_window(entity, now=now)
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
                judge=pinned_judge(entity, anchor),
                terms=terms_of(entity),
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                idea=idea,
                started_at=now,
                moved_at=now,
            )
            first = Round.objects.create(cycle=cycle, number=1, status=Round.Status.ANALYSING, created_at=now)
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
                return Opened(None, False, "the idea was withdrawn before its cycle started")
            if state == Idea.Status.TAKEN:
                return Opened(None, False, "another cycle took the idea first")
        why = live_refusal(entity) or "another cycle took the entity first"
        return Opened(record_refusal(entity, origin=origin, reason=why, now=now, anchor=anchor), False, why)
    log.info("loop: %s: cycle %s opened (%s)", entity, cycle.pk, origin)
    _enqueue("analyse_round", first.pk)
    return Opened(cycle, True, "opened")


def _take_idea(idea: Any, cycle: Cycle) -> bool:
    """Give ``idea`` to ``cycle`` if it is still queued; False when another cycle took it first."""
    from evolution.models import Idea

    return bool(
        Idea.objects.filter(pk=idea.pk, status=Idea.Status.QUEUED).update(status=Idea.Status.TAKEN, cycle=cycle)
    )


def _enqueue(task: str, round_id: int) -> None:
    """Start a round's next step on a worker once the transaction that asked for it has committed."""
    from evolution import tasks

    transaction.on_commit(lambda: getattr(tasks, task).delay(round_id))


# --- Moving and settling ----------------------------------------------------


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


def settle(
    cycle: Cycle,
    status: str,
    *,
    reason: str = "",
    watch_verdict: dict[str, Any] | None = None,
    now: datetime | None = None,
    lesson: bool = True,
) -> Cycle:
    """End ``cycle`` at ``status`` (validated, regressed, unvalidated, skipped, failed) and return it.

    A regressed change opens its revert PR and the cycle keeps the entity's
    claim while the revert is followed (phase "reverting"); every other
    settle releases it. The lesson is written (``lesson=False`` for the kill
    switch and a broken unattended round); a lesson the archive refused is
    kept on ``lesson_error``. A second settle of a settled cycle does nothing.
    """
    now = now or timezone.now()
    with transaction.atomic():
        fresh = Cycle.objects.select_for_update().get(pk=cycle.pk)
        if fresh.status:
            return fresh
        fields: dict[str, Any] = {
            "status": status,
            "reason": reason,
            "completed_at": now,
            "moved_at": now,
            "next_poll_at": None,
        }
        if watch_verdict is not None:
            fields["watch_verdict"] = watch_verdict
        Cycle.objects.filter(pk=cycle.pk).update(**fields)
        for name, value in fields.items():
            setattr(fresh, name, value)
        by_policy = status == Cycle.Status.UNVALIDATED and _revert_unproven(fresh)
        reverting = (status == Cycle.Status.REGRESSED or by_policy) and _open_revert(fresh, now)
        if reverting and by_policy:
            Cycle.objects.filter(pk=fresh.pk).update(reverted_by_policy=True)
            fresh.reverted_by_policy = True
        if not reverting:
            advance(fresh, Cycle.Phase.SETTLED, claim=None, now=now)
        Round.objects.filter(cycle=fresh, status=Round.Status.APPLIED).update(status=Round.Status.CLOSED)
        if lesson:
            _write_lesson(fresh)
    _notify_settled(fresh)
    if status in (Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED, Cycle.Status.VALIDATED):
        from evolution import autonomy

        autonomy.announce_if_crossed(fresh)
    from evolution import ideas

    ideas.hear_back(fresh)
    cycle.__dict__.update({k: v for k, v in fresh.__dict__.items() if not k.startswith("_")})
    return fresh


def _revert_unproven(cycle: Cycle) -> bool:
    """watch.onInconclusive: revert — an unproven shipped change is undone (not read under watch.mode: none)."""
    watch = loop_terms(cycle.entity).get("watch") or {}
    return watch.get("onInconclusive") == "revert" and watch.get("mode") != "none" and merged_round(cycle) is not None


def _open_revert(cycle: Cycle, now: datetime) -> bool:
    """Open the mechanical revert of a regressed change; return whether the cycle now follows one."""
    shipped = merged_round(cycle)
    if shipped is None:
        return False
    from evolution.forges import ForgeError
    from evolution.revert import open_revert

    try:
        pull = open_revert(shipped)
    except ForgeError as exc:
        log.error("loop: %s: the revert of cycle %s could not be opened: %s", cycle.entity, cycle.pk, exc)
        Round.objects.filter(pk=shipped.pk).update(revert_outcome="failed")
        Cycle.objects.filter(pk=cycle.pk).update(reason=f"{cycle.reason}; the revert PR could not be opened: {exc}")
        return False
    deadline_h = float((loop_terms(cycle.entity).get("watch") or {}).get("deadlineHours") or 336)
    Round.objects.filter(pk=shipped.pk).update(
        revert_pr_number=pull.number,
        revert_pr_url=pull.url,
        revert_opened_at=now,
        revert_deadline=now + timedelta(hours=deadline_h),
        revert_merge_gate="human",
    )
    advance(cycle, Cycle.Phase.REVERTING, next_poll_at=now + timedelta(seconds=120), poll_interval_s=120, now=now)
    transaction.on_commit(lambda: _arm_revert(cycle.pk, shipped.pk, pull))
    return True


def _arm_revert(cycle_id: int, round_id: int, pull: Any) -> None:
    """A revert inherits the merge gate: under merge: auto its auto-merge is armed (the breaker never vetoes an undo)."""
    from evolution import autonomy
    from evolution.forges import ForgeError, get_forge

    cycle = Cycle.objects.select_related("entity").get(pk=cycle_id)
    if autonomy.revert_gate(cycle.entity) != autonomy.AUTO:
        return
    method = autonomy.policy(cycle.entity).get("mergeMethod") or "merge"
    Round.objects.filter(pk=round_id).update(revert_merge_gate=autonomy.AUTO)
    try:
        get_forge().arm_auto_merge(pull.number, method=method, sha=pull.head_sha, by=cycle.actor)
    except ForgeError as exc:
        Round.objects.filter(pk=round_id).update(revert_merge_gate=autonomy.HUMAN)
        from hitl.actions import post_notice

        post_notice(
            producer=NOTICE_PRODUCER,
            kind="merge-demoted",
            title=f"{cycle.entity.name or cycle.entity.slug}: the revert PR #{pull.number} waits on a person",
            text=str(exc),
            subject=f"cycle {cycle.pk}",
        )


def _write_lesson(cycle: Cycle) -> None:
    from evolution import lessons

    try:
        with transaction.atomic():
            lessons.write_for(cycle)
            lessons.credit(cycle)
    except Exception as exc:  # noqa: BLE001 - a lesson the archive refused is kept on the row, never dropped silently
        log.exception("loop: the lesson of cycle %s was refused", cycle.pk)
        error = f"{type(exc).__name__}: {exc}"
        Cycle.objects.filter(pk=cycle.pk).update(lesson_error=error)
        cycle.lesson_error = error


def _notify_settled(cycle: Cycle) -> None:
    from hitl.actions import post_notice

    words = {
        Cycle.Status.VALIDATED: "kept: validated",
        Cycle.Status.REGRESSED: "regressed: revert opened" if cycle.phase == Cycle.Phase.REVERTING else "regressed",
        Cycle.Status.UNVALIDATED: "unverified: kept without proof",
        Cycle.Status.SKIPPED: "skipped",
        Cycle.Status.FAILED: "failed",
    }
    if cycle.status == Cycle.Status.SKIPPED and not cycle.analysed:
        return
    post_notice(
        producer=NOTICE_PRODUCER,
        kind="settled",
        title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk} {words.get(cycle.status, cycle.status)}",
        text=cycle.reason,
        url=f"{settings.SINGULARITY_PUBLIC_URL}{cycle.get_absolute_url()}" if settings.SINGULARITY_PUBLIC_URL else "",
        subject=f"cycle {cycle.pk}",
    )


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
