"""``/idea <entity> <text>`` in the HITL Telegram chat: a person posts an idea (seed 003 "From chat").

A plain message in the chat cards go to (``TELEGRAM_CHAT_ID``) that starts
with ``/idea`` is taken here, inside the update's transaction, from a
Telegram account mapped to a Django user (anyone else is told so). ``<entity>``
is ``<kind>:<id>`` (``workflow:digest``, ``scenario:digest``,
``heartbeat:inbox-triage``) or just the id, looked up among the loop's
entities; an id two kinds share is answered with a question for the prefix.
The post goes through ``intake.post`` like the dashboard's and the API's, and
the bot answers in one sentence, sent after commit as a reply to the message.

The channel puts buttons only on cards, so a queued idea's reply carries the
command that withdraws it (``/idea withdraw <id>``) instead of a button.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from evolution.loop import intake
from evolution.models import Idea
from evolution.steering import ideas
from grading.models import Entity

log = logging.getLogger(__name__)

COMMAND = "/idea"
USAGE = (
    "Usage: /idea <entity> <text> — <entity> is <kind>:<id> (workflow:weekly-digest, heartbeat:inbox-triage) "
    "or just the id; /idea withdraw <idea id> withdraws a queued idea."
)
NOT_ALLOWED = "You are not on the list of people who may post ideas here."


def _command(text: str) -> str | None:
    """The arguments after ``/idea`` (or ``/idea@bot``), or None when the message is not the command."""
    head, _, rest = text.strip().partition(" ")
    name = head.split("@", 1)[0].lower()
    if name != COMMAND:
        return None
    return rest.strip()


def find_entity(ref: str) -> tuple[Entity | None, str]:
    """The entity ``ref`` names (``<kind>:<id>`` or an id), or None and the sentence saying why not."""
    kind, sep, slug = ref.partition(":")
    if sep:
        entity = Entity.objects.filter(Q(target_kind=kind) | Q(kind=kind), slug=slug).order_by("pk").first()
        return (entity, "") if entity else (None, f"No entity {ref}.")
    named = list(Entity.objects.filter(slug=ref, present=True).order_by("target_kind"))
    looped = [e for e in named if e.loop_enabled] or named
    if not looped:
        return None, f"No entity {ref} in the loop."
    if len({e.target_kind for e in looped}) > 1:
        choices = " or ".join(f"{e.target_kind}:{ref}" for e in looped)
        return None, f"{ref} names more than one entity: which one, {choices}? Write /idea <kind>:{ref} <text>."
    return looped[0], ""


def _reply(chat_id: str, message_id: int, text: str) -> None:
    """Answer the message (after commit); a failed answer is logged, the post stands."""
    from hitl.channels import ChannelError
    from hitl.channels.telegram import TelegramSession

    def send() -> None:
        try:
            session = TelegramSession.open()
            try:
                session.reply(chat_id, message_id, text)
            finally:
                session.close()
        except ChannelError as exc:
            log.warning("telegram: the answer to /idea in chat %s was not sent: %s", chat_id, exc)

    transaction.on_commit(send)


def _post_words(posted: ideas.Posted) -> str:
    """The one sentence a post is answered with."""
    idea = posted.idea
    if posted.opened and posted.cycle is not None:
        return f"Idea {idea.pk} for {idea.entity}: cycle {posted.cycle.pk} started on it."
    return (
        f"Idea {idea.pk} for {idea.entity} is queued ({ideas.place(idea)}): {posted.reason}. "
        f"To withdraw it: /idea withdraw {idea.pk}"
    )


def _withdraw(arg: str, actor: str, user: Any) -> tuple[str, str]:
    idea = Idea.objects.filter(pk=int(arg)).first() if arg.isdigit() else None
    if idea is None:
        return f"idea: no idea {arg}", f"No idea {arg}."
    answer = ideas.withdraw(idea, actor, user=user, via="telegram")
    return f"idea: withdraw {idea.pk}: {answer.withdrawn}", answer.reason[0].upper() + answer.reason[1:] + "."


def _post(args: str, actor: str, chat_id: str) -> tuple[str, str]:
    ref, _, text = args.partition(" ")
    if not text.strip():
        return "idea: usage", USAGE
    entity, why = find_entity(ref)
    if entity is None:
        return f"idea: {why}", why
    try:
        posted = intake.post(entity, text, author=actor, reply_to=f"{ideas.TELEGRAM_PREFIX}{chat_id}")
    except ideas.IdeaRefused as exc:
        return f"idea: refused: {exc.reason}", f"Not posted: {exc.reason}."
    outcome = f"idea: {posted.idea.pk} " + (f"opened cycle {posted.cycle.pk}" if posted.opened else "queued")
    return outcome, _post_words(posted)


def on_message(message: dict[str, Any]) -> str | None:
    """Take ``/idea …`` in the HITL chat (post, withdraw or usage); None for any other message."""
    from hitl.channels.telegram import person_for

    args = _command(str(message.get("text") or ""))
    chat_id = str((message.get("chat") or {}).get("id", ""))
    if args is None or not settings.TELEGRAM_CHAT_ID or chat_id != str(settings.TELEGRAM_CHAT_ID):
        return None
    sender = message.get("from") or {}
    if sender.get("is_bot"):
        return "ignored: the bot's own message"
    message_id = int(message.get("message_id") or 0)
    user = person_for(sender.get("id"))
    if user is None:
        _reply(chat_id, message_id, NOT_ALLOWED)
        return f"refused: telegram user {sender.get('id')} may not post ideas"
    actor = user.get_username()
    verb, _, rest = args.partition(" ")
    if not args:
        outcome, words = "idea: usage", USAGE
    elif verb.lower() == "withdraw":
        outcome, words = _withdraw(rest.strip(), actor, user)
    else:
        outcome, words = _post(args, actor, chat_id)
    _reply(chat_id, message_id, words)
    return outcome
