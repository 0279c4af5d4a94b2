"""The decide gate: a proposed round is accepted unattended, on a grant's word, or put before a person (seed 003).

Under ``decide: human`` a decide card asks a person (Accept / Skip with a
note / a reply that refines); a broken analysis or apply puts a Retry card
before them. Every answer is read from the round's own card, once: an
answered or expired card can never reach the round that replaced it. Each
function answers the machine with what happened (``evolution.loop.steps``);
the machine moves the cycle and starts the next step.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from evolution.core import cycles
from evolution.core.outcomes import aside_words
from evolution.loop import cardtext
from evolution.loop.steps import Move, Settle
from evolution.models import Cycle, Idea, Lesson, Round
from evolution.steering import autonomy, groups
from evolution.steering.supervision import groups_of
from grading.models import Entity
from hitl.models import Card

log = logging.getLogger(__name__)

PRODUCER = "loop"
ACCEPT, SKIP, RETRY = "accept", "skip", "retry"


def review_hours(cycle: Cycle) -> float:
    """reviewDeadlineHours as it stands now (72 by default): what a round opening now keeps for its waits."""
    return float(cycles.loop_terms(cycle.entity).get("reviewDeadlineHours") or 72)


def _review_deadline(rnd: Round, now: datetime) -> datetime:
    """A wait's deadline: the round's own reviewDeadlineHours, read once as it opened (R9.6: an edit reaches the
    next round, never a wait of this one — its decide card and its Retry card alike)."""
    hours = rnd.review_hours if rnd.review_hours is not None else review_hours(rnd.cycle)
    return now + timedelta(hours=float(hours))


def new_round(cycle: Cycle, *, refinement: str = "", parent: Round | None = None, now: datetime) -> Round:
    """Write the next round of ``cycle`` (a refinement or a retry), waiting for its analysis; take the claim back."""
    number = (cycle.rounds.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    new = Round.objects.create(
        cycle=cycle,
        number=number,
        parent=parent,
        refinement=refinement,
        status=Round.Status.ANALYSING,
        created_at=now,
        review_hours=review_hours(cycle),
    )
    cycles.take_claim(cycle)
    return new


def notice(cycle: Cycle, kind: str, text: str) -> None:
    from hitl.actions import post_notice

    post_notice(
        producer=PRODUCER,
        kind=kind,
        title=f"{cycle.entity.name or cycle.entity.slug}: cycle {cycle.pk}",
        text=text,
        subject=f"cycle {cycle.pk}",
    )


# --- Staffing the gate ---------------------------------------------------------


def gate(rnd: Round, *, now: datetime) -> str:
    """Who answers a proposed round: "auto" (decide: auto), "grant" (a loop:auto_accept grant's use), or "person"."""
    cycle = rnd.cycle
    gates = autonomy.gates(cycle.entity, now=now)
    if gates.decide == autonomy.AUTO and not rnd.refinement:
        notice(cycle, "accepted", f"accepted under decide: auto: {rnd.summary}")
        return autonomy.AUTO
    if gates.grant is not None and autonomy.burn(gates.grant):
        notice(
            cycle,
            "accepted",
            f"accepted on a loop:auto_accept grant (use {gates.grant.calls + 1} of "
            f"{gates.grant.max_calls}): {rnd.summary}",
        )
        return "grant"
    if gates.note:
        rnd.gate_note = gates.note
        Round.objects.filter(pk=rnd.pk).update(gate_note=gates.note)
    return "person"


def ask_decide(rnd: Round, *, now: datetime) -> Move:
    """Put a proposed round before a person: a decide card expiring at the review deadline."""
    shown = cardtext.decide_card(rnd)
    if rnd.gate_note:
        shown["text"] = f"{rnd.gate_note} — this round is yours to answer.\n\n{shown['text']}"
    options = [{"value": ACCEPT, "label": "Accept"}, {"value": SKIP, "label": "Skip"}]
    return _wait_on_person(rnd, Card.Kind.DECIDE, shown, options, now=now)


def ask_retry(rnd: Round, *, now: datetime) -> Move:
    """Put a failed round before a person: a Retry card with what failed and the offending paths."""
    options = [{"value": RETRY, "label": "Retry"}, {"value": SKIP, "label": "Skip"}]
    log.warning("loop: %s: cycle %s round %s failed: %s", rnd.cycle.entity, rnd.cycle.pk, rnd.number, rnd.error)
    return _wait_on_person(rnd, Card.Kind.RETRY, cardtext.retry_card(rnd), options, now=now)


def _wait_on_person(
    rnd: Round, kind: str, shown: dict[str, str], options: list[dict[str, str]], *, now: datetime
) -> Move:
    """Open the round's card (``kind``, keyed by the round) expiring at the review deadline; the cycle waits on it.

    While it waits the round holds no claim on the entity (an unanswered card cannot freeze it).
    """
    from hitl.actions import open_card

    cycle = rnd.cycle
    deadline = _review_deadline(rnd, now)
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
    return Move(Cycle.Phase.DECIDING, at=now)


def mark_failed(rnd: Round, error: str, *, paths: list[str] | None = None) -> None:
    """Write a broken analysis or apply on its round (the reason, and the offending paths for the Retry card)."""
    rnd.status = Round.Status.FAILED
    rnd.error = error
    if paths is not None:
        rnd.gate = {**(rnd.gate or {}), "refused": paths, "message": error}
    rnd.save(update_fields=["status", "error", "gate"])


# --- Accepting -----------------------------------------------------------------


def accept(rnd: Round, *, decided_by: str, now: datetime, acceptance: str = "person") -> Settle | Move:
    """Accept a proposed round: take the entity's claim and move to the apply (a proposal with nothing to apply skips).

    Call inside a transaction: the lock groups' rows are locked while the holder is checked and the claim taken, so
    of two members accepted at once exactly one wins; the loser is set aside naming the holder (its idea requeued).
    The Accept stays on the round as made (``decided_by``, ``acceptance``); what set it aside is ``set_aside``.
    """
    cycle = rnd.cycle
    rnd.decided_by, rnd.decided_at, rnd.acceptance = decided_by, now, acceptance
    Round.objects.filter(pk=rnd.pk).update(acceptance=acceptance)
    if not rnd.files:
        rnd.status = Round.Status.SKIPPED
        rnd.save(update_fields=["decided_by", "decided_at", "status"])
        return Settle(Cycle.Status.SKIPPED, "the proposal has nothing to apply")
    groups.lock_rows(cycle.entity)  # the arbiter: two members accepted at once serialize here
    holder = groups.held_by(cycle.entity, besides=cycle)
    if holder is not None:
        _requeue_idea(cycle)
        return put_aside(rnd, holder.by_words())
    if not cycles.take_claim(cycle):
        return put_aside(rnd, cycles.live_refusal(cycle.entity) or "another cycle holds the entity")
    rnd.status = Round.Status.ACCEPTED
    rnd.save(update_fields=["decided_by", "decided_at", "status"])
    return Move(Cycle.Phase.APPLYING, at=now)


def put_aside(rnd: Round, why: str) -> Settle:
    """Set a round aside (skipped) for ``why``, keeping its Accept as made if it had one; the settle says both.

    Not a rejection: its lesson reads "set aside" and the next proposer is never told a person turned it down.
    """
    rnd.status, rnd.rejection, rnd.set_aside = Round.Status.SKIPPED, Round.Rejection.ASIDE, why
    if not rnd.decided_by:
        rnd.decided_by, rnd.decided_at = rnd.cycle.actor, timezone.now()
    rnd.save(update_fields=["decided_by", "decided_at", "status", "rejection", "set_aside"])
    return Settle(Cycle.Status.SKIPPED, aside_words(rnd))


# --- One proposal per change (issue 31) ------------------------------------------


def _change(files: Any) -> frozenset[tuple[str, str | None]]:
    """A proposal's change as a comparable value: each path with its whole new content (None deletes)."""
    return frozenset(
        (str(f.get("path")), f.get("content")) for f in files or [] if isinstance(f, dict) and f.get("path")
    )


def _day(instant: datetime | None) -> str:
    return timezone.localtime(instant).strftime("%Y-%m-%d") if instant else "an unknown day"


def repeat_of(rnd: Round) -> str | None:
    """The sentence when ``rnd`` proposes the very change a person skipped, or the pre-merge check closed, among
    the lessons its proposer was shown (its Recall rows); None otherwise.

    "the same change was skipped by alice on 2026-12-01: off-brand".
    """
    mine = _change(rnd.files)
    if not mine:
        return None
    shown = Lesson.objects.filter(recalls__round=rnd).select_related("round").order_by("-created_at", "-pk")
    for lesson in shown:
        old = lesson.round
        if _change(old.files) != mine:
            continue
        if old.rejection == Round.Rejection.HUMAN and old.status == Round.Status.SKIPPED:
            note = f": {old.decision_note}" if old.decision_note else ""
            return f"the same change was skipped by {old.decided_by} on {_day(old.decided_at)}{note}"
        verdict = old.check_verdict if isinstance(old.check_verdict, dict) else {}
        if old.status == Round.Status.CLOSED and verdict.get("verdict") == "regressed":
            why = f": {verdict['reason']}" if verdict.get("reason") else ""
            pr = f" (PR #{old.pr_number})" if old.pr_number else ""
            return f"the same change was closed by the pre-merge check{pr} on {_day(lesson.created_at)}{why}"
    return None


def waiting(entity: Entity, *, besides: Cycle | None = None) -> list[Round]:
    """The entity's proposals waiting on a pending decide card, oldest first (``besides``' left out)."""
    rounds = Round.objects.filter(
        cycle__entity=entity,
        cycle__status="",
        status=Round.Status.PROPOSED,
        card__status=Card.Status.PENDING,
        card__kind=Card.Kind.DECIDE,
    ).select_related("cycle", "cycle__entity", "card")
    if besides is not None:
        rounds = rounds.exclude(cycle=besides)
    return list(rounds.order_by("proposed_at", "pk"))


#: The line a waiting decide card carries about the entity's other waiting proposals (rewritten as they change).
OTHERS = re.compile(r"\n*\d+ other proposals? for .+? waits?; accepting (?:one|either) sets the others? aside\.$")


def others_line(others: int, name: str) -> str:
    """ "2 other proposals for urgency wait; accepting one sets the others aside." ("" with none)."""
    if others <= 0:
        return ""
    if others == 1:
        return f"1 other proposal for {name} waits; accepting either sets the other aside."
    return f"{others} other proposals for {name} wait; accepting one sets the others aside."


def announce_waiting(entity: Entity) -> int:
    """Say on each of the entity's waiting decide cards how many other proposals wait with it (its sent messages
    edited to match); return how many cards changed."""
    from hitl.actions import revise_card

    rounds = waiting(entity)
    name = entity.name or entity.slug
    changed = 0
    for rnd in rounds:
        card = rnd.card
        base = OTHERS.sub("", card.text)
        line = others_line(len(rounds) - 1, name)
        changed += revise_card(card.pk, text=f"{base}\n\n{line}" if line else base)
    return changed


def mooted(rnd: Round) -> list[tuple[Round, str]]:
    """What ``rnd``'s Accept (it took the entity and its lock groups) leaves moot, each with why: the entity's other
    waiting proposals, and the waiting proposals of siblings its lock groups now hold."""
    entity = rnd.cycle.entity
    said = f"{aside_words_of_accept(rnd)} another proposal for {entity.name or entity.slug} (cycle {rnd.cycle_id})"
    moot = [(other, said) for other in waiting(entity, besides=rnd.cycle)]
    names = groups_of(entity)
    for sibling in {m.pk: m for ms in groups.members_of(names, besides=entity).values() for m in ms}.values():
        for other in waiting(sibling):
            holder = groups.held_by(sibling, besides=other.cycle)
            if holder is not None:
                moot.append((other, holder.by_words()))
    return moot


def aside_words_of_accept(rnd: Round) -> str:
    """ "alice accepted", "decide: auto accepted", "a loop:auto_accept grant accepted" — the Accept that sets others
    aside."""
    if rnd.acceptance == autonomy.AUTO:
        return "decide: auto accepted"
    if rnd.acceptance == "grant":
        return "a loop:auto_accept grant accepted"
    return f"{rnd.decided_by} accepted"


def _requeue_idea(cycle: Cycle) -> None:
    """Nothing was applied, so the idea the cycle opened on was never tested: it goes back to its old place."""
    if cycle.idea_id is not None:
        Idea.objects.filter(pk=cycle.idea_id, status=Idea.Status.TAKEN).update(status=Idea.Status.QUEUED, cycle=None)


# --- A person's answer ---------------------------------------------------------


class Refine:
    """A person replied (or asked for a retry): a new round is analysed with ``refinement``, child of ``parent``."""

    def __init__(self, refinement: str, parent: Round) -> None:
        self.refinement, self.parent = refinement, parent


class Accepted:
    """A person pressed Accept."""

    def __init__(self, decided_by: str) -> None:
        self.decided_by = decided_by


def _actor(card: Card) -> str:
    user = card.responded_by
    return user.get_username() if user is not None else ""


def round_of(card: Card) -> Round | None:
    """The round waiting on ``card`` (a decide or retry card), or None when the card's round was answered or replaced."""
    rnd = Round.objects.select_related("cycle", "cycle__entity").filter(card_id=card.pk).first()
    if rnd is None or rnd.cycle.status:
        return None
    if rnd.status not in (Round.Status.PROPOSED, Round.Status.FAILED):
        return None
    return rnd


def answer(rnd: Round, card: Card, now: datetime) -> Settle | Refine | Accepted:
    """Read a closed card's answer onto its round and say what it asks for."""
    if card.status in (Card.Status.EXPIRED, Card.Status.CANCELLED):
        return _unanswered(rnd, card, now)
    if card.kind == Card.Kind.DECIDE:
        return _decided(rnd, card, now)
    return _retried(rnd, card, now)


def _unanswered(rnd: Round, card: Card, now: datetime) -> Settle:
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
        return Settle(Cycle.Status.FAILED, f"{rnd.error}; {words}")
    return Settle(Cycle.Status.SKIPPED, f"skipped: {words}")


def _decided(rnd: Round, card: Card, now: datetime) -> Settle | Refine | Accepted:
    answered = card.answer or {}
    choice = answered.get("choice")
    who = _actor(card)
    rnd.decided_by, rnd.decided_at = who, now
    if choice == Card.REFINE:
        rnd.status = Round.Status.REFINED
        rnd.save(update_fields=["decided_by", "decided_at", "status"])
        return Refine(answered.get("refinement", ""), rnd)
    if choice == SKIP:
        rnd.status = Round.Status.SKIPPED
        rnd.rejection = Round.Rejection.HUMAN
        rnd.decision_note = answered.get("note", "")
        rnd.save(update_fields=["decided_by", "decided_at", "status", "rejection", "decision_note"])
        note = f": {rnd.decision_note}" if rnd.decision_note else ""
        return Settle(Cycle.Status.SKIPPED, f"{who} skipped the proposal{note}")
    return Accepted(who)


def _retried(rnd: Round, card: Card, now: datetime) -> Settle | Refine:
    cycle = rnd.cycle
    answered = card.answer or {}
    choice = answered.get("choice")
    who = _actor(card)
    rnd.decided_by, rnd.decided_at = who, now
    rnd.decision_note = answered.get("note", "")
    rnd.save(update_fields=["decided_by", "decided_at", "decision_note"])
    if choice == SKIP:
        return Settle(Cycle.Status.FAILED, f"{rnd.error}; {who} skipped the retry")
    if choice == Card.REFINE:
        # A reply to either card is a refinement, which the cooldown never holds (R7.10).
        return Refine(answered.get("refinement", ""), rnd)
    # A Retry is a re-analysis spent from the same recurrence budget: the cooldown holds it (R7.11).
    refused = cycles.ceiling_refusal(cycle.entity, now=now) if cycle.origin not in cycles.EXEMPT_ORIGINS else None
    if refused:
        return Settle(Cycle.Status.SKIPPED, f"{who} asked for a retry, refused: {refused}")
    return Refine(answered.get("refinement", ""), rnd)
