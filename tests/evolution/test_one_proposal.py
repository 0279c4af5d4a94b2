"""One proposal per change (issue 31, item 6), and cards made moot lose their buttons at once (item 5).

A change a person skipped, or the pre-merge check closed, among the lessons the proposer was shown is not carded
again; proposals waiting together for one entity say so on each card, and accepting one sets the others aside —
as does an Accept that takes a lock group, for the siblings' waiting proposals.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from evolution.loop import machine
from evolution.models import Cycle, Lesson, Recall, Round
from hitl.models import Card, Delivery
from hitl.sender import send_pending
from tests.evolution.loop_helpers import looped, proposed_round
from tests.evolution.test_set_aside import admin, carded, member, press  # noqa: F401 - the fixture is used
from tests.fakes.telegram import CHAT_ID
from tests.fakes.telegram_fixtures import TOKEN

pytestmark = pytest.mark.django_db

CHANGE = [{"path": "features/urgency/urgency.scenario.md", "content": "urgent: outage, down\n"}]
OTHER = [{"path": "features/urgency/urgency.scenario.md", "content": "urgent: outage, down, asap\n"}]


def proposing(entity, files: list[dict[str, Any]], *, shown: list[Lesson] = ()) -> Round:
    """A new cycle's proposal of ``files``, its proposer shown ``shown`` lessons (the brief's Recall rows)."""
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:again:{Cycle.objects.count()}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.ANALYSING,
        analysed=True,
    )
    rnd = proposed_round(cycle, status=Round.Status.PROPOSED, files=files, proposed_at=timezone.now())
    for lesson in shown:
        Recall.objects.create(lesson=lesson, round=rnd)
    return rnd


@pytest.fixture
def skipped(alice):
    """alice skipped CHANGE for urgency with a note; its lesson."""
    rnd = carded(looped("urgency"), files=CHANGE)
    press(rnd.card, alice, "skip", note="off-brand")
    return Lesson.objects.get(round=rnd)


def test_a_change_a_person_skipped_is_not_carded_again(skipped):
    again = proposing(skipped.entity, CHANGE, shown=[skipped])
    machine.decide_gate(again, now=timezone.now())
    again.refresh_from_db()
    cycle = again.cycle
    cycle.refresh_from_db()
    day = timezone.localtime(skipped.round.decided_at).strftime("%Y-%m-%d")
    assert cycle.status == Cycle.Status.SKIPPED
    assert cycle.reason == f"Set aside: the same change was skipped by alice on {day}: off-brand"
    assert again.card is None and again.rejection == Round.Rejection.ASIDE
    assert Card.objects.filter(status=Card.Status.PENDING).count() == 0


def test_a_different_change_or_one_the_proposer_was_not_shown_is_carded(skipped):
    other = proposing(skipped.entity, OTHER, shown=[skipped])
    machine.decide_gate(other, now=timezone.now())
    unseen = proposing(skipped.entity, CHANGE)
    machine.decide_gate(unseen, now=timezone.now())
    for rnd in (other, unseen):
        rnd.refresh_from_db()
        assert rnd.card is not None and rnd.card.status == Card.Status.PENDING


def test_a_change_the_pre_merge_check_closed_is_not_carded_again():
    entity = looped("urgency")
    closed = proposing(entity, CHANGE)
    Round.objects.filter(pk=closed.pk).update(
        status=Round.Status.CLOSED,
        pr_number=4,
        check_verdict={"verdict": "regressed", "reason": "lost input t-3"},
    )
    Cycle.objects.filter(pk=closed.cycle_id).update(status=Cycle.Status.REGRESSED, phase=Cycle.Phase.SETTLED)
    lesson = Lesson.objects.create(entity=entity, cycle=closed.cycle, round=closed, outcome=Cycle.Status.REGRESSED)
    again = proposing(entity, CHANGE, shown=[lesson])
    machine.decide_gate(again, now=timezone.now())
    again.cycle.refresh_from_db()
    day = timezone.localtime(lesson.created_at).strftime("%Y-%m-%d")
    assert again.cycle.reason == (
        f"Set aside: the same change was closed by the pre-merge check (PR #4) on {day}: lost input t-3"
    )


def test_proposals_waiting_together_say_so_on_each_card(alice):
    entity = looped("urgency")
    first = carded(entity, files=CHANGE)
    assert "other proposal" not in first.card.text
    second = carded(entity, files=OTHER)
    cards = [Card.objects.get(pk=r.card_id) for r in (first, second)]
    assert all(
        c.text.endswith("1 other proposal for Urgency waits; accepting either sets the other aside.") for c in cards
    )
    third = carded(entity, files=[{"path": "features/urgency/urgency.scenario.md", "content": "x\n"}])
    cards = [Card.objects.get(pk=r.card_id) for r in (first, second, third)]
    assert all(
        c.text.endswith("2 other proposals for Urgency wait; accepting one sets the others aside.") for c in cards
    )
    assert all(c.text.count("other proposal") == 1 for c in cards), "the line is rewritten, never stacked"
    press(cards[2], alice, "skip")
    cards = [Card.objects.get(pk=r.card_id) for r in (first, second)]
    assert all(
        c.text.endswith("1 other proposal for Urgency waits; accepting either sets the other aside.") for c in cards
    )


@pytest.fixture
def telegram(settings, fake_telegram):
    """Cards go to the loopback Bot API (python-telegram-bot's own client); the loop's steps are not run inline."""
    settings.TELEGRAM_BOT_TOKEN = TOKEN
    settings.TELEGRAM_CHAT_ID = str(CHAT_ID)
    settings.TELEGRAM_API_URL = fake_telegram.api_url
    settings.TELEGRAM_USERS = ""
    settings.TELEGRAM_SEND_PER_SECOND = 1000.0
    return fake_telegram


def message_of(card_pk) -> int:
    delivery = Delivery.objects.get(card_id=card_pk)
    assert delivery.status == Delivery.Status.SENT, delivery.last_error
    return int(delivery.message_id)


def test_accepting_one_sets_the_others_aside_and_their_cards_lose_their_buttons_at_once(
    alice, telegram, django_capture_on_commit_callbacks
):
    entity = looped("urgency")
    first, second = carded(entity, files=CHANGE), carded(entity, files=OTHER)
    send_pending()
    message = message_of(second.card_id)
    assert telegram.messages[message]["reply_markup"] is not None
    with django_capture_on_commit_callbacks(execute=True):
        press(first.card, alice, "accept")
    second.refresh_from_db()
    assert (second.status, second.rejection) == (Round.Status.SKIPPED, Round.Rejection.ASIDE)
    assert second.set_aside == f"alice accepted another proposal for Urgency (cycle {first.cycle_id})"
    second.cycle.refresh_from_db()
    assert second.cycle.status == Cycle.Status.SKIPPED and second.cycle.reason.startswith("Set aside: alice accepted")
    card = Card.objects.get(pk=second.card_id)
    assert (card.status, card.answered_via) == (Card.Status.CANCELLED, Card.Via.WITHDRAWN)
    shown = telegram.messages[message]
    assert shown["reply_markup"] is None, "the moot card's buttons are gone"
    assert "Closed without an answer: Set aside: alice accepted another proposal" in shown["text"]
    lesson = Lesson.objects.get(round=second)
    assert lesson.rejection == Round.Rejection.ASIDE  # never a person's no


def test_an_accept_that_takes_a_lock_group_sets_the_siblings_waiting_proposal_aside(alice, client):
    waiting = carded(member("urgency"))
    taking = carded(member("triage"))
    press(taking.card, alice, "accept")
    waiting.refresh_from_db()
    assert waiting.status == Round.Status.SKIPPED and waiting.rejection == Round.Rejection.ASIDE
    assert waiting.set_aside == (
        f"lock group support is held by a change to workflow triage that is being applied (cycle {taking.cycle_id})"
    )
    client.force_login(alice)
    page = client.get(Card.objects.get(pk=waiting.card_id).get_absolute_url()).content.decode()
    assert 'value="accept"' not in page and "Closed without an answer" in page
