"""Updates the webhook cannot use: answered 200 and ignored (Telegram redelivers anything else forever)."""

from __future__ import annotations

import json

import pytest

from evolution import tasks
from evolution.models import Idea
from hitl.channels.telegram import handle_update
from hitl.models import TelegramUpdate, TelegramUser
from tests.fakes.telegram import CHAT_ID
from tests.fakes.telegram_fixtures import WEBHOOK_SECRET
from tests.grading.grading_helpers import make_entity

pytestmark = pytest.mark.django_db

ALICE_TG = 111


@pytest.fixture
def chat(telegram_on, alice, monkeypatch):
    TelegramUser.objects.create(telegram_user_id=ALICE_TG, user=alice)
    monkeypatch.setattr(tasks.analyse_round, "delay", lambda round_id: None)
    return telegram_on


def post_raw(client, body: str):
    return client.post(
        "/telegram/webhook/",
        body,
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
    )


def post_update(client, update: dict):
    return post_raw(client, json.dumps(update))


def message(update_id: int = 501, **fields) -> dict:
    body = {
        "message_id": 9,
        "date": 1,
        "chat": {"id": CHAT_ID, "type": "supergroup"},
        "from": {"id": ALICE_TG, "is_bot": False, "first_name": "Alice"},
        "text": "hello",
    }
    body.update(fields)
    return {"update_id": update_id, "message": body}


def test_an_update_id_past_any_column_is_ignored(client, chat):
    response = post_update(client, {"update_id": 2**70, "message": {"text": "hi"}})
    assert response.status_code == 200
    assert response.content.decode() == f"ignored: update_id: {2**70} is not an update id (0 to 2^63-1)"
    assert not TelegramUpdate.objects.exists()


@pytest.mark.parametrize(
    "fields,why",
    [
        ({"chat": [CHAT_ID]}, "message.chat: expected an object, got a list"),
        ({"reply_to_message": "9"}, "message.reply_to_message: expected an object, got text"),
        ({"from": {"id": "alice"}}, "message.from.id: expected an integer, got text"),
        ({"message_id": 2**70}, f"message.message_id: {2**70} is outside -2^63..2^63-1"),
        ({"text": ["/idea"]}, "message.text: expected text, got a list"),
    ],
)
def test_an_update_of_the_wrong_shape_is_ignored_and_remembered(client, chat, fields, why):
    response = post_update(client, message(**fields))
    assert (response.status_code, response.content.decode()) == (200, f"ignored: {why}")
    assert TelegramUpdate.objects.get(update_id=501).outcome == f"ignored: {why}"
    assert post_update(client, message(**fields)).content.decode().startswith("duplicate")


def test_a_button_press_of_the_wrong_shape_is_ignored(client, chat):
    update = {"update_id": 502, "callback_query": {"id": "q", "from": ["alice"], "data": "x:accept"}}
    response = post_update(client, update)
    assert response.content.decode() == "ignored: callback_query.from: expected an object, got a list"


def test_an_idea_with_a_nul_is_ignored_and_nothing_is_posted(client, chat):
    make_entity("triage", evaluation={"method": "none"}, loop={"enabled": True})
    response = post_update(client, message(text="/idea scenario:triage Lead\u0000 with the numbers."))
    assert response.status_code == 200
    assert response.content.decode().startswith("ignored: message.text: contains a NUL character")
    assert not Idea.objects.exists()


def test_a_lone_surrogate_is_ignored(client, chat):
    response = post_raw(client, json.dumps(message())[:-2] + ', "text": "\\ud83d"}}')
    assert response.content.decode().startswith("ignored: message.text: contains a lone surrogate")


def test_a_body_nested_past_the_bound_is_ignored(client, chat):
    response = post_raw(client, '{"update_id": 503, "message": ' + "[" * 50_000 + "]" * 50_000 + "}")
    assert response.status_code == 200
    assert response.content.decode().startswith("ignored: message")
    assert "nested more than" in response.content.decode()


def test_polling_ignores_the_same_updates(chat):
    assert handle_update({"update_id": 2**64}).startswith("ignored: update_id")
    assert handle_update(message(chat=[1])) == "ignored: message.chat: expected an object, got a list"


@pytest.mark.parametrize("secret", ["\xe9\xff", "\u20ac", "\ud800", WEBHOOK_SECRET + "\x00"])
def test_a_secret_header_that_is_not_ascii_is_refused_403_like_a_wrong_one(client, chat, secret):
    response = client.post(
        "/telegram/webhook/",
        json.dumps(message()),
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": secret},
    )
    assert response.status_code == 403
    assert not TelegramUpdate.objects.exists()
