"""Telegram against a loopback Bot API driven by the real python-telegram-bot client."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from hitl.actions import answer_card, post_notice
from hitl.channels.telegram import handle_update
from hitl.models import Card, Delivery, TelegramUpdate, TelegramUser
from hitl.sender import send_pending
from tests.fakes.telegram import BOT_ID, CHAT_ID
from tests.fakes.telegram_fixtures import WEBHOOK_SECRET
from tests.hitl.helpers import RATING_BUTTONS, RATING_FORM, make_card

pytestmark = pytest.mark.django_db

ALICE_TG = 111
STRANGER_TG = 999


@pytest.fixture
def alice_on_telegram(alice):
    TelegramUser.objects.create(telegram_user_id=ALICE_TG, user=alice, note="alice's phone")
    return alice


def sent_card(telegram, **kwargs) -> tuple[Card, int]:
    """Open a card, run the sender, and return the card with its Telegram message id."""
    card = make_card(**kwargs)
    assert send_pending() == 1
    delivery = Delivery.objects.get(card=card)
    assert delivery.status == "sent", delivery.last_error
    return card, delivery.message_id


def test_a_card_is_sent_with_a_button_per_option(telegram_on):
    card, message_id = sent_card(telegram_on)
    [call] = telegram_on.calls_of("sendMessage")
    assert call["chat_id"] == CHAT_ID
    assert call["reply_markup"] == {
        "inline_keyboard": [
            [
                {"text": "Accept", "callback_data": f"{card.short_id}:accept"},
                {"text": "Skip", "callback_data": f"{card.short_id}:skip"},
            ]
        ]
    }
    assert "Proposal decide:1" in call["text"]
    assert f"cycle 7 of triage — {settings.SINGULARITY_PUBLIC_URL}/evolution/cycles/7/" in call["text"]
    assert "reply to this message to refine" in call["text"]
    delivery = Delivery.objects.get(card=card)
    assert (delivery.chat_id, delivery.message_id, delivery.attempts) == (str(CHAT_ID), message_id, 1)
    assert send_pending() == 0, "nothing is sent twice"


def test_a_rating_form_is_sent_with_instructions_to_reply_and_no_buttons(telegram_on):
    sent_card(telegram_on, kind="rating", key="rating:form", options=RATING_FORM)
    [call] = telegram_on.calls_of("sendMessage")
    assert "reply_markup" not in call
    assert "Reply to this message with a number for each" in call["text"]
    assert "• Clarity (1–10)" in call["text"] and "• Pacing (0–100)" in call["text"]


def test_a_notice_is_sent_as_a_plain_message(telegram_on):
    post_notice(
        producer="test", kind="skipped", title="Cycle 7 skipped", text="Nobody answered.", url="/evolution/cycles/7/"
    )
    assert send_pending() == 1
    [call] = telegram_on.calls_of("sendMessage")
    assert (
        call["text"] == f"ℹ️ Cycle 7 skipped\n\nNobody answered.\n{settings.SINGULARITY_PUBLIC_URL}/evolution/cycles/7/"
    )
    assert "reply_markup" not in call


def test_a_press_answers_the_card_as_the_mapped_person_and_the_message_shows_it(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = handle_update(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=ALICE_TG))
    assert outcome.startswith("answered")
    card.refresh_from_db()
    assert (card.status, card.responded_by.username, card.answered_via) == ("answered", "alice", "telegram")
    assert handler.calls == [
        (card.pk, "answered", {"choice": "accept", "note": "", "values": {}, "refinement": ""}, "alice")
    ]
    [callback] = telegram_on.calls_of("answerCallbackQuery")
    assert callback["text"] == "Answered: Accept."
    message = telegram_on.messages[message_id]
    assert "✅ Answered by alice: Accept" in message["text"]
    assert message["reply_markup"] is None, "the buttons are gone"
    assert Delivery.objects.get(card=card).edited_at is not None


def test_an_answer_on_the_dashboard_edits_the_telegram_message(
    telegram_on, bob, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=bob, is_agent=False, choice="skip", note="off-brand", via="dashboard")
    text = telegram_on.messages[message_id]["text"]
    assert "✅ Answered by bob: Skip" in text and "Note: off-brand" in text and "via dashboard" in text


def test_a_native_reply_refines_a_decide_card(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    update = telegram_on.reply(message_id, "shorter, and keep the tone", user_id=ALICE_TG)
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(update)
    card.refresh_from_db()
    assert card.answer == {"choice": "refine", "note": "", "values": {}, "refinement": "shorter, and keep the tone"}
    bot_reply = telegram_on.calls_of("sendMessage")[-1]
    assert bot_reply["text"] == "Answered: Refine."
    assert bot_reply["reply_parameters"]["message_id"] == update["message"]["message_id"]
    assert "“shorter, and keep the tone”" in telegram_on.messages[message_id]["text"]


def test_a_rating_reply_becomes_values_and_a_note(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on, kind="rating", key="rating:run-9", options=RATING_BUTTONS)
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(telegram_on.reply(message_id, "4 good pacing", user_id=ALICE_TG))
    card.refresh_from_db()
    assert card.answer == {"choice": "4", "note": "good pacing", "values": {"quality": 4}, "refinement": ""}
    assert handler.calls[0][3] == "alice"


def test_several_numbers_rate_a_form_card_in_order(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on, kind="rating", key="rating:form", options=RATING_FORM)
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(telegram_on.reply(message_id, "7", user_id=ALICE_TG))
        handle_update(telegram_on.reply(message_id, "7, 55 — too long", user_id=ALICE_TG))
    card.refresh_from_db()
    assert card.answer["values"] == {"clarity": 7, "pacing": 55} and card.answer["note"] == "too long"
    first_reply = telegram_on.calls_of("sendMessage")[1]["text"]
    assert first_reply == "Not an answer: I need 2 number(s), in this order: Clarity, Pacing."


def test_a_stranger_is_refused_with_a_short_answer_and_nothing_is_written(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = handle_update(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=STRANGER_TG))
        handle_update(telegram_on.reply(message_id, "do it", user_id=STRANGER_TG))
    assert outcome.startswith("refused")
    card.refresh_from_db()
    assert card.is_pending and card.answer == {} and handler.calls == []
    [callback] = telegram_on.calls_of("answerCallbackQuery")
    assert callback["text"] == "You are not on the list of people who may answer these cards."
    assert telegram_on.calls_of("sendMessage")[-1]["text"] == callback["text"]
    assert "editMessageText" not in {c.method for c in telegram_on.calls}


def test_a_redelivered_update_answers_nothing_twice(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    update = telegram_on.press(message_id, f"{card.short_id}:skip", user_id=ALICE_TG)
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(update)
        again = handle_update(update)
    assert again.startswith("duplicate")
    assert len(handler.calls) == 1
    assert len(telegram_on.calls_of("answerCallbackQuery")) == 1
    assert TelegramUpdate.objects.get(update_id=update["update_id"]).outcome.startswith("answered")


def test_a_second_press_says_who_answered_first(
    telegram_on, alice_on_telegram, bob, handler, django_capture_on_commit_callbacks
):
    TelegramUser.objects.create(telegram_user_id=222, user=bob)
    card, message_id = sent_card(telegram_on)
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=ALICE_TG))
        handle_update(telegram_on.press(message_id, f"{card.short_id}:skip", user_id=222))
    second = telegram_on.calls_of("answerCallbackQuery")[1]["text"]
    assert second.startswith("Nothing changed: the card was already answered by alice")
    assert len(handler.calls) == 1


def test_the_bots_own_messages_are_never_answers(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on, kind="rating", key="rating:bot", options=RATING_BUTTONS)
    with django_capture_on_commit_callbacks(execute=True):
        reply = handle_update(telegram_on.reply(message_id, "5 perfect", user_id=BOT_ID, is_bot=True))
        press = handle_update(telegram_on.press(message_id, f"{card.short_id}:5", user_id=BOT_ID, is_bot=True))
    assert reply.startswith("ignored") and press.startswith("ignored")
    card.refresh_from_db()
    assert card.is_pending and handler.calls == []


def test_users_from_the_setting_answer_too_and_an_unknown_name_fails_naming_it(
    telegram_on, settings, bob, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    settings.TELEGRAM_USERS = "222:bob,333:nobody"
    with pytest.raises(ImproperlyConfigured, match="TELEGRAM_USERS: no such user nobody"):
        handle_update(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=222))
    settings.TELEGRAM_USERS = "222:bob"
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=222))
    card.refresh_from_db()
    assert card.responded_by == bob


def test_a_permanent_error_is_recorded_and_not_retried(telegram_on):
    telegram_on.fail("sendMessage", 400, "Bad Request: chat not found")
    card = make_card()
    assert send_pending() == 1
    delivery = Delivery.objects.get(card=card)
    assert delivery.status == "failed" and "chat not found" in delivery.last_error.lower()
    assert delivery.next_attempt_at is None
    with time_machine.travel(timezone.now() + timedelta(days=1)):
        assert send_pending() == 0
    assert len(telegram_on.calls_of("sendMessage")) == 1


def test_a_blocked_bot_is_a_permanent_error(telegram_on):
    telegram_on.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
    post_notice(producer="test", kind="k", title="t")
    send_pending()
    delivery = Delivery.objects.get()
    assert delivery.status == "failed" and "bot was blocked" in delivery.last_error.lower()


def test_flood_control_is_retried_after_telegrams_wait(telegram_on):
    telegram_on.fail("sendMessage", 429, "Too Many Requests: retry after 30", retry_after=30)
    card = make_card()
    start = timezone.now()
    send_pending()
    delivery = Delivery.objects.get(card=card)
    assert delivery.status == "retrying" and "wait 30 s" in delivery.last_error
    assert timedelta(seconds=29) < delivery.next_attempt_at - start < timedelta(seconds=35)
    assert send_pending() == 0, "not before the wait"
    with time_machine.travel(start + timedelta(seconds=31)):
        assert send_pending() == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("sent", 2, "")
    assert len(telegram_on.calls_of("sendMessage")) == 2


def test_server_errors_back_off_exponentially(telegram_on):
    telegram_on.fail("sendMessage", 502, "Bad Gateway", times=2)
    card = make_card()
    start = timezone.now()
    send_pending()
    first = Delivery.objects.get(card=card).next_attempt_at - start
    with time_machine.travel(start + timedelta(seconds=11)):
        send_pending()
        second = Delivery.objects.get(card=card).next_attempt_at - timezone.now()
    assert timedelta(seconds=9) < first < timedelta(seconds=12)
    assert timedelta(seconds=19) < second < timedelta(seconds=22)
    with time_machine.travel(start + timedelta(seconds=40)):
        send_pending()
    assert Delivery.objects.get(card=card).status == "sent"


def test_a_card_closed_before_it_could_be_sent_is_not_sent(telegram_on, alice, handler):
    card = make_card()
    answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
    send_pending()
    delivery = Delivery.objects.get(card=card)
    assert delivery.status == "skipped" and "answered before it could be sent" in delivery.last_error
    assert telegram_on.calls_of("sendMessage") == []


def post_update(client, update, secret=WEBHOOK_SECRET):
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return client.post("/telegram/webhook/", json.dumps(update), content_type="application/json", headers=headers)


def test_the_webhook_checks_its_secret_and_answers_200_to_the_rest(
    client, telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks
):
    card, message_id = sent_card(telegram_on)
    update = telegram_on.press(message_id, f"{card.short_id}:accept", user_id=ALICE_TG)
    assert post_update(client, update, secret=None).status_code == 403
    assert post_update(client, update, secret="wrong").status_code == 403
    card.refresh_from_db()
    assert card.is_pending
    assert post_update(client, {"update_id": 1, "edited_channel_post": {}}).status_code == 200
    assert (
        client.post(
            "/telegram/webhook/",
            "not json",
            content_type="application/json",
            headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
        ).status_code
        == 200
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = post_update(client, update)
    assert response.status_code == 200 and response.content.decode().startswith("answered")
    card.refresh_from_db()
    assert card.responded_by == alice_on_telegram
    assert post_update(client, update).content.decode().startswith("duplicate")


def test_telegram_off_means_the_webhook_is_not_found(client, settings):
    settings.TELEGRAM_BOT_TOKEN = ""
    assert post_update(client, {"update_id": 5}).status_code == 404


def test_long_polling_answers_cards_and_moves_the_offset(
    telegram_on, alice_on_telegram, handler, django_capture_on_commit_callbacks, capsys
):
    card, message_id = sent_card(telegram_on)
    update = telegram_on.push(telegram_on.press(message_id, f"{card.short_id}:accept", user_id=ALICE_TG))
    with django_capture_on_commit_callbacks(execute=True):
        call_command("telegram_poll", "--once", "--timeout", "0")
    card.refresh_from_db()
    assert card.responded_by == alice_on_telegram and card.answered_via == "telegram"
    call_command("telegram_poll", "--once", "--timeout", "0")
    offsets = [c.get("offset") for c in telegram_on.calls_of("getUpdates")]
    assert offsets == [None, update["update_id"] + 1]
    assert len(handler.calls) == 1


def test_the_webhook_command_sets_the_secret(telegram_on):
    call_command("telegram_webhook", "--url", "https://singularity.example/telegram/webhook/")
    assert telegram_on.webhook["url"] == "https://singularity.example/telegram/webhook/"
    assert telegram_on.webhook["secret_token"] == WEBHOOK_SECRET


def test_an_answered_cards_message_loses_its_buttons_before_the_handler_runs(
    telegram_on, bob, handler, django_capture_on_commit_callbacks
):
    """The edit is made at once, in the answering process: a handler (the loop's apply, a replay) never delays it."""
    card, message_id = sent_card(telegram_on)
    seen_by_handler: list[str] = []
    handler.on_call = lambda: seen_by_handler.append(telegram_on.messages[message_id]["text"])
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=bob, is_agent=False, choice="accept", via="dashboard")
    assert len(seen_by_handler) == 1
    assert "✅ Answered by bob: Accept" in seen_by_handler[0], "the message was edited after the handler ran"
    assert telegram_on.messages[message_id]["reply_markup"] is None
    assert len(telegram_on.calls_of("editMessageText")) == 1, "edited once, not again by the sender"
