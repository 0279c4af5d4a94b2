"""Telegram chats routed to chat roles (TELEGRAM_ROLE_CHATS), against the loopback Bot API and the fake gateway."""

from __future__ import annotations

import itertools
import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from grading.models import Episode
from hitl.channels.telegram import handle_update
from hitl.models import TelegramUser
from tests.fakes.gateway import Reply
from tests.grading.chat_helpers import make_role, prices

pytestmark = pytest.mark.django_db

DANA_TG = 5150
ALICE_TG = 111
GROUP = -100777
_ids = itertools.count(900001)


@pytest.fixture
def routed(settings, telegram_on, fake_gateway):
    """Telegram on against the fake, the helpdesk role routed from every private chat, the gateway faked."""
    prices(settings)
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.SINGULARITY_MCP_CONFIG = ""
    settings.TELEGRAM_ROLE_CHATS = f"*:helpdesk,{GROUP}:helpdesk"
    make_role()
    return telegram_on


def message(user_id: int, text: str, *, chat_id: int | None = None, chat_type: str = "private") -> dict:
    """The update a person's plain message to the bot makes."""
    return {
        "update_id": next(_ids),
        "message": {
            "message_id": next(_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id if chat_id is not None else user_id, "type": chat_type},
            "from": {"id": user_id, "is_bot": False, "first_name": "Dana", "username": "dana_k"},
            "text": text,
        },
    }


def sent(update: dict, capture) -> str:
    with capture(execute=True):
        return handle_update(update)


def test_a_message_in_a_routed_chat_is_a_turn_and_the_reply_goes_back_to_the_chat(
    routed, fake_gateway, django_capture_on_commit_callbacks
):
    fake_gateway.script(Reply(content="Hello Dana, how can I help?"))
    outcome = sent(message(DANA_TG, "Hi there"), django_capture_on_commit_callbacks)
    assert outcome == "chat: a turn with role:helpdesk"
    [call] = routed.calls_of("sendMessage")
    assert (call["chat_id"], call["text"]) == (DANA_TG, "Hello Dana, how can I help?")
    episode = Episode.objects.get()
    assert episode.surface == "telegram" and episode.counterpart_telegram_id == DANA_TG
    assert episode.counterpart_user is None and episode.counterpart_name == "dana_k"
    assert list(episode.turns.values_list("text", flat=True)) == ["Hi there", "Hello Dana, how can I help?"]


def test_a_mapped_telegram_account_talks_as_its_user(routed, alice, django_capture_on_commit_callbacks):
    TelegramUser.objects.create(telegram_user_id=ALICE_TG, user=alice)
    sent(message(ALICE_TG, "Hi"), django_capture_on_commit_callbacks)
    assert Episode.objects.get().counterpart_user == alice


def test_the_same_persons_messages_make_one_episode(routed, fake_gateway, django_capture_on_commit_callbacks):
    sent(message(DANA_TG, "Hi"), django_capture_on_commit_callbacks)
    sent(message(DANA_TG, "Where is my parcel?"), django_capture_on_commit_callbacks)
    assert Episode.objects.count() == 1 and Episode.objects.get().turns.count() == 4


def test_a_group_chat_has_no_episodes(routed, django_capture_on_commit_callbacks):
    outcome = sent(
        message(DANA_TG, "Hi all", chat_id=GROUP, chat_type="supergroup"), django_capture_on_commit_callbacks
    )
    assert outcome == "ignored: a group chat has no episodes"
    assert not Episode.objects.exists() and routed.calls_of("sendMessage") == []


def test_a_chat_that_is_not_routed_is_left_alone(routed, settings, django_capture_on_commit_callbacks):
    settings.TELEGRAM_ROLE_CHATS = "4242:helpdesk"
    assert sent(message(DANA_TG, "Hi"), django_capture_on_commit_callbacks) == "ignored: not a reply to a card"
    assert not Episode.objects.exists()


def test_a_named_chat_routes_to_its_role(routed, settings, fake_gateway, django_capture_on_commit_callbacks):
    make_role("billing")
    settings.TELEGRAM_ROLE_CHATS = f"{DANA_TG}:billing,*:helpdesk"
    sent(message(DANA_TG, "Invoice?"), django_capture_on_commit_callbacks)
    assert Episode.objects.get().role.slug == "billing"


def test_a_message_while_the_role_is_still_answering_gets_a_busy_reply(routed, django_capture_on_commit_callbacks):
    sent(message(DANA_TG, "Hi"), django_capture_on_commit_callbacks)
    Episode.objects.update(busy=True)
    outcome = sent(message(DANA_TG, "Hello?"), django_capture_on_commit_callbacks)
    assert outcome == "chat: a turn with role:helpdesk"
    assert routed.calls_of("sendMessage")[-1]["text"].startswith("I am still answering your previous message")


def test_a_route_to_no_role_is_ignored_with_the_reason(routed, settings, django_capture_on_commit_callbacks):
    settings.TELEGRAM_ROLE_CHATS = "*:nobody"
    outcome = sent(message(DANA_TG, "Hi"), django_capture_on_commit_callbacks)
    assert outcome == "ignored: TELEGRAM_ROLE_CHATS names no role 'nobody'"


def test_a_malformed_route_fails_naming_the_entry(routed, settings, django_capture_on_commit_callbacks):
    settings.TELEGRAM_ROLE_CHATS = "helpdesk"
    with pytest.raises(
        ImproperlyConfigured, match="TELEGRAM_ROLE_CHATS: expected '<chat id>:<role slug>', got 'helpdesk'"
    ):
        sent(message(DANA_TG, "Hi"), django_capture_on_commit_callbacks)
