"""Opening, answering, cancelling and expiring cards; posting notices.

Every surface — the inbox, the API, Telegram, the expiry task — goes through
these functions. An answer is written once by a conditional UPDATE (pending →
answered), and the producer's handler is called once after the answer has
committed, claimed by another conditional UPDATE on ``handled_at``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from hitl import registry
from hitl.channels import enabled_channels
from hitl.models import Card, Delivery, Notice
from singularity.errors import ConfigError
from singularity.notify import events as notify_events
from singularity.nul import nul_refusal
from singularity.queue import enqueue

logger = logging.getLogger(__name__)

#: Telegram's callback data holds 64 bytes: the card's short id, a colon and the value must fit.
MAX_OPTION_VALUE_BYTES = 40
MAX_RATING_BUTTONS = 8
MAX_NOTE_CHARS = 2000
MAX_REFINEMENT_CHARS = 4000
EXPIRY_BATCH = 500
#: The sender's Celery task (hitl.tasks), enqueued by name: the tasks module imports these actions.
SENDER_TASK = "hitl.tasks.send_deliveries"


@dataclass(frozen=True)
class AnswerResult:
    """The outcome of an answer or a cancel: ``code`` is answered, cancelled, unauthorized_responder,
    already_closed, invalid or not_found; ``detail`` says it in words."""

    ok: bool
    code: str
    detail: str
    card: Card | None = field(default=None, compare=False)


# --- Opening ------------------------------------------------------------------


def _render(text: str, template: str, context: dict[str, Any] | None) -> str:
    """Return ``text``, or the rendering of ``template`` with ``context`` when a template is named."""
    if template:
        return render_to_string(template, context or {}).strip()
    return text


def _check_options(kind: str, options: list[dict[str, Any]]) -> None:
    """Raise ConfigError when ``options`` are not buttons or a rating form fit for ``kind``."""
    if not isinstance(options, list) or not options:
        raise ConfigError("options: at least one button or metric is needed")
    if not all(isinstance(o, dict) for o in options):
        raise ConfigError("options: each option is an object")
    is_form = all("min" in o and "max" in o for o in options)
    if is_form:
        if kind != Card.Kind.RATING:
            raise ConfigError("options: only a rating card is a form")
        for option in options:
            if not option.get("metric_id"):
                raise ConfigError("options: each form metric needs a metric_id")
        return
    values = [str(o.get("value", "")) for o in options]
    for option, value in zip(options, values, strict=True):
        if not value or not option.get("label"):
            raise ConfigError("options: each button needs a value and a label")
        if len(value.encode()) > MAX_OPTION_VALUE_BYTES:
            raise ConfigError(f"options: value {value!r} is longer than {MAX_OPTION_VALUE_BYTES} bytes")
        if value in (Card.REFINE, Card.RATE):
            raise ConfigError(f"options: {value!r} is reserved")
    if len(set(values)) != len(values):
        raise ConfigError("options: button values must differ")
    if kind == Card.Kind.RATING:
        if len(options) > MAX_RATING_BUTTONS:
            raise ConfigError(f"options: a rating on more than {MAX_RATING_BUTTONS} steps is a form")
        if not all(o.get("metric_id") for o in options):
            raise ConfigError("options: each rating button names its metric_id")


def open_card(
    *,
    producer: str,
    kind: str,
    key: str,
    title: str,
    subject: str,
    expires_at: datetime,
    options: list[dict[str, Any]],
    subject_url: str = "",
    text: str = "",
    template: str = "",
    context: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
) -> Card:
    """Return the card opened under ``key``: a new one, or the one opened before (unchanged).

    The text is ``text``, or ``template`` rendered with ``context``. Each enabled
    channel gets a delivery in the same transaction; the sender is woken after
    commit. Raises ConfigError for a bad kind or bad options.
    """
    existing = Card.objects.filter(key=key).first()
    if existing is not None:
        return existing
    if kind not in Card.Kind.values:
        raise ConfigError(f"kind: {kind!r} is not one of {', '.join(Card.Kind.values)}")
    _check_options(kind, options)
    try:
        with transaction.atomic():
            card = Card.objects.create(
                producer=producer,
                kind=kind,
                key=key,
                title=title,
                subject=subject,
                subject_url=subject_url,
                text=_render(text, template, context),
                options=options,
                expires_at=expires_at,
                payload=payload or {},
            )
            _enqueue_deliveries(card=card)
            notify_events.from_card(card)  # the outbound destinations (Slack, webhooks), after commit
    except IntegrityError:
        # Another process opened the same key between our read and our insert.
        opened = Card.objects.filter(key=key).first()
        if opened is None:
            raise
        return opened
    return card


def post_notice(
    *,
    producer: str,
    kind: str,
    title: str,
    text: str = "",
    url: str = "",
    subject: str = "",
    template: str = "",
    context: dict[str, Any] | None = None,
) -> Notice:
    """Create and return a notice; each enabled channel gets a delivery, sent after commit."""
    with transaction.atomic():
        notice = Notice.objects.create(
            producer=producer,
            kind=kind,
            title=title,
            text=_render(text, template, context),
            url=url,
            subject=subject,
        )
        _enqueue_deliveries(notice=notice)
        notify_events.from_notice(notice)  # the outbound destinations (Slack, webhooks), after commit
    return notice


def mark_notice_read(notice_id: int) -> bool:
    """Mark the notice read; return False when it was read already or does not exist."""
    return bool(Notice.objects.filter(pk=notice_id, read_at__isnull=True).update(read_at=timezone.now()))


# --- Answering ----------------------------------------------------------------


def _refuse_responder(user: Any, is_agent: bool) -> AnswerResult | None:
    """Return the refusal when the caller is not a signed-in person, else None."""
    if is_agent:
        return AnswerResult(False, "unauthorized_responder", "an agent may not answer or cancel a card; a person must")
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return AnswerResult(False, "unauthorized_responder", "only a signed-in person may answer a card")
    return None


def _closed_detail(card: Card) -> str:
    """Return who closed ``card`` and when, in words."""
    when = timezone.localtime(card.responded_at).strftime("%Y-%m-%d %H:%M %Z") if card.responded_at else "earlier"
    if card.status == Card.Status.EXPIRED:
        return f"the card expired at {when}"
    who = card.responded_by.get_username() if card.responded_by else "someone"
    if card.status == Card.Status.CANCELLED:
        return f"the card was cancelled by {who} at {when}"
    return f"the card was already answered by {who} at {when} ({card.choice_label}, via {card.answered_via})"


def check_answer(
    card: Card, choice: str, note: str, values: dict[str, Any] | None, refinement: str
) -> tuple[dict[str, Any], str]:
    """Return the answer to store for these inputs with "", or {} and why they are not a valid answer."""
    choice, note, refinement = (choice or "").strip(), (note or "").strip(), (refinement or "").strip()
    values = values or {}
    for name, text in (("note", note), ("refinement", refinement)):
        if refusal := nul_refusal(name, text):  # PostgreSQL cannot hold it, whatever door it came through
            return {}, refusal
    if len(note) > MAX_NOTE_CHARS:
        return {}, f"the note is longer than {MAX_NOTE_CHARS} characters"
    if not isinstance(values, dict):
        return {}, "values: expected an object {metric_id: number}"
    if card.is_form:
        if choice not in ("", Card.RATE):
            return {}, f"this card is a form: answer {Card.RATE!r} with a value per metric"
        cleaned, error = card.check_values(values)
        if error:
            return {}, error
        return {"choice": Card.RATE, "note": note, "values": cleaned, "refinement": ""}, ""
    if choice == Card.REFINE:
        if not card.allows_refinement:
            return {}, f"a {card.kind} card takes no refinement"
        if not refinement:
            return {}, "a refinement needs some text"
        if len(refinement) > MAX_REFINEMENT_CHARS:
            return {}, f"the refinement is longer than {MAX_REFINEMENT_CHARS} characters"
        return {"choice": Card.REFINE, "note": note, "values": {}, "refinement": refinement}, ""
    option = card.option_for(choice)
    if option is None:
        allowed = [str(o["value"]) for o in card.buttons] + ([Card.REFINE] if card.allows_refinement else [])
        return {}, f"{choice!r} is not one of: {', '.join(allowed)}"
    if refinement:
        return {}, "a refinement goes with the choice 'refine'"
    answer_values: dict[str, Any] = {}
    if option.get("metric_id"):
        # A rating button carries its own value; the pressed button is the rating.
        answer_values = {str(option["metric_id"]): _number(option["value"])}
    elif values:
        return {}, "values go with a rating card"
    return {"choice": choice, "note": note, "values": answer_values, "refinement": ""}, ""


def _number(value: Any) -> int | float | str:
    """Return a button value as a number when it reads as one, else as it is."""
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


def answer_card(
    card_id: UUID | str,
    *,
    user: Any,
    is_agent: bool,
    choice: str,
    note: str = "",
    values: dict[str, Any] | None = None,
    refinement: str = "",
    via: str,
) -> AnswerResult:
    """Answer a pending card as ``user`` and return what happened; the handler runs once after commit.

    Refuses an agent (``unauthorized_responder``, the card stays pending), a
    closed card (``already_closed``, naming who and when), and an answer that
    is not one of the card's options (``invalid``). Two racing answers write one.
    """
    refusal = _refuse_responder(user, is_agent)
    if refusal is not None:
        return refusal
    card = Card.objects.select_related("responded_by").filter(pk=card_id).first()
    if card is None:
        return AnswerResult(False, "not_found", "no such card")
    if not card.is_pending:
        return AnswerResult(False, "already_closed", _closed_detail(card), card)
    answer, error = check_answer(card, choice, note, values, refinement)
    if error:
        return AnswerResult(False, "invalid", error, card)
    now = timezone.now()
    with transaction.atomic():
        written = Card.objects.filter(pk=card.pk, status=Card.Status.PENDING, expires_at__gt=now).update(
            status=Card.Status.ANSWERED, answer=answer, responded_by=user, responded_at=now, answered_via=via
        )
        if written:
            _after_close(card.pk)
    if not written:
        # Past its deadline, the card is expired whether or not the sweep has run yet: no second clock.
        expire_card(card.pk, now=now)
        card.refresh_from_db()
        return AnswerResult(False, "already_closed", _closed_detail(card), card)
    card.refresh_from_db()
    return AnswerResult(True, "answered", f"answered {card.choice_label}", card)


def cancel_card(card_id: UUID | str, *, user: Any, is_agent: bool, note: str = "", via: str) -> AnswerResult:
    """Cancel a pending card as ``user`` and return what happened; the handler hears of it once after commit.

    The same refusals as ``answer_card``: only a person cancels, and only a pending card.
    """
    refusal = _refuse_responder(user, is_agent)
    if refusal is not None:
        return refusal
    card = Card.objects.select_related("responded_by").filter(pk=card_id).first()
    if card is None:
        return AnswerResult(False, "not_found", "no such card")
    now = timezone.now()
    with transaction.atomic():
        written = Card.objects.filter(pk=card.pk, status=Card.Status.PENDING).update(
            status=Card.Status.CANCELLED,
            answer={"choice": "", "note": (note or "").strip()[:MAX_NOTE_CHARS], "values": {}, "refinement": ""},
            responded_by=user,
            responded_at=now,
            answered_via=via,
        )
        if written:
            _after_close(card.pk)
    card.refresh_from_db()
    if not written:
        return AnswerResult(False, "already_closed", _closed_detail(card), card)
    return AnswerResult(True, "cancelled", "cancelled", card)


def withdraw_card(card_id: UUID | str, *, reason: str) -> bool:
    """Close a pending card its producer no longer needs answered (the question became moot), saying ``reason``;
    return whether this call closed it.

    The card is cancelled with nobody as responder (``answered_via`` withdrawn) and its sent messages lose their
    buttons at once, as for an answer; the handler hears of it like any close (a producer that settled its side
    first finds nothing waiting).
    """
    now = timezone.now()
    with transaction.atomic():
        written = Card.objects.filter(pk=card_id, status=Card.Status.PENDING).update(
            status=Card.Status.CANCELLED,
            answer={"choice": "", "note": (reason or "").strip()[:MAX_NOTE_CHARS], "values": {}, "refinement": ""},
            responded_by=None,
            responded_at=now,
            answered_via=Card.Via.WITHDRAWN,
        )
        if written:
            _after_close(card_id)
    return bool(written)


def revise_card(card_id: UUID | str, *, text: str) -> bool:
    """Rewrite a pending card's text (its producer learned something the person should read before answering) and
    edit its sent messages to match; return whether the card was pending and its text changed."""
    with transaction.atomic():
        written = Card.objects.filter(pk=card_id, status=Card.Status.PENDING).exclude(text=text).update(text=text)
        if written:
            edits = Delivery.objects.filter(card_id=card_id, status=Delivery.Status.SENT).update(
                needs_edit=True, next_attempt_at=timezone.now()
            )
            if edits:
                transaction.on_commit(lambda: _edit_now(card_id))
    return bool(written)


# --- Expiry -------------------------------------------------------------------


def expire_card(card_id: UUID | str, *, now: datetime | None = None) -> bool:
    """Close the card as expired if it is pending and past its deadline; return whether this call closed it."""
    now = now or timezone.now()
    with transaction.atomic():
        written = Card.objects.filter(pk=card_id, status=Card.Status.PENDING, expires_at__lte=now).update(
            status=Card.Status.EXPIRED,
            answer={},
            responded_by=None,
            responded_at=now,
            answered_via=Card.Via.EXPIRY,
        )
        if written:
            _after_close(card_id)
    return bool(written)


def expire_due_cards(now: datetime | None = None) -> int:
    """Close every pending card past its deadline as expired (its handler is called); return how many closed.

    Idempotent: a card closed by someone else in the meantime is left alone.
    """
    now = now or timezone.now()
    due = Card.objects.filter(status=Card.Status.PENDING, expires_at__lte=now).values_list("pk", flat=True)
    return sum(expire_card(card_id, now=now) for card_id in list(due[:EXPIRY_BATCH]))


# --- Handlers -----------------------------------------------------------------


def run_handler(card_id: UUID | str) -> bool:
    """Call the producer's handler for a closed card unless it was called before; return whether this call ran it.

    A handler that raises has its error recorded on the card (``handler_error``)
    and its own writes rolled back; the error is logged, never swallowed.
    """
    claimed = (
        Card.objects.filter(pk=card_id, handled_at__isnull=True)
        .exclude(status=Card.Status.PENDING)
        .update(handled_at=timezone.now())
    )
    if not claimed:
        return False
    card = Card.objects.select_related("responded_by").get(pk=card_id)
    handler = registry.handler_for(card.producer, card.kind)
    if handler is None:
        error = f"no handler registered for producer {card.producer!r}, kind {card.kind!r}"
        logger.error("card %s: %s", card.pk, error)
        Card.objects.filter(pk=card.pk).update(handler_error=error)
        return True
    try:
        with transaction.atomic():
            handler(card)
    except Exception as exc:  # noqa: BLE001 — producer code may fail in any way; the failure is kept on the card
        logger.exception("card %s: the %s/%s handler failed", card.pk, card.producer, card.kind)
        Card.objects.filter(pk=card.pk).update(handler_error=f"{type(exc).__name__}: {exc}"[:4000])
    return True


def run_unhandled_handlers() -> int:
    """Call the handler of every closed card whose handler never ran (a lost after-commit call); return how many."""
    unhandled = Card.objects.filter(handled_at__isnull=True).exclude(status=Card.Status.PENDING)
    return sum(run_handler(card_id) for card_id in list(unhandled.values_list("pk", flat=True)[:EXPIRY_BATCH]))


def retry_handler(card_id: UUID | str) -> bool:
    """Call a failed handler once more (an admin's choice); return whether it ran."""
    reset = Card.objects.filter(pk=card_id, handled_at__isnull=False).exclude(handler_error="")
    if not reset.update(handled_at=None, handler_error=""):
        return False
    return run_handler(card_id)


# --- Deliveries ---------------------------------------------------------------


def _enqueue_deliveries(*, card: Card | None = None, notice: Notice | None = None) -> None:
    """Create one delivery per enabled channel and wake the sender after commit."""
    channels = enabled_channels()
    for channel in channels:
        Delivery.objects.get_or_create(card=card, notice=notice, channel=channel)
    if channels:
        transaction.on_commit(_wake_sender)


def _after_close(card_id: UUID | str) -> None:
    """Inside the closing transaction: mark sent messages for an edit; after commit, run the handler and the sender."""
    edits = Delivery.objects.filter(card_id=card_id, status=Delivery.Status.SENT).update(
        needs_edit=True, next_attempt_at=timezone.now()
    )
    pending = Delivery.objects.filter(
        card_id=card_id, status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING]
    ).exists()
    if edits:
        transaction.on_commit(lambda: _edit_now(card_id))  # before the handler: the message shows the answer at once
    transaction.on_commit(lambda: run_handler(card_id))
    if edits or pending:
        transaction.on_commit(_wake_sender)


def _edit_now(card_id: UUID | str) -> None:
    """Edit the closed card's sent messages in this process; what fails is retried by the sender."""
    from hitl.sender import edit_now

    try:
        edit_now(card_id)
    except Exception:  # noqa: BLE001 - the answer is saved; a broken edit must not stop its handler, the sender retries
        logger.exception("card %s: editing its messages at once failed; the sender will retry", card_id)


def _wake_sender() -> None:
    """Enqueue the sender task; when the broker is down the 30-second beat sweep sends instead."""
    try:
        enqueue(SENDER_TASK)
    except BrokerError as exc:
        logger.warning("could not enqueue the sender (%s); the periodic sweep will send", exc)
