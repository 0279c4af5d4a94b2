"""Ideas: a person's hypothesis for one entity, next in line (seed 003 "Ideas — a human's hypothesis").

The queue: ``write`` checks and queues an idea (a refusal, ``IdeaRefused``,
writes nothing), first in first out; an agent's waits on a person's approval
card (hitl kind "grant", producer ``loop-idea``). Whoever opens the entity's
next cycle opens it on the oldest queued idea (``next_idea``, read at the
opening); ``withdraw`` takes a queued idea back; ``hear_back`` tells the
author how the idea's cycle settled. How a post asks for its cycle is the
loop's business (``evolution.loop.intake``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evolution.core import cycles
from evolution.core.outcomes import phase_label
from evolution.models import Cycle, Idea, Lesson
from evolution.steering import asks
from grading.models import Entity

log = logging.getLogger(__name__)

#: At most this many characters (after trimming): idea.md is never trimmed, so the post is bounded.
MAX_CHARS = 4000
#: The approval card's producer (registered in ``evolution.hooks.connect``).
PRODUCER = "loop-idea"
APPROVE, DECLINE = "approve", "decline"
AWAITING_APPROVAL = "waiting on a person's approval"
PICKED_UP = "picked up within the hour"
#: How much of an idea a notice or a card quotes.
QUOTE_CHARS = 500
TELEGRAM_PREFIX = "telegram:"


class IdeaRefused(Exception):
    """A post refused with nothing written: ``code`` is "precondition", "not_found" or "too_many_pending",
    ``reason`` says why."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Posted:
    """What a post came to: the idea, whether its cycle opened now, why not, and the cycle it opened."""

    idea: Idea
    opened: bool
    reason: str
    cycle: Cycle | None = None


@dataclass(frozen=True)
class Withdrawn:
    """The idea's state after a withdraw: withdrawn or not, and the sentence saying so."""

    idea: Idea
    withdrawn: bool
    reason: str
    #: The approval card an agent's withdraw of someone else's idea waits on (None: nothing waits).
    card: Any = None


# --- Refusals -----------------------------------------------------------------


def entity_refusal(entity: Entity) -> str | None:
    """Why ``entity`` takes no idea (not in the loop, switched off, gone from the brain), else None."""
    if not entity.present or entity.load_error:
        return f"{entity} does not load: {entity.load_error or 'it is gone from the brain'}"
    loop = cycles.loop_terms(entity)
    if not entity.loop_enabled or loop.get("enabled") is False:
        return f"the loop is off for {entity}"
    if not entity.evaluation_enabled:
        return f"grading is off for {entity}: the loop reads graded runs only"
    return None


def text_refusal(text: str) -> str | None:
    """Why ``text`` is not an idea (empty, or longer than MAX_CHARS after trimming), else None."""
    stripped = (text or "").strip()
    if not stripped:
        return "the idea is empty: write the hypothesis to try"
    if len(stripped) > MAX_CHARS:
        return f"the idea is {len(stripped)} characters long; at most {MAX_CHARS}"
    return None


def unsettled_cycle(entity: Entity) -> Cycle | None:
    """The cycle that holds the idea line: the claim holder, else the oldest cycle not yet settled."""
    holder = Cycle.objects.filter(claim=entity.pk).first()
    if holder is not None:
        return holder
    return Cycle.objects.filter(entity=entity).exclude(phase=Cycle.Phase.SETTLED).order_by("started_at", "id").first()


def unsettled_refusal(entity: Entity) -> str | None:
    """The sentence when a cycle of ``entity`` is not settled yet (an idea waits on it), else None.

    Unlike an ordinary cycle, an idea waits even on a proposal whose decide
    card holds no claim: ideas run strictly one after another (R18.20).
    """
    line = unsettled_cycle(entity)
    if line is None:
        return None
    return cycles.live_refusal(entity) or f"cycle {line.pk} is live ({phase_label(line.phase)})"


# --- The queue ----------------------------------------------------------------


def _queued(entity: Entity | int) -> Any:
    entity_id = entity if isinstance(entity, int) else entity.pk
    return Idea.objects.filter(entity_id=entity_id, status=Idea.Status.QUEUED, approved=True)


def next_idea(entity: Any) -> Idea | None:
    """The entity's oldest queued, approved idea (first in first out), or None."""
    return _queued(entity).order_by("created_at", "id").first()


def place(idea: Idea) -> str:
    """Where a queued idea stands: "next", "#2 in queue", the approval it waits on; "" once it left the queue."""
    if idea.status != Idea.Status.QUEUED:
        return ""
    if not idea.approved:
        return AWAITING_APPROVAL
    ahead = (
        _queued(idea.entity_id)
        .filter(created_at__lte=idea.created_at)
        .exclude(created_at=idea.created_at, id__gte=idea.pk)
        .count()
    )
    return "next" if ahead == 0 else f"#{ahead + 1} in queue"


def places(listed: list[Idea]) -> dict[int, str]:
    """The place of each idea in ``listed`` (which holds whole queues, oldest first), without a query per idea."""
    answer: dict[int, str] = {}
    ahead: dict[int, int] = {}
    for idea in sorted(listed, key=lambda i: (i.created_at, i.pk)):
        if idea.status != Idea.Status.QUEUED:
            answer[idea.pk] = ""
        elif not idea.approved:
            answer[idea.pk] = AWAITING_APPROVAL
        else:
            n = ahead.get(idea.entity_id, 0)
            answer[idea.pk] = "next" if n == 0 else f"#{n + 1} in queue"
            ahead[idea.entity_id] = n + 1
    return answer


def state_of(idea: Idea) -> str:
    """An idea's status as the seed reads it: queued, awaiting approval, withdrawn, live, or its cycle's terminal."""
    if idea.status == Idea.Status.QUEUED:
        return "queued" if idea.approved else "awaiting approval"
    if idea.status == Idea.Status.WITHDRAWN:
        return "withdrawn"
    cycle = idea.cycle
    if cycle is None:
        return "taken"
    return cycle.status or "live"


# --- Posting and asking -------------------------------------------------------


def write(
    entity: Entity | None,
    text: str,
    *,
    author: str,
    is_agent: bool = False,
    asker: str = "",
    reply_to: str = "",
    now: datetime | None = None,
) -> Idea:
    """Queue an idea for ``entity`` (an agent's waits on a person's approval card) and return it.

    Raises IdeaRefused — not_found when there is no entity, precondition when
    the entity is not in the loop, switched off or gone, or the text is empty
    or longer than MAX_CHARS, too_many_pending when the agent (``asker``,
    else ``author``) has as many cards waiting on people as it may — and then
    nothing is written.
    """
    if entity is None:
        raise IdeaRefused("not_found", "no such entity")
    why = entity_refusal(entity) or text_refusal(text)
    if why:
        raise IdeaRefused("precondition", why)
    asker = asker or author
    if is_agent:
        too_many = asks.over_cap(asker)
        if too_many:
            raise IdeaRefused(asks.TOO_MANY, too_many)
    now = now or timezone.now()
    with transaction.atomic():
        idea = Idea.objects.create(
            entity=entity,
            text=text.strip(),
            author=author,
            reply_to=reply_to,
            approved=not is_agent,
            created_at=now,
        )
        if is_agent:
            _ask_approval(idea, asker=asker, now=now)
    return idea


def withdraw(
    idea: Idea, actor: str, *, user: Any | None = None, via: str = "dashboard", now: datetime | None = None
) -> Withdrawn:
    """Withdraw a queued idea and answer its state after the call.

    Idempotent: an idea already withdrawn answers withdrawn True with the same
    sentence. An idea a cycle took stays that cycle's hypothesis (withdrawn
    False, naming the cycle). The withdrawal and a cycle's take are both
    conditional on the idea being queued, so only one of them wins. A pending
    approval card is cancelled when ``user`` (a person) withdraws.
    """
    now = now or timezone.now()
    written = Idea.objects.filter(pk=idea.pk, status=Idea.Status.QUEUED).update(
        status=Idea.Status.WITHDRAWN, withdrawn_at=now
    )
    idea.refresh_from_db()
    if written:
        log.info("loop: %s: idea %s withdrawn by %s", idea.entity, idea.pk, actor)
        _close_approval(idea, user, via)
    if idea.status == Idea.Status.WITHDRAWN:
        return Withdrawn(idea, True, f"idea {idea.pk} is withdrawn: no cycle will take it")
    return Withdrawn(
        idea, False, f"idea {idea.pk} was already taken by cycle {idea.cycle_id}; stop it at the decide gate instead"
    )


# --- An agent's withdraw of someone else's idea: a person's approval (R18.4, R18.13) ------------------

#: The hitl producer of the approval cards an agent's withdraw of someone else's idea waits on.
WITHDRAW_PRODUCER = "loop-idea-withdraw"


def ask_withdraw(idea: Idea, *, asker: str, now: datetime | None = None) -> Withdrawn:
    """An agent's withdraw of an idea it did not post: open (or find) a person's approval card; the idea stays
    queued until they approve. An idea no longer queued answers its state as ``withdraw`` would; IdeaRefused
    (too_many_pending) when the agent's asks are at the cap, nothing written."""
    from hitl.actions import open_card
    from hitl.models import Card

    now = now or timezone.now()
    if idea.status != Idea.Status.QUEUED:
        return withdraw(idea, asker, now=now)
    waiting = (
        Card.objects.filter(
            producer=WITHDRAW_PRODUCER, status=Card.Status.PENDING, expires_at__gt=now, payload__idea=idea.pk
        )
        .filter(payload__asker=asker)
        .first()
    )
    if waiting is None:
        too_many = asks.over_cap(asker)
        if too_many:
            raise IdeaRefused(asks.TOO_MANY, too_many)
        waiting = open_card(
            producer=WITHDRAW_PRODUCER,
            kind=Card.Kind.GRANT,
            key=f"{WITHDRAW_PRODUCER}:{idea.pk}:{now.timestamp()}",
            title=f"Approve: withdraw idea {idea.pk} for {idea.entity}"[:200],
            subject=str(idea.entity)[:200],
            subject_url=_absolute(idea.entity.get_absolute_url()),
            text=(
                f"{asker} asks to withdraw idea {idea.pk} for {idea.entity}, posted by {idea.author}: "
                f"{quote(idea.text)}\n\nApprove withdraws it (no cycle will take it); Decline leaves it queued."
            ),
            expires_at=_review_deadline(idea.entity, now),
            options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
            payload={"op": "withdraw", "idea": idea.pk, asks.ASKER: asker},
        )
    reason = f"waiting on a person's approval (card {waiting.pk}): idea {idea.pk} was posted by {idea.author}"
    return Withdrawn(idea, False, reason, card=waiting)


def on_withdraw_card(card: Any) -> None:
    """Hear a closed withdraw approval card: on Approve, withdraw the idea; anything else leaves it queued."""
    from hitl.models import Card

    payload = card.payload or {}
    idea = Idea.objects.select_related("entity", "card").filter(pk=payload.get("idea")).first()
    if idea is None:
        log.warning("loop: withdraw card %s names no idea (%s)", card.pk, payload)
        return
    if card.status != Card.Status.ANSWERED or (card.answer or {}).get("choice") != APPROVE:
        log.info("loop: idea %s stays: the withdraw was not approved (%s)", idea.pk, card.status)
        return
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    answer = withdraw(idea, f"{payload.get(asks.ASKER, 'an agent')} (approved by {person})", user=card.responded_by)
    log.info("loop: %s: %s", idea.entity, answer.reason)


# --- An agent's post: a person's approval -----------------------------------------


def _review_deadline(entity: Entity, now: datetime) -> datetime:
    hours = cycles.loop_terms(entity).get("reviewDeadlineHours") or 72
    return now + timedelta(hours=float(hours))


def _absolute(path: str) -> str:
    base = (settings.SINGULARITY_PUBLIC_URL or "").rstrip("/")
    return f"{base}{path}" if base else path


def quote(text: str) -> str:
    """The idea quoted for a card or a notice (its first QUOTE_CHARS characters)."""
    text = text.strip()
    return f"“{text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + '…'}”"


def _ask_approval(idea: Idea, *, asker: str, now: datetime) -> None:
    """Open the approval card of an agent's idea (Approve / Decline, expiring at the review deadline)."""
    from hitl.actions import open_card
    from hitl.models import Card

    entity = idea.entity
    card = open_card(
        producer=PRODUCER,
        kind=Card.Kind.GRANT,
        key=f"loop:idea:{idea.pk}",
        title=f"Idea for {entity.name or entity.slug}: let it start a cycle?",
        subject=str(entity),
        subject_url=_absolute(entity.get_absolute_url()),
        text=(
            f"{idea.author} posted an idea for {entity}:\n\n{quote(idea.text)}\n\n"
            "Approve queues it: the entity's next cycle works it, ahead of the loop's own rule and cooldown. "
            "Decline drops it."
        ),
        expires_at=_review_deadline(entity, now),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={"idea": idea.pk, asks.ASKER: asker},
    )
    Idea.objects.filter(pk=idea.pk).update(card=card)
    idea.card = card


def _close_approval(idea: Idea, user: Any | None, via: str) -> None:
    """Cancel the pending approval card of a withdrawn idea, when a person withdrew it."""
    from hitl.actions import cancel_card

    card = idea.card
    if card is None or not card.is_pending or user is None or not getattr(user, "is_authenticated", False):
        return
    result = cancel_card(card.pk, user=user, is_agent=False, note="the idea was withdrawn", via=via)
    if not result.ok:
        log.info("loop: idea %s: its approval card stays: %s", idea.pk, result.detail)


# --- What the head of the queue waits on -----------------------------------------


def _pending_card(cycle: Cycle) -> Any | None:
    for rnd in cycle.rounds.select_related("card").order_by("-number"):
        if rnd.card is not None and rnd.card.is_pending:
            return rnd, rnd.card
    return None


def cycle_words(cycle: Cycle) -> str:
    """What ``cycle`` (holding the idea line) is doing, with its own deadline and whose move it is."""
    phase = cycle.phase
    if phase == Cycle.Phase.DECIDING:
        pending = _pending_card(cycle)
        if pending is not None:
            rnd, card = pending
            return (
                f"cycle {cycle.pk} · r{rnd.number}: your answer to its {card.kind} card, "
                f"until {cycles.when(card.expires_at)}"
            )
        return f"cycle {cycle.pk}: a person's answer"
    if phase == Cycle.Phase.CHECKING:
        rnd = cycle.rounds.exclude(pr_number=None).order_by("-number").first()
        name = f"PR #{rnd.pr_number}" if rnd else "its PR"
        by = f", answering by {cycles.when(cycle.check_deadline)}" if cycle.check_deadline else ""
        return f"cycle {cycle.pk}: the pre-merge check of {name}{by}"
    if phase == Cycle.Phase.MERGE_WAIT:
        rnd = cycle.rounds.exclude(pr_number=None).order_by("-number").first()
        name = f"PR #{rnd.pr_number}" if rnd else "its PR"
        by = f", until {cycles.when(cycle.merge_deadline)}" if cycle.merge_deadline else ""
        if rnd is not None and rnd.merge_gate == "auto":
            return f"cycle {cycle.pk}: {name} merging once its checks pass{by}"
        return f"cycle {cycle.pk}: your merge of {name}{by}"
    if phase == Cycle.Phase.WATCHING:
        tally = f" ({cycle.watch_tally})" if cycle.watch_tally else ""
        by = f", settling by {cycles.when(cycle.watch_deadline)}" if cycle.watch_deadline else ""
        return f"cycle {cycle.pk} watching its change{tally}{by}"
    if phase == Cycle.Phase.REVERTING:
        rnd = cycle.rounds.exclude(revert_pr_number=None).order_by("-number").first()
        name = f"revert PR #{rnd.revert_pr_number}" if rnd else "its revert PR"
        by = f", until {cycles.when(rnd.revert_deadline)}" if rnd and rnd.revert_deadline else ""
        return f"cycle {cycle.pk}'s regressed change: {name} merging or closing{by}"
    return f"cycle {cycle.pk}, {phase_label(cycle.phase).lower()}"


def bucket(entity: Entity) -> dict[str, Any]:
    """The entity's ideas for the Ideas panel: queued (oldest first, with ``place``), taken (newest first, with
    ``came_to``, what its cycle came to), withdrawn (newest first)."""
    ideas = list(Idea.objects.filter(entity=entity).select_related("cycle").order_by("created_at", "id"))
    where = places(ideas)
    queued = [i for i in ideas if i.status == Idea.Status.QUEUED]
    for idea in queued:
        idea.place = where[idea.pk]  # type: ignore[attr-defined]
    from evolution.core.outcomes import status_label

    taken = [i for i in ideas if i.status == Idea.Status.TAKEN]
    taken.reverse()
    for idea in taken:
        idea.came_to = status_label(idea.cycle) if idea.cycle is not None else "taken"  # type: ignore[attr-defined]
    withdrawn = [i for i in ideas if i.status == Idea.Status.WITHDRAWN]
    withdrawn.reverse()
    return {"queued": queued, "taken": taken, "withdrawn": withdrawn}


# --- Wiring -------------------------------------------------------------------------


# --- Hearing back -------------------------------------------------------------------

OUTCOME_WORDS = {
    Cycle.Status.VALIDATED: "validated: the change is kept",
    Cycle.Status.REGRESSED: "regressed: the change is reverted",
    Cycle.Status.UNVALIDATED: "inconclusive: nothing measured it either way",
    Cycle.Status.SKIPPED: "skipped: nothing was changed",
    Cycle.Status.FAILED: "failed",
}


def _number(value: Any) -> str:
    return f"{value:+g}" if isinstance(value, int | float) else str(value)


def _delta_words(item: dict[str, Any]) -> str:
    """One measured metric as a person reads it ("accuracy 0.6 → 0.9", "accuracy +0.2")."""
    name = item.get("metric") or item.get("id") or "a metric"
    for before, after in (("baseline", "observed"), ("before", "after")):
        if before in item and after in item:
            return f"{name} {item[before]} → {item[after]}"
    for key in ("delta", "gain"):
        if key in item:
            return f"{name} {_number(item[key])}"
    return str(name)


def _why(cycle: Cycle) -> str:
    """Why the cycle ended where it did: its measured deltas, else the proposal's summary, else the error."""
    lessons = list(Lesson.objects.filter(cycle=cycle).order_by("-id"))
    measured = next((lesson.per_metric for lesson in lessons if lesson.per_metric), None)
    if measured and cycle.status in (Cycle.Status.VALIDATED, Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED):
        return "Measured: " + "; ".join(_delta_words(item) for item in measured if isinstance(item, dict)) + "."
    rnd = cycle.rounds.order_by("-number").first()
    if cycle.status == Cycle.Status.FAILED and rnd is not None and rnd.error:
        return f"The error: {rnd.error}"
    if cycle.status == Cycle.Status.SKIPPED and rnd is not None and rnd.summary.strip():
        return f"The proposal: {rnd.summary.strip()}" + (f" ({cycle.reason})" if cycle.reason else "")
    return cycle.reason


def hear_back_text(cycle: Cycle) -> tuple[str, str]:
    """The title and text that tell an idea's author how its cycle settled."""
    idea = cycle.idea
    entity = cycle.entity
    words = OUTCOME_WORDS.get(cycle.status, cycle.status)
    if cycle.status == Cycle.Status.REGRESSED and cycle.phase == Cycle.Phase.REVERTING:
        words = "regressed: a revert PR is open"
    title = f"Your idea for {entity.name or entity.slug}: {words}"
    why = _why(cycle)
    text = f"Idea {idea.pk}, {quote(idea.text)}, ran as cycle {cycle.pk}, which settled {words}."
    return title, f"{text}\n{why}" if why else text


def _told_elsewhere(idea: Idea) -> str | None:
    """The chat an idea's answer goes to besides the notice, or None (no chat, or the notice already reaches it)."""
    if not idea.reply_to.startswith(TELEGRAM_PREFIX):
        return None
    from hitl.channels import telegram_enabled

    chat_id = idea.reply_to[len(TELEGRAM_PREFIX) :]
    if not telegram_enabled():
        log.info("loop: idea %s: Telegram is not configured; its answer to chat %s is a notice only", idea.pk, chat_id)
        return None
    if str(chat_id) == str(settings.TELEGRAM_CHAT_ID):
        return None  # the notice's own delivery lands in that chat: one message, not two
    return chat_id


def _send(chat_id: str, text: str, idea_id: int) -> None:
    from hitl.channels import ChannelError
    from hitl.channels.telegram import send_text

    try:
        send_text(chat_id, text)
    except ChannelError as exc:
        log.warning("loop: idea %s: its answer to Telegram chat %s was not sent: %s", idea_id, chat_id, exc)


def hear_back(cycle: Any) -> None:
    """Tell an idea's author how its cycle settled (called by ``machine.settle``); best effort, never raises.

    A notice (where cards go) names the idea, the outcome and why; an idea
    posted from a Telegram chat is also answered in that chat. A settle that
    writes no lesson by design (the kill switch) tells nobody.
    """
    if getattr(cycle, "idea_id", None) is None:
        return
    try:
        _hear_back(cycle)
    except Exception:  # noqa: BLE001 - a settle whose work is done never fails on its announcement
        log.exception("loop: cycle %s: the idea's author could not be told how it settled", cycle.pk)


def _hear_back(cycle: Cycle) -> None:
    from evolution.core.cycles import KILL_SWITCH_MARKS
    from hitl.actions import post_notice

    if not cycle.status or any(mark in (cycle.reason or "").lower() for mark in KILL_SWITCH_MARKS):
        return
    idea = cycle.idea
    idea.refresh_from_db(fields=["status"])
    if idea.status == Idea.Status.QUEUED:
        return  # back in the queue (a lock group's Accept set its cycle aside): its next cycle answers
    title, text = hear_back_text(cycle)
    with transaction.atomic():
        post_notice(
            producer=PRODUCER,
            kind="heard-back",
            title=title,
            text=text,
            url=_absolute(cycle.get_absolute_url()),
            subject=f"idea {idea.pk} · cycle {cycle.pk}",
        )
    chat_id = _told_elsewhere(idea)
    if chat_id is not None:
        message = f"{title}\n\n{text}"
        transaction.on_commit(lambda: _send(chat_id, message, idea.pk))
