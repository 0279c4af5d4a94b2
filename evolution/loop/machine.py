"""The loop's phase machine: the one place that knows the order of the stages (seed 003, "The loop in one picture").

    opening → brief → proposer → decide → apply → check → merge → watch → verdict → settle (→ revert)

A cycle's phase names the stage that owns it (``OWNER``). A stage does its
work and answers what happened (``evolution.loop.steps``: Settle, Fail, Move,
or None to keep waiting); the machine moves the cycle on and starts the next
step on a worker once the transaction that asked for it has committed. No
stage imports another: every hand-over between two stages is written here.

Every entry point — a Celery task, a card's answer, a PR event, the clock —
comes through this module, so the order can be read in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evolution.core import cycles, due, pull_checks
from evolution.core import notify as outbound
from evolution.core.cycles import Opened
from evolution.core.polling import LEASE
from evolution.core.polling import take as take_poll
from evolution.forges import ForgeError, rate_limit
from evolution.loop import apply as applying
from evolution.loop import brief as briefs
from evolution.loop import check, decide, merge, opening, proposer, revert, verdict, watch
from evolution.loop import settle as settling
from evolution.loop.steps import Fail, Move, Settle
from evolution.models import Cycle, Round
from evolution.presets.base import ComparatorFault
from evolution.steering import autonomy, groups, ideas
from grading.models import Grade
from hitl.models import Card
from singularity.errors import SingularityError

log = logging.getLogger(__name__)

#: The stage that owns a cycle in each phase.
OWNER = {
    Cycle.Phase.ANALYSING: "proposer",
    Cycle.Phase.DECIDING: "decide",
    Cycle.Phase.APPLYING: "apply",
    Cycle.Phase.CHECKING: "check",
    Cycle.Phase.MERGE_WAIT: "merge",
    Cycle.Phase.WATCHING: "watch",
    Cycle.Phase.REVERTING: "revert",
    Cycle.Phase.SETTLED: "settle",
}

#: How many due cycles one poll reads at most (the rest wait for the next tick).
BATCH = 200

# --- Starting steps on a worker ----------------------------------------------------------

#: A step's name → how to start it on a worker (filled by evolution.tasks: "analyse", "apply", "replay").
STEPS: dict[str, Callable[[int], Any]] = {}


def register_step(name: str, start: Callable[[int], Any]) -> None:
    """Say how step ``name`` is started on a worker (``start(round_id)``, a task's ``delay``)."""
    STEPS[name] = start


def enqueue(step: str, round_id: int) -> None:
    """Start a round's next step on a worker once the transaction that asked for it has committed."""
    transaction.on_commit(lambda: STEPS[step](round_id))


def _move(cycle: Cycle, step: Move, now: datetime) -> Cycle:
    return cycles.advance(cycle, step.phase, now=step.at or now, **step.fields)


# --- Opening -------------------------------------------------------------------------------


def open_cycle(entity: Any, **kwargs: Any) -> Opened:
    """Open a cycle (``evolution.loop.opening.open_cycle``) and start its first analysis after commit."""
    result = opening.open_cycle(entity, **kwargs)
    if result.opened and result.first_round is not None:
        enqueue("analyse", result.first_round.pk)
    return result


def start_round(
    cycle: Cycle, *, refinement: str = "", parent: Round | None = None, now: datetime | None = None
) -> Round:
    """Open the next round of ``cycle`` (a refinement or a retry) and start its analysis after commit."""
    now = now or timezone.now()
    new = decide.new_round(cycle, refinement=refinement, parent=parent, now=now)
    cycles.advance(cycle, Cycle.Phase.ANALYSING, now=now)
    enqueue("analyse", new.pk)
    return new


# --- Brief → proposer → decide -------------------------------------------------------------


def analyse(round_id: int, *, now: datetime | None = None) -> Round | None:
    """Brief the proposer for round ``round_id`` and put its answer before the decide gate.

    Returns the round, or None when it was not waiting for an analysis.
    """
    now = now or timezone.now()
    rnd = proposer.claim(round_id, now)
    if rnd is None:
        return None
    with due.analysis_heartbeat(rnd.pk):  # a worker that dies here stops beating: the sweep fails the round
        return _analyse(rnd, now)


def _analyse(rnd: Round, now: datetime) -> Round:
    """The claimed round's analysis: the switch, the budget, the brief, the proposer, then the decide gate.

    Whatever breaks in the brief or the proposer fails the round with the error it raised (its type and
    message): under decide: auto the cycle closes failed at once; under a person's, a Retry card says why.
    """
    cycle = rnd.cycle
    off = proposer.switched_off(rnd)
    if off is not None:
        settle(cycle, off.status, reason=off.reason, lesson=off.lesson)
        return rnd
    unattended = autonomy.gates(cycle.entity, now=now).decide == autonomy.AUTO
    spent = proposer.budget_refusal(cycle)
    if spent:
        # A retry spends from the same run budget, so it cannot help: unattended, the run closes at once.
        return fail(rnd, f"{spent}; a retry would spend from the same budget", now=now, unattended=unattended)
    try:
        documents = briefs.build_brief(cycle, rnd)
        proposal = proposer.propose(cycle, rnd, documents)
    except proposer.Stopped as exc:
        # The switch or a hold stood before the proposer's next turn: no more turns were bought (R7.22).
        cycles.add_spend(cycle, exc.cost_usd)
        proposer.keep_reads(rnd, exc)
        stopped = proposer.switched_off(rnd) or _held_meanwhile(rnd)
        if stopped is None:
            rnd.status = Round.Status.SKIPPED
            rnd.save(update_fields=["status"])
            stopped = Settle(Cycle.Status.SKIPPED, f"set aside: {exc}", lesson=False)
        elif exc.abandoned:  # thrown during a model call: that call was cut, and the story says so
            stopped = Settle(stopped.status, f"{stopped.reason}; {exc.abandoned}", lesson=stopped.lesson)
        settle(cycle, stopped.status, reason=stopped.reason, lesson=stopped.lesson)
        return rnd
    except SingularityError as exc:
        cycles.add_spend(cycle, getattr(exc, "cost_usd", None))
        proposer.keep_reads(rnd, exc)
        return fail(rnd, f"the analysis failed: {exc}", now=now, unattended=unattended)
    except Exception as exc:  # noqa: BLE001 - a bug in the brief or the proposer is this round's failure, said on it
        log.exception("loop: cycle %s r%s: the analysis broke", cycle.pk, rnd.number)
        if not proposer.still_analysing(rnd):
            return rnd
        return fail(rnd, f"the analysis failed: {type(exc).__name__}: {exc}", now=now, unattended=unattended)
    if not proposer.still_analysing(rnd):
        # Taken as lost meanwhile (this worker stopped beating for longer than the lease): its answer is not used.
        cycles.add_spend(cycle, getattr(proposal, "cost_usd", None))
        log.warning("loop: cycle %s r%s: the analysis was taken as lost before it answered", cycle.pk, rnd.number)
        return rnd
    # The proposer waited on something outside: the switch and the holds are read again before its answer counts.
    cycle.entity.refresh_from_db(fields=["loop_enabled", "terms"])
    stopped = proposer.switched_off(rnd) or _held_meanwhile(rnd)
    if stopped is not None:
        cycles.add_spend(cycle, getattr(proposal, "cost_usd", None))
        settle(cycle, stopped.status, reason=stopped.reason, lesson=stopped.lesson)
        return rnd
    skipped = proposer.record(rnd, proposal, documents.documents, now)
    if skipped is not None:
        settle(cycle, skipped.status, reason=skipped.reason, now=now)
        return rnd
    return decide_gate(rnd, now=now)


def _held_meanwhile(rnd: Round) -> Settle | None:
    """A hold placed while the proposer worked: its answer is set aside (skipped, no card, no lesson)."""
    from evolution.steering.supervision import hold_refusal

    held = hold_refusal(rnd.cycle.entity)
    if held is None:
        return None
    rnd.status = Round.Status.SKIPPED
    rnd.save(update_fields=["status"])
    return Settle(Cycle.Status.SKIPPED, f"set aside: {held} (placed while the proposer worked)", lesson=False)


def decide_gate(rnd: Round, *, now: datetime) -> Round:
    """Staff the decide gate: accept unattended (decide: auto), on a grant's word, or ask a person.

    A change a person skipped, or the check closed, among the lessons its proposer was shown is not put before
    anybody again: the cycle settles skipped saying so (issue 31).
    """
    repeat = decide.repeat_of(rnd)
    if repeat is not None:
        step = decide.put_aside(rnd, repeat)
        settle(rnd.cycle, step.status, reason=step.reason, now=now)
        return rnd
    who = decide.gate(rnd, now=now)
    if who == "person":
        return ask_decide(rnd, now=now)
    accept(rnd, decided_by=rnd.cycle.actor, now=now, acceptance=who)
    return rnd


def ask_decide(rnd: Round, *, now: datetime) -> Round:
    """Put a proposed round before a person (a decide card); the cycle waits on it. Every waiting card of the entity
    says how many other proposals wait with it."""
    _move(rnd.cycle, decide.ask_decide(rnd, now=now), now)
    decide.announce_waiting(rnd.cycle.entity)
    return rnd


def fail(
    rnd: Round, error: str, *, paths: list[str] | None = None, now: datetime | None = None, unattended: bool = False
) -> Round:
    """Fail a round (a broken analysis or apply): the reason on a Retry card; the cycle waits on a person.

    A round nobody stands on (decide: auto) closes its cycle failed at once instead: no card, no lesson.
    """
    now = now or timezone.now()
    decide.mark_failed(rnd, error, paths=paths)
    if unattended:
        settle(rnd.cycle, Cycle.Status.FAILED, reason=f"{error} (unattended: closed at once)", now=now, lesson=False)
        return rnd
    _move(rnd.cycle, decide.ask_retry(rnd, now=now), now)
    return rnd


def _failed(rnd: Round, step: Fail, now: datetime) -> Round:
    return fail(rnd, step.error, paths=step.paths, now=now, unattended=step.unattended)


def accept(rnd: Round, *, decided_by: str, now: datetime, acceptance: str = "person") -> None:
    """Accept a proposed round: take the entity's claim and start its apply (nothing to apply skips)."""
    with transaction.atomic():
        step = decide.accept(rnd, decided_by=decided_by, now=now, acceptance=acceptance)
        if isinstance(step, Move):
            _move(rnd.cycle, step, now)
            enqueue("apply", rnd.pk)
            set_aside_mooted(rnd, now)
            return
    settle(rnd.cycle, step.status, reason=step.reason, now=now)
    decide.announce_waiting(rnd.cycle.entity)  # one fewer waits beside the others


def set_aside_mooted(rnd: Round, now: datetime) -> None:
    """Set aside what ``rnd``'s Accept made moot — the entity's other waiting proposals and the waiting proposals of
    siblings its lock groups now hold — each recorded as set aside and its card closed (buttons gone at once)."""
    from hitl.actions import withdraw_card

    for other, why in decide.mooted(rnd):
        step = decide.put_aside(other, why)
        settle(other.cycle, step.status, reason=step.reason, now=now)
        if other.card_id is not None:
            withdraw_card(other.card_id, reason=step.reason)


def on_card(card: Card) -> None:
    """Hear a closed decide or retry card (registered with hitl for producer "loop")."""
    rnd = decide.round_of(card)
    if rnd is None:
        return
    now = timezone.now()
    with transaction.atomic():
        answered = decide.answer(rnd, card, now)
        if isinstance(answered, Settle):
            settle(rnd.cycle, answered.status, reason=answered.reason, now=now)
            decide.announce_waiting(rnd.cycle.entity)  # one fewer waits beside the others
        elif isinstance(answered, decide.Refine):
            start_round(rnd.cycle, refinement=answered.refinement, parent=answered.parent, now=now)
        else:
            accept(rnd, decided_by=answered.decided_by, now=now)


# --- Apply → merge -------------------------------------------------------------------------


def apply(round_id: int, *, now: datetime | None = None) -> Round | None:
    """Apply an accepted round: the diff gate, one commit on a loop branch, the pull request, the merge wait."""
    rnd = applying.accepted(round_id)
    if rnd is None:
        return None
    limit = rate_limit()
    if limit is not None:
        return _apply_waits(rnd, limit[0])
    try:
        failed = applying.apply(rnd, now=now)
    except ForgeError as exc:
        if exc.until is None:
            raise
        return _apply_waits(rnd, exc.until)
    except Exception as exc:  # noqa: BLE001 - any failure of the stage fails its round with the reason, never strands it
        log.exception("loop: cycle %s: the apply of round %s broke", rnd.cycle_id, rnd.number)
        said = f"the apply failed: {type(exc).__name__}: {exc}{applying.withdraw(rnd)}"
        failed = Fail(said, paths=[], unattended=autonomy.unattended(rnd))
    if failed is not None:
        return _failed(rnd, failed, now or timezone.now())
    now = now or timezone.now()
    after_apply(rnd.cycle, rnd, now)
    return rnd


def _apply_waits(rnd: Round, until: datetime) -> Round:
    """A forge rate limit stands: the apply's claim runs out at its reset, when the sweep hands it over again
    (an attempt that pushed its branch already adopts it then: no second branch, no second PR).
    """
    from evolution.core.due import apply_lease
    from evolution.forges import rate_limit_words

    Round.objects.filter(pk=rnd.pk).update(apply_claimed_at=until - apply_lease(), apply_sent_at=None)
    log.info(
        "loop: cycle %s round %s: %s; the apply waits until then", rnd.cycle_id, rnd.number, rate_limit_words(until)
    )
    return rnd


def after_apply(cycle: Cycle, rnd: Round, now: datetime) -> None:
    """The PR is open: its pre-merge check starts, or (no check) the merge wait opens and the merge gate is staffed.

    The cycle row is locked and its phase read again, so the clock's sweep of a hand-over that never ran
    (``check_tick``) and the apply itself never both start it.
    """
    with transaction.atomic():
        fresh = Cycle.objects.select_for_update().select_related("entity").filter(pk=cycle.pk).first()
        if fresh is None or fresh.phase != Cycle.Phase.APPLYING or fresh.status:
            return
        if check.needed(fresh):
            start_check(fresh, rnd, now)
        else:
            unposted = check.no_check(rnd)
            arm_wait(fresh, rnd, now)
            if unposted:
                merge.demote(rnd, f"{unposted}: the PR waits on a person")
            else:
                merge.gate(rnd, now=now)
            merge.notice_pr(fresh, rnd)  # after the gate: it says who merges (auto-merge armed, or a person)
    cycle.refresh_from_db()


# --- Apply → check → merge -----------------------------------------------------------------


def start_check(cycle: Cycle, rnd: Round, now: datetime) -> Cycle:
    """Open the pre-merge check of ``rnd``'s PR: replays created, the cycle ``checking``, each replay started."""
    step, replays = check.begin(rnd, now)
    _move(cycle, step, now)
    merge.notice_pr(cycle, rnd, checking=True)
    for replay_id in replays:
        enqueue("replay", replay_id)
    return cycle


def replay(replay_id: int, *, now: datetime | None = None) -> None:
    """Run one replay of a check on this worker, then read the check (its last side may just have landed)."""
    ran = check.run(replay_id, now=now)
    if ran is not None:
        evaluate_check(ran.round.cycle)


def evaluate_check(cycle: Cycle, now: datetime | None = None) -> str | None:
    """Read the check of ``cycle`` once; act on its answer. Returns the verdict, or None while it waits.

    The cycle row is locked while it is read, so two landing grades answer it once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        fresh = Cycle.objects.select_for_update().select_related("entity").filter(pk=cycle.pk).first()
        if fresh is None or fresh.phase != Cycle.Phase.CHECKING or fresh.status:
            return None
        answered = check.evaluate(fresh, now)
        if answered is None:
            return None
        if answered.settle is not None:
            settle(fresh, answered.settle.status, reason=answered.settle.reason, now=now)
        else:
            rnd = check.checking_round(fresh)
            arm_wait(fresh, rnd, now)  # the merge wait counts from the check's answer
            if answered.demote:
                merge.demote(rnd, answered.demote)
            else:
                merge.gate(rnd, now=now, sha=rnd.checked_sha)
    cycle.refresh_from_db()
    return answered.verdict


def vouch_for_merge(number: int, *, by: str, now: datetime | None = None) -> bool:
    """A person merges PR ``number`` though its check could not show the change works (``onInconclusive: human``):
    ``singularity/validation`` turns ``success`` on their word, on the checked commit. Returns whether it applied.
    """
    now = now or timezone.now()
    cycle = cycle_of_pull(number)
    if cycle is None or cycle.phase != Cycle.Phase.MERGE_WAIT:
        return False
    rnd = cycle.rounds.filter(pr_number=number).order_by("-number").first()
    if rnd is None or not check.vouchable(rnd):
        return False
    check.vouch(rnd, by=by, now=now)
    return True


def check_tick(now: datetime | None = None) -> dict[str, int]:
    """Start replays nobody started (a lost message, a dead worker) and read every check (its deadline may be past)."""
    now = now or timezone.now()
    # A PR opened whose next step never ran (the worker died between the two): hand it over now.
    stranded = Round.objects.filter(
        status=Round.Status.APPLIED,
        checked_sha="",
        cycle__phase=Cycle.Phase.APPLYING,
        cycle__status="",
        cycle__applied_at__lt=now - check.UNTAKEN_AFTER,
    ).select_related("cycle", "cycle__entity")
    for rnd in stranded[:BATCH]:
        log.warning(
            "loop: cycle %s: PR #%s was open with nothing following it; handed over now", rnd.cycle_id, rnd.pr_number
        )
        after_apply(rnd.cycle, rnd, now)
    started = 0
    for replay_id in check.due_replays(now):
        STEPS["replay"](replay_id)
        started += 1
    check.book_missing()
    answered = 0
    for cycle in Cycle.objects.filter(phase=Cycle.Phase.CHECKING).order_by("check_deadline", "pk"):
        try:
            answered += int(evaluate_check(cycle, now) is not None)
        except Exception:
            log.exception("loop: cycle %s: reading its check failed; read again on the next tick", cycle.pk)
    return {"replays": started, "checks": answered}


def arm_wait(cycle: Cycle, rnd: Round, now: datetime | None = None) -> Cycle:
    """Open the merge wait of ``rnd``'s pull request; return the cycle in phase ``merge_wait``."""
    now = now or timezone.now()
    return _move(cycle, merge.arm_wait(cycle, rnd, now), now)


POLLED_PHASES = (Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT, Cycle.Phase.REVERTING)


def poll(cycle: Cycle, now: datetime | None = None) -> str:
    """Read ``cycle``'s pull request (the apply PR in checking or merge_wait, the revert PR in reverting) and act.

    The caller has taken the cycle. Returns "merged", "closed", "expired", "open" or "lost"; "" otherwise.
    """
    now = now or timezone.now()
    with transaction.atomic():
        if cycle.phase in (Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT):
            # The apply PR, read while its check waits or while the merge gate decides: merged, closed or still open.
            step = check.poll(cycle, now) if cycle.phase == Cycle.Phase.CHECKING else merge.poll(cycle, now)
            if step is None:
                return "open"
            if isinstance(step, Move):
                open_watch(cycle, step.at or now, evaluated_at=now)
                return "merged"
            settle(cycle, step.status, reason=step.reason, now=now)
            return "lost" if step.status == Cycle.Status.FAILED else "closed"
        if cycle.phase == Cycle.Phase.REVERTING:
            if revert.reverted_round(cycle) is None:
                # Settled reverting, its revert never opened (the worker died, or the open broke): open it now.
                return "opened" if _open_due_revert(cycle, now) else "failed"
            outcome = revert.poll(cycle, now)
            if outcome in revert.ENDED:
                # completed_at is the last transition's (R25.5): the revert's end, not the watch's settle
                cycles.advance(cycle, Cycle.Phase.SETTLED, claim=None, next_poll_at=None, completed_at=now, now=now)
            return outcome
    return ""


def _open_due_revert(cycle: Cycle, now: datetime) -> bool:
    """Open a due revert on a cycle this worker has taken; False when it cannot be opened (the hold ends)."""
    if revert.open_for(cycle, now):
        # Its first poll, unless the revert already ended meanwhile (an armed auto-merge lands it at once).
        Cycle.objects.filter(pk=cycle.pk, phase=Cycle.Phase.REVERTING).update(moved_at=now, **revert.first_poll(now))
        cycle.refresh_from_db()
        return True
    # It cannot be opened (the reason is on the round and the cycle): the settle goes on without it.
    cycle.refresh_from_db(fields=["reason"])
    cycles.advance(
        cycle, Cycle.Phase.SETTLED, claim=None, next_poll_at=None, reverted_by_policy=False, completed_at=now, now=now
    )
    return False


def _poll_taken(cycle: Cycle, now: datetime) -> bool:
    """Poll a cycle this worker took; a failure is logged with the cycle and retried after the lease."""
    try:
        poll(cycle, now)
    except Exception:
        log.exception("loop: cycle %s: polling its pull request failed; retried after %s", cycle.pk, LEASE)
        return False
    return True


def poll_due(now: datetime | None = None) -> int:
    """Poll every cycle in merge_wait or reverting whose next poll is due; return how many were polled.

    A reverting cycle with no poll scheduled yet is due at once.
    """
    now = now or timezone.now()
    due = list(
        Cycle.objects.filter(phase__in=POLLED_PHASES)
        .filter(Q(next_poll_at__lte=now) | Q(phase=Cycle.Phase.REVERTING, next_poll_at=None))
        .select_related("entity")
        .order_by("next_poll_at", "pk")[:BATCH]
    )
    polled = 0
    for cycle in due:
        if take_poll(cycle, now):
            polled += int(_poll_taken(cycle, now))
    return polled


def cycle_of_pull(number: int) -> Cycle | None:
    """Return the live cycle following PR ``number``: as its apply PR in merge_wait, or as its revert PR."""
    return (
        Cycle.objects.filter(
            Q(phase__in=(Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT), rounds__pr_number=number)
            | Q(phase=Cycle.Phase.REVERTING, rounds__revert_pr_number=number)
        )
        .select_related("entity")
        .distinct()
        .first()
    )


def on_pull_event(number: int, *, now: datetime | None = None) -> Cycle | None:
    """A PR event (merge, close, a disarm): read the PR now; return the cycle that follows it, or None.

    An event only wakes the wait — the read decides.
    """
    now = now or timezone.now()
    cycle = cycle_of_pull(number)
    if cycle is None:
        return None
    if take_poll(cycle, now):
        _poll_taken(cycle, now)
    cycle.refresh_from_db()
    return cycle


# --- Watch → verdict -----------------------------------------------------------------------


def open_watch(cycle: Cycle, now: datetime, *, evaluated_at: datetime | None = None) -> Cycle:
    """Open the watch of a merged change at ``now`` (the merge) and read the grades already landed since."""
    step = watch.open_watch(cycle, now)
    if isinstance(step, Settle):
        return settle(cycle, step.status, reason=step.reason, now=evaluated_at or now)
    cycles.advance(cycle, step.phase, now=evaluated_at or now, **step.fields)
    evaluate(cycle, evaluated_at or timezone.now())
    return cycle


def _evaluate_locked(cycle: Cycle, now: datetime, closing: bool) -> str | None:
    edit = pull_checks.named(watch.edit_confound(cycle))  # a person's PR checked before it merged is named
    if edit is not None:
        Cycle.objects.filter(pk=cycle.pk).update(confounded_by_edit=edit)
        cycle.confounded_by_edit = edit
        reason = (
            f"confounded: commit {edit['sha'][:12]} by {edit['author']} ({edit['subject']}) changed "
            f"{', '.join(edit['files'])} during the watch{pull_checks.words(edit)}; no cycle shipped it, so the "
            "watch cannot say which change did what — nothing is undone"
        )
        return _settle(cycle, Cycle.Status.UNVALIDATED, reason=reason, now=now)
    seen = watch.observe(cycle, now)
    sick = watch.judge_unhealthy(cycle, seen, deciding=closing)
    if sick:
        outbound.judge_unhealthy(cycle, sick)
        return _settle_watch(cycle, Cycle.Status.UNVALIDATED, sick, None, now)
    try:
        which, function = verdict.comparator(cycle.entity)
        answered = verdict.answer(cycle, seen, which, function, watch.window_record(cycle, seen, None, which))
    except ComparatorFault as fault:
        return _settle_watch(cycle, Cycle.Status.UNVALIDATED, str(fault), None, now)
    watch.store(cycle, watch.window_record(cycle, seen, answered, which))
    if answered.verdict is not None:
        sick = watch.judge_unhealthy(cycle, seen, deciding=True)
        if sick:
            outbound.judge_unhealthy(cycle, sick)
            return _settle_watch(cycle, Cycle.Status.UNVALIDATED, sick, None, now)
        return _settle_watch(cycle, answered.verdict, answered.reason, answered.record, now)
    if closing:
        reason, record = verdict.closed_short(cycle, seen, which, answered)
        return _settle_watch(cycle, Cycle.Status.UNVALIDATED, reason, record, now)
    return None


def _settle_watch(cycle: Cycle, status: str, reason: str, record: dict[str, Any] | None, now: datetime) -> str:
    """Settle the watch; a sibling's change that landed inside it confounds it (the reading kept, never acted on)."""
    sibling = groups.sibling_change(cycle, now=now)
    if sibling is not None:
        Cycle.objects.filter(pk=cycle.pk).update(confounded_by=sibling)
        cycle.confounded_by = sibling
        pr = f", {sibling['pr']}" if sibling["pr"] else ""
        reason = (
            f"confounded: {sibling['entity']}'s change (cycle {sibling['cycle']}{pr}) was {sibling['what']} during "
            f"this watch (lock group {sibling['group']}); the watch read {status} ({reason}), which is kept and "
            "not acted on"
        )
        status = Cycle.Status.UNVALIDATED
    return _settle(cycle, status, reason=reason, record=record, now=now)


def _settle(cycle: Cycle, status: str, *, reason: str, now: datetime, record: dict[str, Any] | None = None) -> str:
    log.info("loop: cycle %s: the watch settles %s: %s", cycle.pk, status, reason)
    settle(cycle, status, reason=reason, watch_verdict=record, now=now, revert_now=False, locked=True)
    return status


def evaluate(cycle: Cycle, now: datetime | None = None) -> str | None:
    """Read the watch of ``cycle`` once; return the status it settled at, or None while it keeps watching.

    Past the deadline this is the closing read: a window with no verdict
    settles unvalidated. The cycle row is locked while it is read (Postgres),
    so two workers hearing two grades of one entity settle it once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        fresh = Cycle.objects.select_for_update().select_related("entity").filter(pk=cycle.pk).first()
        if fresh is None or fresh.phase != Cycle.Phase.WATCHING or fresh.status:
            return None
        closing = fresh.watch_deadline is not None and now >= fresh.watch_deadline
        settled = _evaluate_locked(fresh, now, closing)
    if fresh.phase == Cycle.Phase.REVERTING:
        # The settle committed with its revert due (the row lock released); only now is the forge asked.
        start_revert(fresh, now)
        cycle.refresh_from_db()
    else:
        # The locked row as this read left it: every write above was set on it too, so it is not read again.
        cycle.__dict__.update({k: v for k, v in fresh.__dict__.items() if not k.startswith("_")})
    return settled


def on_grades(grade_ids: list[Any], *, now: datetime | None = None) -> int:
    """Hear landed grades: a check's replays answer their check, the entity's own runs its watch; return how many
    settled or answered. One read of the grades tells the two apart, so an ordinary landing asks nothing of replays.
    """
    now = now or timezone.now()
    rows = list(Grade.objects.filter(pk__in=list(grade_ids)).values_list("pk", "entity_id", "execution__loop_launched"))
    replays = [pk for pk, _, launched in rows if launched]
    answered = sum(evaluate_check(Cycle(pk=pk), now) is not None for pk in check.cycles_of(replays)) if replays else 0
    entity_ids = {entity_id for _, entity_id, launched in rows if not launched}
    if not entity_ids:
        return answered
    watching = Cycle.objects.filter(phase=Cycle.Phase.WATCHING, entity_id__in=entity_ids).order_by("pk")
    return answered + sum(evaluate(cycle, now) is not None for cycle in watching)


def watch_tick(now: datetime | None = None) -> int:
    """Read every watching cycle (compare asks again; a deadline closes); return how many settled.

    A cycle whose read fails for a bug is logged and read again on the next tick.
    """
    now = now or timezone.now()
    settled = 0
    for cycle in Cycle.objects.filter(phase=Cycle.Phase.WATCHING).order_by("watch_deadline", "pk"):
        try:
            settled += int(evaluate(cycle, now) is not None)
        except Exception:
            log.exception("loop: cycle %s: the watch's tick failed; read again on the next tick", cycle.pk)
    return settled


# --- Settle --------------------------------------------------------------------------------


def _announce(cycle: Cycle) -> None:
    if cycle.status in (Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED, Cycle.Status.VALIDATED):
        autonomy.announce_if_crossed(cycle)


#: What happens after a settle commits, in this order: people hear, the breaker speaks, the idea's author hears back.
AFTER_SETTLE: tuple[Callable[[Cycle], Any], ...] = (settling.notify, _announce, ideas.hear_back)


def settle(
    cycle: Cycle,
    status: str,
    *,
    reason: str = "",
    watch_verdict: dict[str, Any] | None = None,
    now: datetime | None = None,
    lesson: bool = True,
    revert_now: bool = True,
    locked: bool = False,
) -> Cycle:
    """End ``cycle`` at ``status`` (validated, regressed, unvalidated, skipped, failed) and return it.

    In order: the terminal; the revert when one is due (a regressed change,
    or an unproven one under ``watch.onInconclusive: revert``) — the cycle
    then keeps the entity's claim while the revert is followed (phase
    "reverting", due in the database before the forge is asked: the PR is
    opened after the settle's transaction, or by the caller after its own
    when ``revert_now`` is False, as the watch's read does), every other
    settle releases it; the applied rounds closed;
    the lesson (``lesson=False`` for the kill switch and a broken unattended
    round); then ``AFTER_SETTLE``. A second settle of a settled cycle does nothing. ``locked``: the caller read
    ``cycle`` under its row lock in the transaction this runs in (the watch's read), so it is not read again.
    """
    now = now or timezone.now()
    with transaction.atomic():
        fresh, settled = settling.write_terminal(
            cycle, status, reason=reason, watch_verdict=watch_verdict, now=now, locked=locked
        )
        if not settled:
            return fresh
        why = revert.due(fresh)
        if why is not None:
            if why == revert.BY_POLICY:
                settling.mark_reverted_by_policy(fresh)
            # The revert is due in the database before the forge is asked: a worker that dies opening it leaves
            # the cycle reverting with no PR, which the poll (``poll_due``) opens.
            cycles.advance(fresh, Cycle.Phase.REVERTING, now=now, next_poll_at=None)
        settling.close(fresh, reverting=why is not None, now=now)
        if lesson:
            settling.write_lesson(fresh)
    if why is not None and revert_now:
        start_revert(fresh, now)
    for effect in AFTER_SETTLE:
        effect(fresh)
    cycle.__dict__.update({k: v for k, v in fresh.__dict__.items() if not k.startswith("_")})
    return fresh


def start_revert(cycle: Cycle, now: datetime) -> bool:
    """Open the revert PR of a cycle settled ``reverting`` (due, none opened yet); return whether one is followed.

    One worker opens it (it takes the cycle's poll, like any poll); the open
    is idempotent (``revert.open_revert`` adopts the open PR of the revert's
    own branch), so the poll that finds it still due after a dead worker
    opens no second one.
    """
    if not take_poll(cycle, now):
        return False
    return _open_due_revert(cycle, now)  # no transaction held across the forge's calls


# --- The clock ------------------------------------------------------------------------------


def sweep_lost(*, now: datetime | None = None, after: timedelta = timedelta(minutes=30)) -> int:
    """Fail every analysis whose worker died (its heartbeat older than ``due.analysis_lease``: two ticks) and hand
    an analysis no worker claimed in ``after`` to a worker again; return how many were failed.

    The failure is the round's like any broken analysis: under decide: auto the cycle closes failed at once
    (unattended: no card, no lesson), under a person's a Retry card says what happened.
    """
    now = now or timezone.now()
    lost = 0
    for rnd in due.analyses_lost(now).select_related("cycle", "cycle__entity"):
        beat = rnd.analysis_beat_at
        if not due.take_lost_analysis(rnd.pk, now):
            continue  # another sweep took it, or its worker beat again
        unattended = autonomy.gates(rnd.cycle.entity, now=now).decide == autonomy.AUTO
        silent = int((now - beat).total_seconds()) if beat is not None else 0
        fail(rnd, f"the analysis was lost: its worker stopped answering ({silent} s without a heartbeat)", now=now,
             unattended=unattended)  # fmt: skip
        lost += 1
    for rnd in Round.objects.select_related("cycle", "cycle__entity").filter(
        status=Round.Status.ANALYSING, cycle__status="", cycle__moved_at__lt=now - after, analysis_beat_at__isnull=True
    ):
        if (rnd.brief or {}).get("_claimed"):  # claimed before heartbeats were kept: the old half hour
            unattended = autonomy.gates(rnd.cycle.entity, now=now).decide == autonomy.AUTO
            fail(rnd, "the analysis was lost: its worker stopped before answering", now=now, unattended=unattended)
            lost += 1
        else:
            enqueue("analyse", rnd.pk)
    return lost
