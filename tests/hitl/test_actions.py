"""Opening, answering, cancelling and expiring cards; handlers called once after commit."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from hitl.actions import answer_card, cancel_card, expire_due_cards, open_card, retry_handler, run_handler
from hitl.models import Card, Delivery, Notice
from singularity.errors import ConfigError
from tests.concurrency import at_once, each_at_once
from tests.hitl.helpers import DECIDE, PRODUCER, RATING_BUTTONS, RATING_FORM, make_card

pytestmark = pytest.mark.django_db


def test_opening_a_card_twice_under_one_key_returns_the_first(handler):
    first = make_card(key="rating:run-1", kind="rating", options=RATING_BUTTONS, title="Rate run 1")
    again = make_card(key="rating:run-1", kind="rating", options=RATING_BUTTONS, title="Something else")
    assert again.pk == first.pk
    assert again.title == "Rate run 1"
    assert Card.objects.filter(key="rating:run-1").count() == 1


def test_a_card_renders_its_text_from_a_template():
    card = open_card(
        producer=PRODUCER,
        kind="decide",
        key="decide:template",
        title="t",
        subject="s",
        options=DECIDE,
        expires_at=timezone.now() + timedelta(hours=1),
        template="hitl/telegram/notice.txt",
        context={"notice": {"title": "from a template", "text": "body"}},
    )
    assert "from a template" in card.text and "body" in card.text


def test_no_delivery_is_made_while_telegram_is_off():
    make_card()
    assert not Delivery.objects.exists()


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        ("decide", [], "at least one"),
        ("decide", [{"value": "x" * 41, "label": "long"}], "longer than 40 bytes"),
        ("decide", [{"value": "refine", "label": "Refine"}], "reserved"),
        ("rating", [{"value": str(n), "label": str(n), "metric_id": "q"} for n in range(1, 11)], "is a form"),
        ("decide", RATING_FORM, "only a rating card is a form"),
        ("nonsense", DECIDE, "kind"),
    ],
)
def test_it_refuses_options_that_do_not_fit_the_kind(kind, options, error):
    with pytest.raises(ConfigError, match=error):
        make_card(kind=kind, key=f"bad:{kind}:{len(options)}", options=options)


def test_a_person_answers_and_the_handler_runs_once_after_commit(handler, alice, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        result = answer_card(card.pk, user=alice, is_agent=False, choice="accept", note="good", via="dashboard")
        assert handler.calls == [], "the handler waits for the commit"
    assert result.ok and result.code == "answered"
    assert len(callbacks) == 1
    assert handler.calls == [
        (card.pk, "answered", {"choice": "accept", "note": "good", "values": {}, "refinement": ""}, "alice")
    ]
    card.refresh_from_db()
    assert (card.status, card.responded_by, card.answered_via) == ("answered", alice, "dashboard")
    assert card.handled_at is not None and card.handler_error == ""
    assert run_handler(card.pk) is False, "a second call finds the handler claimed"
    assert len(handler.calls) == 1


def test_an_agent_is_refused_and_the_card_stays_pending(handler, alice, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        result = answer_card(card.pk, user=alice, is_agent=True, choice="accept", via="api")
        cancelled = cancel_card(card.pk, user=alice, is_agent=True, via="api")
    assert (result.ok, result.code) == (False, "unauthorized_responder")
    assert cancelled.code == "unauthorized_responder"
    card.refresh_from_db()
    assert card.status == "pending" and card.answer == {} and card.responded_by is None
    assert handler.calls == []


def test_a_second_answer_changes_nothing_and_says_who_answered(handler, alice, bob, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
        second = answer_card(card.pk, user=bob, is_agent=False, choice="skip", via="telegram")
    assert (second.ok, second.code) == (False, "already_closed")
    assert "already answered by alice" in second.detail and "Accept" in second.detail
    card.refresh_from_db()
    assert card.answer["choice"] == "accept" and card.responded_by == alice
    assert len(handler.calls) == 1


def test_a_choice_that_is_not_an_option_is_invalid(handler, alice):
    card = make_card()
    result = answer_card(card.pk, user=alice, is_agent=False, choice="maybe", via="dashboard")
    assert (result.ok, result.code) == (False, "invalid")
    assert "accept, skip, refine" in result.detail
    card.refresh_from_db()
    assert card.is_pending


def test_a_refinement_answers_a_decide_card_but_not_a_grant(handler, alice, django_capture_on_commit_callbacks):
    decide = make_card()
    grant = make_card(
        kind="grant",
        key="grant:1",
        options=[{"value": "approve", "label": "Approve"}, {"value": "deny", "label": "Deny"}],
    )
    with django_capture_on_commit_callbacks(execute=True):
        refused = answer_card(grant.pk, user=alice, is_agent=False, choice="refine", refinement="x", via="dashboard")
        empty = answer_card(decide.pk, user=alice, is_agent=False, choice="refine", refinement="  ", via="dashboard")
        result = answer_card(
            decide.pk, user=alice, is_agent=False, choice="refine", refinement="shorter", via="dashboard"
        )
    assert refused.code == "invalid" and empty.code == "invalid"
    assert result.ok
    assert handler.calls[0][2] == {"choice": "refine", "note": "", "values": {}, "refinement": "shorter"}


def test_a_rating_button_carries_its_metric_value(handler, alice, django_capture_on_commit_callbacks):
    card = make_card(kind="rating", key="rating:2", options=RATING_BUTTONS)
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=alice, is_agent=False, choice="4", note="good pacing", via="dashboard")
    assert handler.calls[0][2] == {"choice": "4", "note": "good pacing", "values": {"quality": 4}, "refinement": ""}


def test_a_rating_form_checks_each_value_against_its_scale(handler, alice, django_capture_on_commit_callbacks):
    card = make_card(kind="rating", key="rating:3", options=RATING_FORM)
    outside = answer_card(
        card.pk, user=alice, is_agent=False, choice="rate", values={"clarity": 11, "pacing": 50}, via="api"
    )
    off_step = answer_card(
        card.pk, user=alice, is_agent=False, choice="rate", values={"clarity": 5, "pacing": 52}, via="api"
    )
    missing = answer_card(card.pk, user=alice, is_agent=False, choice="rate", values={"clarity": 5}, via="api")
    assert [r.code for r in (outside, off_step, missing)] == ["invalid"] * 3
    assert "outside 1–10" in outside.detail and "step of 5" in off_step.detail and "Pacing" in missing.detail
    with django_capture_on_commit_callbacks(execute=True):
        ok = answer_card(
            card.pk, user=alice, is_agent=False, choice="rate", values={"clarity": "7", "pacing": 55}, via="api"
        )
    assert ok.ok
    assert handler.calls[0][2]["values"] == {"clarity": 7, "pacing": 55}


def test_a_person_cancels_and_the_handler_hears_it(handler, bob, django_capture_on_commit_callbacks):
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        result = cancel_card(card.pk, user=bob, is_agent=False, note="obsolete", via="api")
    assert result.ok
    assert handler.calls == [
        (card.pk, "cancelled", {"choice": "", "note": "obsolete", "values": {}, "refinement": ""}, "bob")
    ]


def test_expiry_closes_the_card_and_calls_the_handler(handler, alice, django_capture_on_commit_callbacks):
    card = make_card(hours=48)
    later = make_card(key="decide:later", hours=72)
    with django_capture_on_commit_callbacks(execute=True):
        assert expire_due_cards() == 0
    with time_machine.travel(timezone.now() + timedelta(hours=48, seconds=1)):
        with django_capture_on_commit_callbacks(execute=True):
            assert expire_due_cards() == 1
            assert expire_due_cards() == 0, "idempotent"
        late = answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
    card.refresh_from_db()
    assert (card.status, card.answered_via, card.responded_by) == ("expired", "expiry", None)
    assert late.code == "already_closed" and "expired" in late.detail
    assert handler.calls == [(card.pk, "expired", {}, None)]
    assert Card.objects.get(pk=later.pk).is_pending


def test_an_answer_past_the_deadline_expires_the_card_before_the_sweep(
    handler, alice, django_capture_on_commit_callbacks
):
    card = make_card(hours=1)
    with time_machine.travel(timezone.now() + timedelta(hours=2)), django_capture_on_commit_callbacks(execute=True):
        result = answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
    assert result.code == "already_closed"
    card.refresh_from_db()
    assert card.status == "expired"
    assert handler.calls == [(card.pk, "expired", {}, None)]


def test_a_failing_handler_is_recorded_on_the_card_and_its_writes_rolled_back(
    handler, alice, django_capture_on_commit_callbacks
):
    handler.fail_with = RuntimeError("the loop is down")
    handler.post_notices = True
    card = make_card()
    with django_capture_on_commit_callbacks(execute=True):
        result = answer_card(card.pk, user=alice, is_agent=False, choice="skip", via="dashboard")
    assert result.ok
    card.refresh_from_db()
    assert card.handler_error == "RuntimeError: the loop is down"
    assert card.handled_at is not None
    assert card.status == "answered"
    assert not Notice.objects.exists(), "the handler's own writes are rolled back"
    handler.fail_with = None
    assert retry_handler(card.pk) is True
    card.refresh_from_db()
    assert card.handler_error == "" and len(handler.calls) == 2 and Notice.objects.count() == 1


def test_a_card_without_a_handler_says_so(alice, django_capture_on_commit_callbacks):
    card = make_card(key="decide:orphan")
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=alice, is_agent=False, choice="accept", via="dashboard")
    card.refresh_from_db()
    assert "no handler registered for producer 'test', kind 'decide'" in card.handler_error


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_racing_answers_write_one(handler, alice, bob):
    if connection.vendor != "postgresql":
        pytest.skip("needs Postgres: SQLite serialises writers")
    card = make_card(key="decide:race")

    def answer(user, choice):
        return lambda: (
            user.username,
            answer_card(card.pk, user=user, is_agent=False, choice=choice, via="dashboard"),
        )

    results = dict(each_at_once([answer(alice, "accept"), answer(bob, "skip")]))
    codes = sorted(r.code for r in results.values())
    assert codes == ["already_closed", "answered"]
    winner = next(name for name, r in results.items() if r.ok)
    card.refresh_from_db()
    assert card.responded_by.username == winner
    assert len(handler.calls) == 1 and handler.calls[0][3] == winner


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_producers_racing_to_open_one_key_get_one_card():
    if connection.vendor != "postgresql":
        pytest.skip("needs Postgres: SQLite serialises writers")
    opened = at_once(lambda: make_card(key="rating:run-77").pk, 4)
    assert len(opened) == 4 and len(set(opened)) == 1
    assert Card.objects.filter(key="rating:run-77").count() == 1


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ({"choice": "accept", "note": "go\x00od"}, "note"),
        ({"choice": "refine", "refinement": "short\x00er"}, "refinement"),
    ],
)
def test_an_answer_whose_text_holds_a_nul_is_refused_naming_the_field_and_the_card_stays_pending(
    handler, alice, answer, named
):
    # Whatever door it came through: PostgreSQL cannot hold U+0000, and a person's few words are theirs to retype.
    card = make_card()
    result = answer_card(card.pk, user=alice, is_agent=False, via="dashboard", **answer)
    assert (result.ok, result.code, result.detail) == (False, "invalid", f"{named}: contains a NUL character")
    card.refresh_from_db()
    assert card.is_pending and handler.calls == []


def test_a_form_answer_whose_value_holds_a_nul_is_refused_naming_it(handler, alice):
    card = make_card(kind="rating", key="rating:nul", options=RATING_FORM)
    result = answer_card(
        card.pk, user=alice, is_agent=False, choice="rate", values={"clarity": "7\x00", "pacing": "5"}, via="dashboard"
    )
    assert (result.ok, result.code) == (False, "invalid")
    assert Card.objects.get(pk=card.pk).is_pending
