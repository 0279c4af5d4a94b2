"""Booking a run's grading: at its terminal, on a person's rating, by hand, or because the loop needs a verdict.

A booking is a ``Grade`` row in status ``booked`` with ``due_at`` (the run's
end plus ``gradeAfterHours``). A sampled booking holds its ``maxPerDay`` slot
from the terminal on, even while the judge waits. Grading is enqueued after
commit when the booking is due now, and ``sweep_due`` enqueues the delayed
ones when their time comes; ``sweep_lost`` tells a queued booking from a
lost one — a backlog is left queued, a lost job is sent again, a grading
whose worker died is run again — and fails as "grading job lost" (giving its
slot back) only what stays lost. A reported batch is booked
in one pass (``on_terminal_many``), its ``method: none`` gradings done together
in the same process. Every function here is idempotent: asking twice books once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from grading.cards import maybe_card, maybe_card_many
from grading.grade import GRADE_TASK, grade_many, grade_now, insert_rows
from grading.models import Entity, Execution, Grade
from grading.sampling import calendar_day, decide, free_slot, max_per_day, method_of, rate_verdict, take_slots
from singularity.errors import ConfigError, StateError
from singularity.queue import enqueue

log = logging.getLogger(__name__)

Sampling = Execution.Sampling

LOST = "grading job lost"
DEFAULT_LOST_GRACE = timedelta(minutes=15)
#: The queue grading's jobs wait in (singularity.queues).
GRADING_QUEUE = "grading"
#: A booking re-sent on every sweep while the queue is empty is failed as lost this long past due.
GIVE_UP_AFTER = timedelta(hours=24)
#: A grading whose worker died is run again until it has been started this many times; then failed as lost.
MAX_ATTEMPTS = 3

#: Asked at every terminal: a check returning a reason (e.g. "watch:<cycle>") books the run exempt.
ExemptionCheck = Callable[[Execution], "str | None"]
_exemption_checks: list[ExemptionCheck] = []


class GradingOff(ConfigError):
    """The entity's grading is off (``evaluation.enabled: false``): nothing books a grade for it."""


def register_exemption(check: ExemptionCheck) -> ExemptionCheck:
    """Register a check asked at every terminal (the loop's watch uses it); return the check (usable as a decorator).

    A check that returns a reason books the run exempt: graded whatever the
    sample, holding no slot. Registering the same check twice registers it once.
    """
    if check not in _exemption_checks:
        _exemption_checks.append(check)
    return check


def unregister_exemption(check: ExemptionCheck) -> None:
    if check in _exemption_checks:
        _exemption_checks.remove(check)


def lag(entity: Entity) -> timedelta:
    """Return the entity's resolved ``gradeAfterHours`` as a timedelta (zero by default)."""
    hours = entity.evaluation().get("gradeAfterHours") or 0
    return timedelta(hours=float(Decimal(str(hours))))


def owed_at(execution: Execution, entity: Entity) -> datetime:
    """Return when the grade of ``execution`` is owed: its end plus ``gradeAfterHours``."""
    return (execution.completed_at or timezone.now()) + lag(entity)


def _locked(execution: Execution) -> Execution:
    """Re-read the execution under a row lock (inside the caller's transaction); StateError while it runs."""
    locked = Execution.objects.select_for_update().select_related("entity").get(pk=execution.pk)
    if not locked.terminal:
        raise StateError(f"execution {locked.pk} of {locked.entity} is still running: nothing to grade yet")
    return locked


def _refuse_when_off(entity: Entity) -> None:
    if not entity.evaluation_enabled:
        raise GradingOff(f"{entity}: evaluation.enabled is false, so no grading is booked for its runs")


def _enqueue_on_commit(grade_id: object) -> None:
    transaction.on_commit(lambda: enqueue(GRADE_TASK, str(grade_id)))


def _book(
    execution: Execution,
    *,
    reason: str,
    sampling: str,
    holds_slot: bool,
    due_at: datetime,
    day: object | None = None,
) -> Grade:
    """Create the booking and record the sampling verdict; enqueue grading after commit when it is due now."""
    now = timezone.now()
    grade = Grade.objects.create(
        execution=execution,
        entity=execution.entity,
        status=Grade.Status.BOOKED,
        reason=reason,
        holds_slot=holds_slot,
        day=day or calendar_day(now),
        booked_at=now,
        due_at=due_at,
        plan_terms=execution.plan_terms,
    )
    Execution.objects.filter(pk=execution.pk).update(sampling=sampling)
    execution.sampling = sampling
    if due_at <= now:
        _enqueue_on_commit(grade.pk)

    # Rating cards: ask a person to rate the run when evaluation.human.ask says so (grading.cards).
    maybe_card(grade)
    return grade


def _exemption(execution: Execution) -> str | None:
    """Return the first reason a registered check gives for grading this run whatever the sample, or None."""
    for check in list(_exemption_checks):
        why = check(execution)
        if why:
            return str(why)
    return None


def on_terminal(execution: Execution) -> Grade | None:
    """Decide whether a finished run is graded and book it; return the booking, or None when it is not graded.

    The verdict lands on ``execution.sampling``. A run the loop needs a
    verdict on (a registered exemption check says why) is booked exempt. A
    sampled run takes one ``maxPerDay`` slot on today's calendar day and
    keeps it while the judge waits ``gradeAfterHours``. Calling it again
    returns the existing booking (or None) and changes nothing.
    """
    with transaction.atomic():
        locked = _locked(execution)
        existing = Grade.objects.filter(execution=locked).first()
        if existing is not None:
            execution.sampling = locked.sampling
            return existing
        if locked.sampling:
            execution.sampling = locked.sampling
            return None
        entity = locked.entity
        why = _exemption(locked) if entity.evaluation_enabled and not locked.loop_launched else None
        if why:
            grade = _book(
                locked,
                reason=f"exempt:{why}"[:64],
                sampling=Sampling.EXEMPT,
                holds_slot=False,
                due_at=owed_at(locked, entity),
            )
        else:
            day = calendar_day()
            verdict = decide(locked, entity, day=day)
            if verdict != Sampling.SAMPLED:
                Execution.objects.filter(pk=locked.pk).update(sampling=verdict)
                execution.sampling = verdict
                return None
            grade = _book(
                locked,
                reason="sampled",
                sampling=Sampling.SAMPLED,
                holds_slot=True,
                due_at=owed_at(locked, entity),
                day=day,
            )
    execution.sampling = grade.execution.sampling
    return grade


def _on_terminal_many(executions: Sequence[Execution]) -> list[Grade | None]:
    """Book a batch of finished runs as ``on_terminal`` books each; return their bookings (None: not graded) in order.

    The same rules, set-based: the executions are locked once; the exemption
    checks and the rate verdict are asked per run in Python; each (entity,
    day) takes its ``maxPerDay`` slots at once (``take_slots``: the day's row
    locked and raised once, in the batch's order, never past the ceiling);
    the bookings are one ``bulk_create`` and the verdicts one ``UPDATE`` per
    distinct value. Bookings due now are graded once this commits: under
    ``method: none`` together in this process (``grading.grade.grade_many``),
    judged ones one by one through the Celery task. A run already booked or
    decided keeps what it has. StateError (nothing written) when one still runs.
    """
    executions = list(executions)
    if not executions:
        return []
    results: list[Grade | None] = [None] * len(executions)
    with transaction.atomic():
        ids = [execution.pk for execution in executions]
        locked = {
            pk: (status, sampling)
            for pk, status, sampling in Execution.objects.select_for_update()
            .filter(pk__in=ids)
            .order_by("pk")
            .values_list("pk", "status", "sampling")
        }
        for execution in executions:
            state = locked.get(execution.pk)
            if state is None:
                raise StateError(f"execution {execution.pk}: cannot book it, it is gone")
            if state[0] == Execution.Status.RUNNING:
                raise StateError(f"execution {execution.pk}: still running: nothing to grade yet")
        # Every booking records its verdict on the run in the same transaction: a run with none has no grade yet.
        decided = [pk for pk, (_, sampling) in locked.items() if sampling]
        existing = {grade.pk: grade for grade in Grade.objects.filter(execution_id__in=decided)} if decided else {}
        # The entities are locked before the day's slot row, as on_terminal locks each run's entity: a batch
        # and single bookings then wait for each other instead of deadlocking (NO KEY: runs may still be inserted).
        entities = {
            entity.pk: entity
            for entity in Entity.objects.select_for_update(no_key=True)
            .filter(pk__in={execution.entity_id for execution in executions})
            .order_by("pk")
        }
        now = timezone.now()
        today = calendar_day(now)
        # index → (reason, sampling, holds_slot); runs waiting for a slot by entity, in the batch's order.
        planned: dict[int, tuple[str, str, bool]] = {}
        verdicts: dict[int, str] = {}
        wanting: dict[int, list[int]] = {}
        for index, execution in enumerate(executions):
            status, sampling = locked[execution.pk]
            execution.status = status
            if execution.pk in existing or sampling:
                execution.sampling = sampling
                results[index] = existing.get(execution.pk)
                continue
            entity = entities[execution.entity_id]
            execution.entity = entity
            why = _exemption(execution) if entity.evaluation_enabled and not execution.loop_launched else None
            if why:
                planned[index] = (f"exempt:{why}"[:64], Sampling.EXEMPT, False)
                continue
            verdict = rate_verdict(execution, entity)
            if verdict is None:
                wanting.setdefault(entity.pk, []).append(index)
            else:
                verdicts[index] = verdict
        for entity_id in sorted(wanting):
            entity = entities[entity_id]
            waiting = wanting[entity_id]
            granted = take_slots(entity, today, max_per_day(entity), len(waiting))
            for index in waiting[:granted]:
                planned[index] = ("sampled", Sampling.SAMPLED, True)
            for index in waiting[granted:]:
                verdicts[index] = Sampling.SKIPPED_CAP
        grades = []
        for index, (reason, sampling, holds_slot) in sorted(planned.items()):
            execution = executions[index]
            grade = Grade(
                execution=execution,
                entity=execution.entity,
                status=Grade.Status.BOOKED,
                reason=reason,
                holds_slot=holds_slot,
                day=today,
                booked_at=now,
                due_at=owed_at(execution, execution.entity),
                plan_terms=execution.plan_terms,
            )
            grades.append(grade)
            results[index] = grade
            verdicts[index] = sampling
        insert_rows(Grade, grades)
        maybe_card_many(grades)  # grading's rating cards; no query when nobody is asked
        by_verdict: dict[str, list[object]] = {}
        for index, verdict in verdicts.items():
            executions[index].sampling = verdict
            by_verdict.setdefault(verdict, []).append(executions[index].pk)
        for verdict, pks in sorted(by_verdict.items()):
            Execution.objects.filter(pk__in=pks).update(sampling=verdict)
        _grade_due_on_commit([grade for grade in grades if grade.due_at <= now])
    return results


def on_terminal_many(executions: Sequence[Execution]) -> list[Grade | None]:
    """Book a batch of terminal executions set-based (see ``_on_terminal_many``), hooks memoized per batch."""
    from grading import scope

    with scope.batch():
        return _on_terminal_many(executions)


def _grade_due_on_commit(grades: list[Grade]) -> None:
    """After commit: grade the ``method: none`` bookings together here; enqueue the judged ones one by one."""
    together = [grade for grade in grades if method_of(grade.entity) == "none"]
    for grade in grades:
        if method_of(grade.entity) != "none":
            _enqueue_on_commit(grade.pk)
    if together:
        transaction.on_commit(lambda: grade_many(together))


def book_exempt(execution: Execution, why: str) -> Grade:
    """Book a run the loop needs a verdict on, whatever the sample and the ceiling; return the booking.

    The booking holds no ``maxPerDay`` slot. A loop replay is due at once;
    an observed run waits out ``gradeAfterHours`` like any other. An existing
    booking is returned as it is. GradingOff when the entity's grading is off.
    """
    with transaction.atomic():
        locked = _locked(execution)
        existing = Grade.objects.filter(execution=locked).first()
        if existing is not None:
            return existing
        entity = locked.entity
        _refuse_when_off(entity)
        due_at = timezone.now() if locked.loop_launched else owed_at(locked, entity)
        grade = _book(
            locked,
            reason=f"exempt:{why}"[:64],
            sampling=Sampling.EXEMPT,
            holds_slot=False,
            due_at=due_at,
        )
    execution.sampling = Sampling.EXEMPT
    return grade


def book_for_rating(execution: Execution) -> Grade:
    """Book the grading of a run a person rated; return the booking (the existing one when already booked).

    Not a sample: it asks neither ``sample.rate`` nor ``maxPerDay`` and holds
    no slot; the grade is owed ``gradeAfterHours`` after the run's end.
    GradingOff when the entity's grading is off.
    """
    with transaction.atomic():
        locked = _locked(execution)
        existing = Grade.objects.filter(execution=locked).first()
        if existing is not None:
            return existing
        entity = locked.entity
        _refuse_when_off(entity)
        grade = _book(locked, reason="rated", sampling=Sampling.RATED, holds_slot=False, due_at=owed_at(locked, entity))
    execution.sampling = Sampling.RATED
    return grade


def eval_start(execution: Execution) -> Grade:
    """Grade a run now and return its grade: books it when unbooked, pulls a delayed booking forward.

    Never a second grade: a run has one ``Grade`` row. A graded or failed one
    is graded again under the current judge; one being graded right now is
    returned as it is. GradingOff when the entity's grading is off.
    """
    with transaction.atomic():
        locked = _locked(execution)
        entity = locked.entity
        _refuse_when_off(entity)
        now = timezone.now()
        grade = Grade.objects.filter(execution=locked).first()
        if grade is None:
            grade = Grade.objects.create(
                execution=locked,
                entity=entity,
                reason="manual",
                holds_slot=False,
                day=calendar_day(now),
                booked_at=now,
                due_at=now,
                plan_terms=locked.plan_terms,
            )
            Execution.objects.filter(pk=locked.pk).update(sampling=Sampling.MANUAL)
        elif grade.status == Grade.Status.GRADING:
            return grade
        else:
            Grade.objects.filter(pk=grade.pk).update(status=Grade.Status.BOOKED, due_at=now, error="")
            grade.refresh_from_db()
    return grade_now(grade)


def sweep_due(*, now: datetime | None = None, limit: int = 500) -> int:
    """Enqueue grading for every booking whose time has come; return how many were enqueued.

    Enqueuing twice is harmless: ``grade_now`` claims a booking once.
    """
    now = now or timezone.now()
    ids = list(
        Grade.objects.filter(status=Grade.Status.BOOKED, due_at__lte=now)
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )
    for grade_id in ids:
        _enqueue_on_commit(grade_id)
    return len(ids)


def fail_lost(grade: Grade, *, status: str) -> bool:
    """Fail one booking as "grading job lost" if it is still in ``status``; give its slot back. Return whether it did."""
    with transaction.atomic():
        changed = Grade.objects.filter(pk=grade.pk, status=status, attempts=grade.attempts).update(
            status=Grade.Status.FAILED, error=LOST, holds_slot=False
        )
        if changed and grade.holds_slot:
            free_slot(grade.entity_id, grade.day)
    if changed:
        log.warning("grading of %s lost (was %s, due %s); slot freed", grade.execution_id, status, grade.due_at)
    return bool(changed)


def _grading_queue_depth() -> int | None:
    from singularity.queues import depth

    return depth(GRADING_QUEUE)


def sweep_lost(
    grace: timedelta = DEFAULT_LOST_GRACE,
    *,
    now: datetime | None = None,
    queued: Callable[[], int | None] = _grading_queue_depth,
) -> int:
    """Tell a queued grade from a lost one; re-send or re-run what was lost; return how many were failed as lost.

    A booking still ``booked`` past ``due_at + grace``:

    - while the grading queue holds messages (``queued()`` > 0: a backlog) or
      the broker cannot be asked (None), it is queued, not lost: left alone;
    - when the queue is empty its message is gone: it is sent again — and
      failed "grading job lost" (its ``maxPerDay`` slot given back) only once
      it is ``GIVE_UP_AFTER`` past due with the queue still empty each time.

    A grading still in flight past ``started_at + grace`` lost its worker (it
    died mid-grade): it is booked again and re-sent, up to ``MAX_ATTEMPTS``
    starts; then failed as lost. A late result of the dead start never lands
    over the new one (``grade_now`` writes only under its own attempt).
    Running it twice fails nothing twice.
    """
    now = now or timezone.now()
    deadline = now - grace
    failed = 0
    stale_booked = list(Grade.objects.filter(status=Grade.Status.BOOKED, due_at__lt=deadline).order_by("due_at"))
    if stale_booked:
        depth = queued()
        if depth is None or depth > 0:
            log.info(
                "%d bookings past due + %s left queued: the grading queue %s",
                len(stale_booked),
                grace,
                "cannot be asked (broker unreachable)" if depth is None else f"holds {depth} messages",
            )
        else:
            resent = 0
            for grade in stale_booked:
                if grade.due_at < now - GIVE_UP_AFTER:
                    failed += fail_lost(grade, status=Grade.Status.BOOKED)
                else:
                    _enqueue_on_commit(grade.pk)
                    resent += 1
            if resent:
                log.warning(
                    "%d bookings past due with the grading queue empty: their jobs were lost; sent again", resent
                )
    for grade in Grade.objects.filter(status=Grade.Status.GRADING, started_at__lt=deadline):
        if grade.attempts >= MAX_ATTEMPTS:
            failed += fail_lost(grade, status=Grade.Status.GRADING)
            continue
        with transaction.atomic():
            again = Grade.objects.filter(pk=grade.pk, status=Grade.Status.GRADING, attempts=grade.attempts).update(
                status=Grade.Status.BOOKED
            )
            if again:
                _enqueue_on_commit(grade.pk)
        if again:
            log.warning(
                "grading of %s started %s and never finished (its worker died?): run again (start %d of %d)",
                grade.execution_id,
                grade.started_at,
                grade.attempts + 1,
                MAX_ATTEMPTS,
            )
    return failed
