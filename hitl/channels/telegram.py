"""Telegram: the only module that imports python-telegram-bot.

Sends cards (with inline buttons, or instructions to reply for a form) and
notices to ``TELEGRAM_CHAT_ID``, edits a card's message once it is answered,
and reads updates — button presses and native replies — from the webhook or
from long polling, answering cards as the Django user a Telegram account is
mapped to (the ``TelegramUser`` table merged with ``TELEGRAM_USERS``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, ReplyParameters
from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken, RetryAfter, TelegramError
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from hitl.actions import AnswerResult, answer_card
from hitl.channels import ChannelError, Sent, telegram_enabled, telegram_shape
from hitl.models import Card, Delivery, Notice, TelegramUpdate, TelegramUser
from hitl.replies import read_rating

logger = logging.getLogger(__name__)

MAX_TEXT = 4096
MAX_CALLBACK_TEXT = 200
POLL_TIMEOUT_SECS = 25
T = TypeVar("T")


# --- Errors -------------------------------------------------------------------


def _translate(exc: TelegramError) -> ChannelError:
    """Return our error for a Bot API error: 400/401/403/404 are permanent; 429, 5xx and the network are temporary."""
    if isinstance(exc, RetryAfter):
        with warnings.catch_warnings():
            # Reading it warns that it will become a timedelta; both shapes are handled here.
            warnings.simplefilter("ignore", PTBDeprecationWarning)
            wait = exc.retry_after
        secs = wait.total_seconds() if isinstance(wait, timedelta) else float(wait)
        return ChannelError(f"Telegram asked to wait {secs:g} s: {exc}", permanent=False, retry_after=secs)
    if isinstance(exc, ChatMigrated):
        return ChannelError(f"the chat moved to {exc.new_chat_id}: set TELEGRAM_CHAT_ID to it", permanent=True)
    if isinstance(exc, Forbidden | BadRequest | InvalidToken):
        return ChannelError(f"Telegram refused: {exc}", permanent=True)
    return ChannelError(f"Telegram unavailable: {exc}", permanent=False)


# --- Rendering ----------------------------------------------------------------


def _absolute(url: str) -> str:
    """Return ``url`` made absolute on the dashboard's public address; "" when there is no dashboard to link."""
    if not url or url.startswith(("http://", "https://")):
        return url
    base = settings.SINGULARITY_PUBLIC_URL.rstrip("/")
    return f"{base}{url}" if base else ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def card_message(card: Card) -> str:
    """Return the text of ``card``'s Telegram message, as it stands (pending, or showing who answered what)."""
    context = {
        "card": card,
        "subject_link": _absolute(card.subject_url),
        "card_link": _absolute(card.get_absolute_url()),
    }
    return _cut(render_to_string("hitl/telegram/card.txt", context).strip(), MAX_TEXT)


def notice_message(notice: Notice) -> str:
    """Return the text of ``notice``'s Telegram message."""
    context = {"notice": notice, "link": _absolute(notice.url)}
    return _cut(render_to_string("hitl/telegram/notice.txt", context).strip(), MAX_TEXT)


def reply_text(code: str, **context: Any) -> str:
    """Return the short reply the bot gives for ``code`` (a press answered, refused, …)."""
    return render_to_string("hitl/telegram/reply.txt", {"code": code, **context}).strip()


def keyboard(card: Card) -> InlineKeyboardMarkup | None:
    """Return one row of buttons for a pending button card ("<short id>:<value>" each), or None."""
    if not card.is_pending or not card.buttons:
        return None
    row = [
        InlineKeyboardButton(str(option["label"]), callback_data=f"{card.short_id}:{option['value']}")
        for option in card.buttons
    ]
    return InlineKeyboardMarkup([row])


# --- The session --------------------------------------------------------------


def _run_in_thread(runner: asyncio.Runner, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``runner`` from a fresh thread, for callers whose thread already runs an event loop."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = runner.run(coro)
        except BaseException as exc:  # noqa: BLE001 — handed back to the caller's thread and raised there
            box["error"] = exc

    thread = threading.Thread(target=work, name="telegram-call")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class TelegramSession:
    """A Bot API client on its own event loop, used synchronously for a batch of calls; close it after."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner()
        self._request = HTTPXRequest(connect_timeout=10, read_timeout=30, write_timeout=30)
        self._bot = Bot(
            settings.TELEGRAM_BOT_TOKEN,
            base_url=settings.TELEGRAM_API_URL,
            request=self._request,
            get_updates_request=self._request,
        )
        self._open = False

    @classmethod
    def open(cls) -> TelegramSession:
        """Return a ready session; raises ChannelError when Telegram is not configured."""
        if not telegram_enabled():
            raise ChannelError("Telegram is off: TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID are needed", permanent=True)
        session = cls()
        session._call(session._request.initialize())
        session._open = True
        return session

    def close(self) -> None:
        """Release the HTTP client and the event loop."""
        try:
            if self._open:
                self._call(self._request.shutdown())
        finally:
            self._open = False
            self._runner.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one Bot API coroutine to completion; raises ChannelError for Telegram's errors."""
        try:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return self._runner.run(coro)
            return _run_in_thread(self._runner, coro)
        except TelegramError as exc:
            raise _translate(exc) from exc

    def send_card(self, card: Card) -> Sent:
        """Send ``card`` to the HITL chat and return where it landed."""
        message = self._call(
            self._bot.send_message(
                chat_id=settings.TELEGRAM_CHAT_ID,
                text=card_message(card),
                reply_markup=keyboard(card),
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        )
        return Sent(chat_id=str(message.chat_id), message_id=message.message_id)

    def send_notice(self, notice: Notice) -> Sent:
        """Send ``notice`` to the HITL chat and return where it landed."""
        message = self._call(
            self._bot.send_message(
                chat_id=settings.TELEGRAM_CHAT_ID,
                text=notice_message(notice),
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        )
        return Sent(chat_id=str(message.chat_id), message_id=message.message_id)

    def send_text(self, chat_id: str | int, text: str) -> Sent:
        """Send ``text`` as a plain message to ``chat_id`` and return where it landed."""
        message = self._call(
            self._bot.send_message(
                chat_id=chat_id, text=_cut(text, MAX_TEXT), link_preview_options=LinkPreviewOptions(is_disabled=True)
            )
        )
        return Sent(chat_id=str(message.chat_id), message_id=message.message_id)

    def edit_card(self, delivery: Delivery, card: Card) -> None:
        """Rewrite the card's message as it now stands (buttons gone once it is closed)."""
        try:
            self._call(
                self._bot.edit_message_text(
                    text=card_message(card),
                    chat_id=delivery.chat_id,
                    message_id=delivery.message_id,
                    reply_markup=keyboard(card),
                    link_preview_options=LinkPreviewOptions(is_disabled=True),
                )
            )
        except ChannelError as exc:
            if "message is not modified" not in str(exc).lower():
                raise

    def answer_callback(self, callback_query_id: str, text: str) -> None:
        """Show ``text`` to whoever pressed the button."""
        self._call(
            self._bot.answer_callback_query(callback_query_id=callback_query_id, text=_cut(text, MAX_CALLBACK_TEXT))
        )

    def reply(self, chat_id: str, message_id: int, text: str) -> None:
        """Send ``text`` as a native reply to a message in ``chat_id``."""
        self._call(
            self._bot.send_message(
                chat_id=chat_id,
                text=_cut(text, MAX_TEXT),
                reply_parameters=ReplyParameters(message_id=message_id, allow_sending_without_reply=True),
            )
        )

    def get_updates(self, offset: int | None, timeout: int = POLL_TIMEOUT_SECS) -> list[dict[str, Any]]:
        """Return the updates after ``offset`` as Bot API JSON, waiting up to ``timeout`` seconds for one."""
        updates = self._call(
            self._bot.get_updates(offset=offset, timeout=timeout, allowed_updates=["message", "callback_query"])
        )
        return [update.to_dict() for update in updates]

    def set_webhook(self, url: str) -> None:
        """Ask Telegram to post updates to ``url`` with TELEGRAM_WEBHOOK_SECRET in the secret header."""
        self._call(
            self._bot.set_webhook(
                url=url,
                secret_token=settings.TELEGRAM_WEBHOOK_SECRET or None,
                allowed_updates=["message", "callback_query"],
            )
        )

    def delete_webhook(self) -> None:
        """Stop webhook delivery, so long polling can read updates."""
        self._call(self._bot.delete_webhook())


# --- Who may answer -----------------------------------------------------------

_configured: tuple[str, dict[int, int]] | None = None


def configured_users() -> dict[int, int]:
    """Return TELEGRAM_USERS as {telegram user id: Django user id}, checked at first use.

    Raises ImproperlyConfigured naming the entry when it is malformed or names
    a user that does not exist.
    """
    global _configured
    raw = settings.TELEGRAM_USERS
    if _configured is not None and _configured[0] == raw:
        return _configured[1]
    pairs: dict[int, str] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        tg_id, sep, username = entry.partition(":")
        if not sep or not username.strip() or not tg_id.strip().lstrip("-").isdigit():
            raise ImproperlyConfigured(f"TELEGRAM_USERS: expected '<telegram id>:<username>', got {entry!r}")
        pairs[int(tg_id)] = username.strip()
    users = dict(get_user_model().objects.filter(username__in=set(pairs.values())).values_list("username", "pk"))
    missing = sorted(set(pairs.values()) - set(users))
    if missing:
        raise ImproperlyConfigured(f"TELEGRAM_USERS: no such user {', '.join(missing)}")
    mapping = {tg_id: users[username] for tg_id, username in pairs.items()}
    _configured = (raw, mapping)
    return mapping


def person_for(telegram_user_id: Any) -> Any:
    """Return the active Django user a Telegram account answers as (the table first, then TELEGRAM_USERS), or None."""
    if not isinstance(telegram_user_id, int):
        return None
    row = TelegramUser.objects.select_related("user").filter(telegram_user_id=telegram_user_id).first()
    if row is not None:
        return row.user if row.user.is_active else None
    user_id = configured_users().get(telegram_user_id)
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id, is_active=True).first()


# --- Receiving ----------------------------------------------------------------


@dataclass(frozen=True)
class _Outgoing:
    """A call to make after the update's transaction commits: a callback answer or a reply."""

    text: str
    callback_query_id: str = ""
    chat_id: str = ""
    message_id: int = 0


def _answer_reply(result: AnswerResult) -> str:
    return reply_text(result.code, result=result, card=result.card)


def _on_press(query: dict[str, Any]) -> tuple[str, list[_Outgoing]]:
    """Answer the card a button press names, as the pressing person; return the outcome and the callback answer."""
    sender = query.get("from") or {}
    if sender.get("is_bot"):
        return "ignored: a bot pressed", []
    query_id = str(query.get("id", ""))
    user = person_for(sender.get("id"))
    if user is None:
        return f"refused: telegram user {sender.get('id')} may not answer", [
            _Outgoing(reply_text("not_allowed"), callback_query_id=query_id)
        ]
    short_id, _, value = str(query.get("data", "")).partition(":")
    card = Card.objects.filter(short_id=short_id).first()
    if card is None:
        return "ignored: no such card", [_Outgoing(reply_text("unknown_card"), callback_query_id=query_id)]
    result = answer_card(card.pk, user=user, is_agent=False, choice=value, via=Card.Via.TELEGRAM)
    return f"{result.code}: card {card.pk}", [_Outgoing(_answer_reply(result), callback_query_id=query_id)]


def _on_reply(message: dict[str, Any]) -> tuple[str, list[_Outgoing]]:
    """Read a native reply to a card's message as a refinement or a rating; return the outcome and the bot's reply."""
    sender = message.get("from") or {}
    if sender.get("is_bot"):
        return "ignored: the bot's own message", []
    replied = message.get("reply_to_message") or {}
    chat_id = str((message.get("chat") or {}).get("id", ""))
    delivery = (
        Delivery.objects.select_related("card")
        .filter(channel=Delivery.Channel.TELEGRAM, chat_id=chat_id, message_id=replied.get("message_id"))
        .exclude(card=None)
        .first()
        if replied
        else None
    )
    if delivery is None:
        return _on_plain(message), []

    def say(text: str) -> list[_Outgoing]:
        return [_Outgoing(text, chat_id=chat_id, message_id=int(message.get("message_id", 0)))]

    user = person_for(sender.get("id"))
    if user is None:
        return f"refused: telegram user {sender.get('id')} may not answer", say(reply_text("not_allowed"))
    card, text = delivery.card, str(message.get("text") or "").strip()
    assert card is not None
    if not text:
        return "ignored: a reply without text", say(reply_text("needs_text"))
    if card.allows_refinement:
        result = answer_card(
            card.pk, user=user, is_agent=False, choice=Card.REFINE, refinement=text, via=Card.Via.TELEGRAM
        )
    elif card.kind == Card.Kind.RATING:
        reading = read_rating(card, text)
        if reading.error:
            return f"invalid: {reading.error}", say(
                reply_text("invalid", result=AnswerResult(False, "invalid", reading.error))
            )
        result = answer_card(
            card.pk,
            user=user,
            is_agent=False,
            choice=reading.choice,
            values=reading.values,
            note=reading.note,
            via=Card.Via.TELEGRAM,
        )
    else:
        return "ignored: this card takes a button", say(reply_text("needs_button", card=card))
    return f"{result.code}: card {card.pk}", say(_answer_reply(result))


# --- Plain messages: other apps' handlers ------------------------------------------

#: Handlers of a plain message (one that is not a reply to a card), asked in order of registration.
MessageHandler = Callable[[dict[str, Any]], "str | None"]
_message_handlers: list[MessageHandler] = []


def register_message_handler(handler: MessageHandler) -> MessageHandler:
    """Register ``handler(message) -> outcome | None`` for plain messages; return it (usable as a decorator).

    A handler gets the Bot API message of every message that is not a reply
    to a card, inside the update's transaction, and returns the outcome in
    words when it took the message (None passes it on). It must not call
    Telegram or anything slow there: it defers that work to after commit.
    Registering the same handler twice registers it once.
    """
    if handler not in _message_handlers:
        _message_handlers.append(handler)
    return handler


def unregister_message_handler(handler: MessageHandler) -> None:
    if handler in _message_handlers:
        _message_handlers.remove(handler)


def _on_plain(message: dict[str, Any]) -> str:
    """Hand a plain message to the first handler that takes it; return its outcome."""
    for handler in list(_message_handlers):
        outcome = handler(message)
        if outcome is not None:
            return outcome
    return "ignored: not a reply to a card"


def send_text(chat_id: str | int, text: str) -> Sent:
    """Send ``text`` as a plain message to ``chat_id`` and return where it landed; ChannelError when it fails."""
    session = TelegramSession.open()
    try:
        return session.send_text(chat_id, text)
    finally:
        session.close()


def _dispatch(data: dict[str, Any]) -> tuple[str, list[_Outgoing]]:
    if isinstance(data.get("callback_query"), dict):
        return _on_press(data["callback_query"])
    if isinstance(data.get("message"), dict):
        return _on_reply(data["message"])
    return "ignored: not a button press or a message", []


def _send_outgoing(outgoing: list[_Outgoing]) -> list[str]:
    """Make the calls an update asked for; return the errors, each in words."""
    if not outgoing:
        return []
    errors: list[str] = []
    try:
        session = TelegramSession.open()
    except ChannelError as exc:
        return [str(exc)]
    try:
        for item in outgoing:
            try:
                if item.callback_query_id:
                    session.answer_callback(item.callback_query_id, item.text)
                else:
                    session.reply(item.chat_id, item.message_id, item.text)
            except ChannelError as exc:
                logger.warning("telegram: could not answer an update: %s", exc)
                errors.append(str(exc))
    finally:
        session.close()
    return errors


def handle_update(data: dict[str, Any]) -> str:
    """Act on one Bot API update (from the webhook or polling) and return what happened, in words.

    A button press answers its card as the mapped person; a native reply to a
    card refines it or rates it; an update id seen before does nothing; what
    is not recognised, or cannot be used (``telegram_shape.problem``), is
    ignored. The bot's answers are sent after commit.
    """
    why = telegram_shape.problem(data)
    if why.startswith(("body:", "update_id:")):
        return f"ignored: {why}"
    update_id = data["update_id"]
    with transaction.atomic():
        try:
            with transaction.atomic():
                TelegramUpdate.objects.create(update_id=update_id)
        except IntegrityError:
            return f"duplicate: update {update_id} was handled before"
        outcome, outgoing = (f"ignored: {why}", []) if why else _dispatch(data)
        TelegramUpdate.objects.filter(update_id=update_id).update(outcome=outcome[:200])
    errors = _send_outgoing(outgoing)
    return outcome + "".join(f"; the bot's answer failed: {e}" for e in errors)


def next_offset() -> int | None:
    """Return the getUpdates offset after the newest update seen, or None before any."""
    newest = TelegramUpdate.objects.order_by("-update_id").values_list("update_id", flat=True).first()
    return None if newest is None else newest + 1


def poll_once(session: TelegramSession, timeout: int = POLL_TIMEOUT_SECS) -> list[str]:
    """Read one batch of updates by long polling, handle each, and return their outcomes."""
    return [handle_update(update) for update in session.get_updates(next_offset(), timeout=timeout)]
