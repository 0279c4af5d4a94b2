"""``/idea`` in the HITL Telegram chat, against the loopback Bot API: post, usage, lookup, refusals, withdraw,
and the author hearing back in the chat."""

from __future__ import annotations

import itertools
import time

import pytest

from evolution import tasks
from evolution.loop import machine
from evolution.models import Cycle, Idea
from evolution.steering import ideas
from hitl.channels.telegram import handle_update
from hitl.models import Notice, TelegramUser
from hitl.sender import send_pending
from tests.evolution.loop_helpers import graded, looped
from tests.fakes.telegram import CHAT_ID

pytestmark = pytest.mark.django_db

ALICE_TG = 111
STRANGER_TG = 999
_ids = itertools.count(700001)


@pytest.fixture
def chat(telegram_on, alice, monkeypatch):
    """Telegram on against the fake, alice's account mapped to her user; a cycle's analysis is not run."""
    TelegramUser.objects.create(telegram_user_id=ALICE_TG, user=alice)
    monkeypatch.setattr(tasks.analyse_round, "delay", lambda round_id: None)
    return telegram_on


def message(text: str, *, user_id: int = ALICE_TG, chat_id: int = CHAT_ID) -> dict:
    """The update a person's plain message in a chat makes."""
    return {
        "update_id": next(_ids),
        "message": {
            "message_id": next(_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "supergroup", "title": "HITL"},
            "from": {"id": user_id, "is_bot": False, "first_name": "Alice"},
            "text": text,
        },
    }


def said(fake, update: dict, capture) -> tuple[str, str]:
    """Handle ``update``; return the outcome and the bot's answer (a reply to the message)."""
    before = len(fake.calls_of("sendMessage"))
    with capture(execute=True):
        outcome = handle_update(update)
    calls = fake.calls_of("sendMessage")[before:]
    assert len(calls) == 1, calls
    assert calls[0]["chat_id"] == CHAT_ID
    assert calls[0]["reply_parameters"]["message_id"] == update["message"]["message_id"]
    return outcome, calls[0]["text"]


def test_idea_alone_prints_the_usage(chat, django_capture_on_commit_callbacks):
    outcome, answer = said(chat, message("/idea"), django_capture_on_commit_callbacks)
    assert outcome == "idea: usage" and answer.startswith("Usage: /idea <entity> <text>")


def test_a_post_opens_the_cycle_and_says_so(chat, django_capture_on_commit_callbacks):
    entity = looped()
    outcome, answer = said(
        chat, message("/idea scenario:triage Lead with the numbers."), django_capture_on_commit_callbacks
    )
    idea = Idea.objects.get()
    assert (idea.entity, idea.text, idea.author, idea.reply_to) == (
        entity,
        "Lead with the numbers.",
        "alice",
        f"telegram:{CHAT_ID}",
    )
    assert outcome == f"idea: {idea.pk} opened cycle {idea.cycle_id}"
    assert answer == f"Idea {idea.pk} for scenario:triage: cycle {idea.cycle_id} started on it."


def test_a_bare_id_and_the_kind_prefix_find_the_entity(chat, django_capture_on_commit_callbacks):
    looped()
    said(chat, message("/idea triage A"), django_capture_on_commit_callbacks)
    said(chat, message("/idea@singularity_bot workflow:triage B"), django_capture_on_commit_callbacks)
    assert list(Idea.objects.values_list("text", flat=True)) == ["A", "B"]


def test_an_id_two_kinds_share_asks_for_the_prefix(chat, django_capture_on_commit_callbacks):
    looped("digest")
    looped("digest", kind="heartbeat")
    _, answer = said(chat, message("/idea digest Shorter"), django_capture_on_commit_callbacks)
    assert answer == (
        "digest names more than one entity: which one, heartbeat:digest or scenario:digest? "
        "Write /idea <kind>:digest <text>."
    )
    assert not Idea.objects.exists()


def test_a_queued_post_says_why_and_how_to_withdraw(chat, django_capture_on_commit_callbacks):
    entity = looped()
    landed = graded(entity, bad=True)
    live = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution, window={"runIds": []}).cycle
    outcome, answer = said(chat, message("/idea triage Shorter"), django_capture_on_commit_callbacks)
    idea = Idea.objects.get()
    assert outcome == f"idea: {idea.pk} queued"
    assert answer == (
        f"Idea {idea.pk} for scenario:triage is queued (next): cycle {live.pk} is live (Analysing). "
        f"To withdraw it: /idea withdraw {idea.pk}"
    )
    _, withdrawn = said(chat, message(f"/idea withdraw {idea.pk}"), django_capture_on_commit_callbacks)
    _, again = said(chat, message(f"/idea withdraw {idea.pk}"), django_capture_on_commit_callbacks)
    assert withdrawn == again == f"Idea {idea.pk} is withdrawn: no cycle will take it."


def test_a_refused_post_says_why_and_writes_nothing(chat, django_capture_on_commit_callbacks):
    looped(loop={"enabled": False})
    outcome, answer = said(chat, message("/idea triage Shorter"), django_capture_on_commit_callbacks)
    assert outcome == "idea: refused: the loop is off for scenario:triage"
    assert answer == "Not posted: the loop is off for scenario:triage."
    _, unknown = said(chat, message("/idea ghost Shorter"), django_capture_on_commit_callbacks)
    assert unknown == "No entity ghost in the loop."
    assert not Idea.objects.exists() and not Cycle.objects.exists()


def test_a_stranger_may_not_post(chat, django_capture_on_commit_callbacks):
    looped()
    outcome, answer = said(
        chat, message("/idea triage Shorter", user_id=STRANGER_TG), django_capture_on_commit_callbacks
    )
    assert outcome == f"refused: telegram user {STRANGER_TG} may not post ideas"
    assert answer == "You are not on the list of people who may post ideas here."
    assert not Idea.objects.exists()


def test_other_chats_and_other_messages_are_left_alone(chat, django_capture_on_commit_callbacks):
    looped()
    with django_capture_on_commit_callbacks(execute=True):
        elsewhere = handle_update(message("/idea triage Shorter", chat_id=-100555))
        chatter = handle_update(message("an idea: shorter"))
    assert elsewhere == chatter == "ignored: not a reply to a card"
    assert not Idea.objects.exists() and chat.calls_of("sendMessage") == []


def test_the_author_hears_back_in_the_chat_it_came_from(chat, settings, django_capture_on_commit_callbacks):
    looped()
    said(chat, message("/idea triage Shorter"), django_capture_on_commit_callbacks)
    idea = Idea.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        machine.settle(idea.cycle, Cycle.Status.SKIPPED, reason="the proposer had nothing to propose")
    notice = Notice.objects.get(producer="loop-idea")
    send_pending()
    texts = [c["text"] for c in chat.calls_of("sendMessage") if c["chat_id"] == CHAT_ID]
    assert sum(notice.title in t for t in texts) == 1, "the notice lands in the chat once, not twice"
    # Posted from another chat (say a private one), the answer also goes there.
    Idea.objects.filter(pk=idea.pk).update(reply_to="telegram:4242")
    idea.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        ideas.hear_back(idea.cycle)
    [private] = [c for c in chat.calls_of("sendMessage") if c["chat_id"] == 4242]
    assert private["text"].startswith(notice.title) and "“Shorter”" in private["text"]
