"""A cycle's rounds: the analysis, the decide gate, the apply, and a person's answers (seed 003).

A round is one proposal. ``analyse`` briefs the proposer and records what it
answered; under ``decide: human`` a decide card asks a person (Accept / Skip
with a note / a reply that refines). ``apply`` writes the accepted files in a
throwaway clone, runs the diff gate and opens the pull request. A broken
analysis or apply fails the round onto a Retry card. Every answer is read
from the round's own card, once: an answered or expired card can never reach
the round that replaced it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from evolution import autonomy, cycles
from evolution.models import Cycle, Round
from hitl.models import Card
from singularity.errors import SingularityError

log = logging.getLogger(__name__)

PRODUCER = "loop"
ACCEPT, SKIP, RETRY = "accept", "skip", "retry"


def _review_deadline(cycle: Cycle, now: datetime) -> datetime:
    """reviewDeadlineHours, read once as the round opens (an edit reaches the next round, never this one)."""
    hours = cycles.loop_terms(cycle.entity).get("reviewDeadlineHours") or 72
    return now + timedelta(hours=float(hours))


def start_round(
    cycle: Cycle, *, refinement: str = "", parent: Round | None = None, now: datetime | None = None
) -> Round:
    """Open the next round of ``cycle`` (a refinement or a retry) and start its analysis after commit."""
    now = now or timezone.now()
    number = (cycle.rounds.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    new = Round.objects.create(
        cycle=cycle, number=number, parent=parent, refinement=refinement, status=Round.Status.ANALYSING, created_at=now
    )
    cycles.take_claim(cycle)
    cycles.advance(cycle, Cycle.Phase.ANALYSING, now=now)
    cycles._enqueue("analyse_round", new.pk)
    return new


# --- Analysis ------------------------------------------------------------------


def _budget_refusal(cycle: Cycle) -> str | None:
    """The sentence when the run's budget.maxUsdPerRun is spent (priced by subtraction), else None."""
    ceiling = (cycles.loop_terms(cycle.entity).get("budget") or {}).get("maxUsdPerRun")
    if ceiling is None:
        return None
    ceiling = Decimal(str(ceiling))
    if cycle.spent_usd >= ceiling:
        return f"budget: spent ${cycle.spent_usd:.2f} of ${ceiling:.2f} (budget.maxUsdPerRun)"
    return None


def analyse(round_id: int, *, now: datetime | None = None) -> Round | None:
    """Brief the proposer for round ``round_id`` and put its answer before the decide gate.

    Returns the round, or None when it was not waiting for an analysis.
    """
    from evolution import brief as briefs
    from evolution import proposer

    now = now or timezone.now()
    # The claim: one worker analyses a round, however often its task is delivered.
    claimed = Round.objects.filter(pk=round_id, status=Round.Status.ANALYSING, brief={}).update(
        brief={"_claimed": now.isoformat()}
    )
    if not claimed:
        return None
    rnd = Round.objects.select_related("cycle", "cycle__entity").get(pk=round_id)
    cycle = rnd.cycle
    if cycle.status:
        return None
    entity = cycle.entity
    if not entity.loop_enabled:
        # The kill switch: a call about the loop, not a verdict on the round — no failed round, no card, no lesson.
        rnd.status = Round.Status.SKIPPED
        rnd.save(update_fields=["status"])
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason="the loop was switched off during the analysis", lesson=False)
        return rnd
    spent = _budget_refusal(cycle)
    if spent:
        return fail(rnd, spent)
    try:
        brief = briefs.build_brief(cycle, rnd)
        proposal = proposer.propose(cycle, rnd, brief)
    except SingularityError as exc:
        cycles.add_spend(cycle, getattr(exc, "cost_usd", None))
        unattended = autonomy.gates(entity, now=now).decide == autonomy.AUTO
        return fail(rnd, f"the analysis failed: {exc}", now=now, unattended=unattended)
    rnd.brief = brief.documents
    if proposal is None:
        rnd.status = Round.Status.SKIPPED
        rnd.rejection = Round.Rejection.PROPOSER
        rnd.decided_by = cycle.actor
        rnd.save(update_fields=["brief", "status", "rejection", "decided_by"])
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason="the proposer had nothing to propose", now=now)
        return rnd
    cycles.add_spend(cycle, proposal.cost_usd)
    rnd.summary = proposal.summary
    rnd.hypothesis = proposal.hypothesis
    rnd.files = proposal.files
    rnd.cited_lessons = proposal.cited_lessons
    rnd.author = proposal.author
    rnd.cost_usd = proposal.cost_usd
    rnd.status = Round.Status.PROPOSED
    rnd.proposed_at = now
    rnd.save()
    if cycle.proposed_at is None:
        Cycle.objects.filter(pk=cycle.pk).update(proposed_at=now)
        cycle.proposed_at = now
    return decide_gate(rnd, now=now)


def decide_gate(rnd: Round, *, now: datetime) -> Round:
    """Staff the decide gate: accept unattended (decide: auto), on a grant's word, or ask a person."""
    cycle = rnd.cycle
    gate = autonomy.gates(cycle.entity, now=now)
    if gate.decide == autonomy.AUTO and not rnd.refinement:
        _notice(cycle, "accepted", f"accepted under decide: auto: {rnd.summary}")
        accept(rnd, decided_by=cycle.actor, now=now, acceptance=autonomy.AUTO)
        return rnd
    if gate.grant is not None and autonomy.burn(gate.grant):
        _notice(
            cycle,
            "accepted",
            f"accepted on a loop:auto_accept grant (use {gate.grant.calls + 1} of "
            f"{gate.grant.max_calls}): {rnd.summary}",
        )
        accept(rnd, decided_by=cycle.actor, now=now, acceptance="grant")
        return rnd
    if gate.note:
        rnd.gate_note = gate.note
        Round.objects.filter(pk=rnd.pk).update(gate_note=gate.note)
    return ask_decide(rnd, now=now)


def _notice(cycle: Cycle, kind: str, text: str) -> None:
    from hitl.actions import post_notice

    post_notice(
        producer=PRODUCER,
        kind=kind,
        title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk}",
        text=text,
        subject=f"cycle {cycle.pk}",
    )


def ask_decide(rnd: Round, *, now: datetime) -> Round:
    """Put a proposed round before a person: a decide card expiring at the review deadline."""
    from evolution import cardtext

    shown = cardtext.decide_card(rnd)
    if rnd.gate_note:
        shown["text"] = f"{rnd.gate_note} — this round is yours to answer.\n\n{shown['text']}"
    options = [{"value": ACCEPT, "label": "Accept"}, {"value": SKIP, "label": "Skip"}]
    return _wait_on_person(rnd, Card.Kind.DECIDE, shown, options, now=now)


def _wait_on_person(
    rnd: Round, kind: str, shown: dict[str, str], options: list[dict[str, str]], *, now: datetime
) -> Round:
    """Open the round's card (``kind``, keyed by the round) expiring at the review deadline; the cycle waits on it.

    While it waits the round holds no claim on the entity (an unanswered card cannot freeze it).
    """
    from hitl.actions import open_card

    cycle = rnd.cycle
    deadline = _review_deadline(cycle, now)
    card = open_card(
        producer=PRODUCER,
        kind=kind,
        key=f"loop:{kind}:{rnd.pk}",
        title=shown["title"],
        subject=shown["subject"],
        subject_url=shown.get("subject_url", ""),
        text=shown["text"],
        expires_at=deadline,
        options=options,
        payload={"round": rnd.pk, "cycle": cycle.pk},
    )
    Round.objects.filter(pk=rnd.pk).update(card=card, review_deadline=deadline)
    rnd.card, rnd.review_deadline = card, deadline
    cycles.release_claim(cycle)
    cycles.advance(cycle, Cycle.Phase.DECIDING, now=now)
    return rnd


def fail(
    rnd: Round, error: str, *, paths: list[str] | None = None, now: datetime | None = None, unattended: bool = False
) -> Round:
    """Fail a round (a broken analysis or apply): the reason on a Retry card; the cycle waits on a person.

    A round nobody stands on (decide: auto) closes its cycle failed at once instead: no card, no lesson.
    """
    from evolution import cardtext

    now = now or timezone.now()
    cycle = rnd.cycle
    rnd.status = Round.Status.FAILED
    rnd.error = error
    if paths is not None:
        rnd.gate = {**(rnd.gate or {}), "refused": paths, "message": error}
    rnd.save(update_fields=["status", "error", "gate"])
    if unattended:
        cycles.settle(cycle, Cycle.Status.FAILED, reason=f"{error} (unattended: closed at once)", now=now, lesson=False)
        return rnd
    options = [{"value": RETRY, "label": "Retry"}, {"value": SKIP, "label": "Skip"}]
    _wait_on_person(rnd, Card.Kind.RETRY, cardtext.retry_card(rnd), options, now=now)
    log.warning("loop: %s: cycle %s round %s failed: %s", cycle.entity, cycle.pk, rnd.number, error)
    return rnd


# --- A person's answer ---------------------------------------------------------


def _actor(card: Card) -> str:
    user = card.responded_by
    return user.get_username() if user is not None else ""


def on_card(card: Card) -> None:
    """Hear a closed decide or retry card (registered with hitl for producer "loop")."""
    rnd = Round.objects.select_related("cycle", "cycle__entity").filter(card_id=card.pk).first()
    if rnd is None or rnd.cycle.status:
        return
    if rnd.status not in (Round.Status.PROPOSED, Round.Status.FAILED):
        return  # the card of a round already answered or replaced
    now = timezone.now()
    with transaction.atomic():
        if card.status in (Card.Status.EXPIRED, Card.Status.CANCELLED):
            _unanswered(rnd, card, now)
        elif card.kind == Card.Kind.DECIDE:
            _decided(rnd, card, now)
        else:
            _retried(rnd, card, now)


def _unanswered(rnd: Round, card: Card, now: datetime) -> None:
    cycle = rnd.cycle
    failed = rnd.status == Round.Status.FAILED
    expired = card.status == Card.Status.EXPIRED
    rnd.decided_by = cycle.actor if expired else (_actor(card) or cycle.actor)
    rnd.decided_at = now
    rnd.rejection = Round.Rejection.TIMEOUT if expired else Round.Rejection.HUMAN
    if not failed:
        rnd.status = Round.Status.SKIPPED
    rnd.save(update_fields=["decided_by", "decided_at", "rejection", "status"])
    words = f"nobody answered by {cycles.when(card.expires_at)}" if expired else f"{rnd.decided_by} cancelled the card"
    if failed:
        cycles.settle(cycle, Cycle.Status.FAILED, reason=f"{rnd.error}; {words}", now=now)
    else:
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason=f"skipped: {words}", now=now)


def _decided(rnd: Round, card: Card, now: datetime) -> None:
    cycle = rnd.cycle
    answer = card.answer or {}
    choice = answer.get("choice")
    who = _actor(card)
    rnd.decided_by, rnd.decided_at = who, now
    if choice == Card.REFINE:
        rnd.status = Round.Status.REFINED
        rnd.save(update_fields=["decided_by", "decided_at", "status"])
        start_round(cycle, refinement=answer.get("refinement", ""), parent=rnd, now=now)
        return
    if choice == SKIP:
        rnd.status = Round.Status.SKIPPED
        rnd.rejection = Round.Rejection.HUMAN
        rnd.decision_note = answer.get("note", "")
        rnd.save(update_fields=["decided_by", "decided_at", "status", "rejection", "decision_note"])
        note = f": {rnd.decision_note}" if rnd.decision_note else ""
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason=f"{who} skipped the proposal{note}", now=now)
        return
    accept(rnd, decided_by=who, now=now)


def accept(rnd: Round, *, decided_by: str, now: datetime, acceptance: str = "person") -> None:
    """Accept a proposed round: take the entity's claim and apply it (a proposal with nothing to apply skips)."""
    cycle = rnd.cycle
    rnd.decided_by, rnd.decided_at, rnd.acceptance = decided_by, now, acceptance
    Round.objects.filter(pk=rnd.pk).update(acceptance=acceptance)
    if not rnd.files:
        rnd.status = Round.Status.SKIPPED
        rnd.save(update_fields=["decided_by", "decided_at", "status"])
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason="the proposal has nothing to apply", now=now)
        return
    if not cycles.take_claim(cycle):
        rnd.status = Round.Status.SKIPPED
        rnd.save(update_fields=["decided_by", "decided_at", "status"])
        why = cycles.live_refusal(cycle.entity) or "another cycle holds the entity"
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason=f"accepted, but {why}", now=now)
        return
    rnd.status = Round.Status.ACCEPTED
    rnd.save(update_fields=["decided_by", "decided_at", "status"])
    cycles.advance(cycle, Cycle.Phase.APPLYING, now=now)
    cycles._enqueue("apply_round", rnd.pk)


def _retried(rnd: Round, card: Card, now: datetime) -> None:
    cycle = rnd.cycle
    answer = card.answer or {}
    choice = answer.get("choice")
    who = _actor(card)
    rnd.decided_by, rnd.decided_at = who, now
    rnd.decision_note = answer.get("note", "")
    rnd.save(update_fields=["decided_by", "decided_at", "decision_note"])
    if choice == SKIP:
        cycles.settle(cycle, Cycle.Status.FAILED, reason=f"{rnd.error}; {who} skipped the retry", now=now)
        return
    # A Retry is a re-analysis spent from the same recurrence budget: the cooldown holds it (R7.11).
    refused = cycles.ceiling_refusal(cycle.entity, now=now) if cycle.origin not in cycles.EXEMPT_ORIGINS else None
    if refused:
        cycles.settle(cycle, Cycle.Status.SKIPPED, reason=f"{who} asked for a retry, refused: {refused}", now=now)
        return
    start_round(cycle, refinement=answer.get("refinement", ""), parent=rnd, now=now)


# --- Apply ---------------------------------------------------------------------


def apply(round_id: int, *, now: datetime | None = None) -> Round | None:
    """Apply an accepted round: the diff gate, one commit on a loop branch, the pull request, the merge wait."""
    from evolution import apply as applying
    from evolution import merge
    from evolution.forges import ForgeError

    rnd = Round.objects.select_related("cycle", "cycle__entity").filter(pk=round_id).first()
    if rnd is None or rnd.status != Round.Status.ACCEPTED or rnd.cycle.status:
        return None
    cycle = rnd.cycle
    try:
        applied = applying.apply_round(rnd)
    except applying.ApplyFailed as exc:
        paths = list(getattr(exc, "paths", []) or [])
        return fail(rnd, f"the apply failed: {exc}", paths=paths, unattended=autonomy.unattended(rnd))
    except (ForgeError, SingularityError) as exc:
        return fail(rnd, f"the apply failed: {exc}", paths=[], unattended=autonomy.unattended(rnd))
    now = now or timezone.now()
    rnd.status = Round.Status.APPLIED
    rnd.base_sha = applied.base_sha
    rnd.branch = applied.branch
    rnd.head_sha = applied.head_sha
    rnd.pr_number = applied.pull.number
    rnd.pr_url = applied.pull.url
    rnd.gate = applied.gate
    rnd.merge_gate = autonomy.HUMAN
    rnd.save()
    Cycle.objects.filter(pk=cycle.pk).update(applied_at=now)
    cycle.applied_at = now
    merge.arm_wait(cycle, rnd, now)
    _notice_pr(cycle, rnd)
    merge_gate(rnd, now=now)
    return rnd


def merge_gate(rnd: Round, *, now: datetime) -> None:
    """Staff the merge gate: under merge: auto arm the forge's auto-merge (the loop never merges itself).

    A forge that refuses the arm, the breaker or the calibration hold demote the round to a person's merge.
    """
    from evolution.forges import ForgeError, get_forge

    cycle = rnd.cycle
    policy = autonomy.policy(cycle.entity)
    if policy.get("merge", autonomy.HUMAN) != autonomy.AUTO:
        return
    gate = autonomy.gates(cycle.entity, now=now)
    if gate.merge != autonomy.AUTO:
        _demote(rnd, gate.note)
        return
    method = policy.get("mergeMethod") or "merge"
    # Recorded before the arm: an arm on a green head merges at once, and the merge wait reads the gate.
    Round.objects.filter(pk=rnd.pk).update(merge_gate=autonomy.AUTO)
    rnd.merge_gate = autonomy.AUTO
    try:
        get_forge().arm_auto_merge(rnd.pr_number, method=method, sha=rnd.head_sha, by=cycle.actor)
    except ForgeError as exc:
        _demote(rnd, str(exc) if str(exc).startswith("auto-merge unavailable") else f"auto-merge unavailable: {exc}")


def _demote(rnd: Round, why: str) -> None:
    """The round's merge is a person's after all; say so on the round and in a notice."""
    Round.objects.filter(pk=rnd.pk).update(merge_gate=autonomy.HUMAN, gate_note=why)
    rnd.merge_gate, rnd.gate_note = autonomy.HUMAN, why
    _notice(rnd.cycle, "merge-demoted", f"PR #{rnd.pr_number} waits on a person's merge: {why}")


def _notice_pr(cycle: Cycle, rnd: Round) -> None:
    from hitl.actions import post_notice

    post_notice(
        producer=PRODUCER,
        kind="pr-opened",
        title=f"{cycle.entity.name or cycle.entity.slug}: PR #{rnd.pr_number} opened (cycle {cycle.pk})",
        text=f"{rnd.summary}\n\nA person merges it: {rnd.pr_url}",
        url=rnd.pr_url,
        subject=f"cycle {cycle.pk}",
    )


def sweep_lost(*, now: datetime | None = None, after: timedelta = timedelta(minutes=30)) -> int:
    """Fail rounds whose analysis was claimed by a worker that died (claimed longer than ``after`` ago)."""
    now = now or timezone.now()
    lost = 0
    for rnd in Round.objects.select_related("cycle", "cycle__entity").filter(
        status=Round.Status.ANALYSING, cycle__status="", cycle__moved_at__lt=now - after
    ):
        if (rnd.brief or {}).get("_claimed"):
            fail(rnd, "the analysis was lost: its worker stopped before answering", now=now)
            lost += 1
        else:
            cycles._enqueue("analyse_round", rnd.pk)
    return lost
