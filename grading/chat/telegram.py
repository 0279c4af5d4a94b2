"""Telegram chats routed to chat roles: ``TELEGRAM_ROLE_CHATS = "<chat id>:<role slug>,…"``.

A plain message (not a reply to a card) in a private chat that the setting
routes to a role is that person's turn with the role: the message is taken
in the update's transaction and the turn runs after commit on a worker
(``grading.tasks.chat.telegram_turn``), which sends the role's reply back to
the chat. ``*`` routes every private chat not named. The person is the Django
user the Telegram account is mapped to when there is one, else the account
itself. Group chats have no episodes: their messages are left alone.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from grading.chat.episodes import Counterpart, say
from grading.models import Entity
from singularity.errors import ConfigError, StateError
from singularity.queue import enqueue

logger = logging.getLogger("grading.chat")

EVERY_PRIVATE_CHAT = "*"
BUSY_REPLY = "I am still answering your previous message; send this one again in a moment."
FAILED_REPLY = "Sorry, I could not answer just now. Please try again in a moment."
UNAVAILABLE_REPLY = "This chat is not available right now."
#: The Celery task that runs a turn (grading.tasks.chat), enqueued by name: it imports this module.
TURN_TASK = "grading.tasks.chat.telegram_turn"


def role_chats() -> dict[str, str]:
    """Return TELEGRAM_ROLE_CHATS as {chat id or "*": role slug}; ImproperlyConfigured naming a malformed entry."""
    routes: dict[str, str] = {}
    for entry in (item.strip() for item in settings.TELEGRAM_ROLE_CHATS.split(",")):
        if not entry:
            continue
        chat_id, sep, slug = entry.rpartition(":")
        chat_id, slug = chat_id.strip(), slug.strip()
        if not sep or not slug or not (chat_id == EVERY_PRIVATE_CHAT or chat_id.lstrip("-").isdigit()):
            raise ImproperlyConfigured(f"TELEGRAM_ROLE_CHATS: expected '<chat id>:<role slug>', got {entry!r}")
        routes[chat_id] = slug
    return routes


def route(chat: dict[str, Any]) -> str | None:
    """Return the slug of the role a chat is routed to, or None."""
    routes = role_chats()
    named = routes.get(str(chat.get("id")))
    if named is not None:
        return named
    return routes.get(EVERY_PRIVATE_CHAT) if chat.get("type") == "private" else None


def on_message(message: dict[str, Any]) -> str | None:
    """Take a plain message in a routed chat for its role (the turn runs after commit); None when not routed."""
    chat = message.get("chat") or {}
    slug = route(chat)
    if slug is None:
        return None
    if chat.get("type") != "private":
        return "ignored: a group chat has no episodes"
    sender = message.get("from") or {}
    if sender.get("is_bot") or not isinstance(sender.get("id"), int):
        return "ignored: not a person's message"
    text = str(message.get("text") or "").strip()
    if not text:
        return "ignored: a message without text"
    role = Entity.objects.filter(target_kind=Entity.TargetKind.ROLE, slug=slug).first()
    if role is None:
        logger.warning("TELEGRAM_ROLE_CHATS routes chat %s to %r, which is no role of the brain", chat.get("id"), slug)
        return f"ignored: TELEGRAM_ROLE_CHATS names no role {slug!r}"
    turn = {"from": {k: sender.get(k) for k in ("id", "first_name", "username")}, "text": text}
    chat_id = int(chat["id"])
    transaction.on_commit(lambda: enqueue(TURN_TASK, role.pk, chat_id, turn))
    return f"chat: a turn with role:{slug}"


def _name(sender: dict[str, Any]) -> str:
    return str(sender.get("username") or sender.get("first_name") or "")


def run_turn(role_id: int, chat_id: int, message: dict[str, Any], **say_options: Any) -> str:
    """Run the turn of a routed Telegram message and send the role's reply to ``chat_id``; return what happened.

    ``say_options`` (gateway, catalogue, checkout) are handed to ``say``.
    """
    from hitl.channels import ChannelError
    from hitl.channels.telegram import person_for, send_text

    role = Entity.objects.get(pk=role_id)
    sender = message.get("from") or {}
    counterpart = Counterpart(user=person_for(sender.get("id")), telegram_id=sender["id"], name=_name(sender))
    try:
        turn = say(role, counterpart, str(message.get("text") or ""), "telegram", **say_options)
    except StateError:
        reply, outcome = BUSY_REPLY, "busy"
    except ConfigError as exc:
        logger.warning("telegram chat %s: %s", chat_id, exc)
        reply, outcome = UNAVAILABLE_REPLY, f"refused: {exc}"
    else:
        reply = turn.text if turn.text.strip() else FAILED_REPLY
        outcome = f"turn {turn.seq} of episode {turn.episode_id}" + (f" failed: {turn.error}" if turn.error else "")
    try:
        send_text(chat_id, reply)
    except ChannelError as exc:
        logger.warning("telegram chat %s: the role's reply was not sent: %s", chat_id, exc)
        return f"{outcome}; the reply was not sent: {exc}"
    return outcome
