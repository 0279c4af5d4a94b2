"""Rating cards: grading asks a person to rate a run by evaluation.human.ask (CONFORMANCE R4.16–R4.26)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from grading.booking import book_for_rating, on_terminal
from grading.calibration import calibration
from grading.cards import card_key, decide, maybe_card, observed, open_missing_cards, post_card
from grading.models import Entity, Execution, Grade, Rating, RatingSubmission
from grading.ratings import RatingRefused
from hitl import registry
from hitl.actions import answer_card, expire_due_cards, run_handler
from hitl.channels.telegram import handle_update
from hitl.models import Card, Delivery, TelegramUser
from hitl.sender import send_pending
from singularity.celery import app as celery_app
from tests.grading.rating_helpers import (
    HELPFUL,
    JUDGE,
    LAYOUT_FIT,
    SCORE100,
    make_entity,
    make_grade,
    make_run,
    metric,
)

pytestmark = pytest.mark.django_db

ALICE_TG = 111
#: A judged metric on 1–10 (people rate over the judge).
CLARITY = metric(kind="judged", human=True, direction="max", unit="score", role="guard", criterion="Reads clearly",
                 scale={"min": 1, "max": 10, "step": 1, "labels": {"1..3": "Muddled", "8..10": "Crisp"}})  # fmt: skip


@pytest.fixture(autouse=True)
def eager_tasks() -> Iterator[None]:
    """Run enqueued tasks in-process, as a worker would, instead of writing them to the broker."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def asking(ask: str, *, metrics: dict[str, Any] | None = None, slug: str = "digest", **human: Any) -> Entity:
    """An entity whose people rate ``metrics`` (layout_fit on 1–5 by default), asked per ``ask``."""
    return make_entity(
        slug,
        metrics={"layout_fit": LAYOUT_FIT} if metrics is None else metrics,
        evaluation={"human": {"ask": ask, **human}},
    )


def booked(entity: Entity, **run_fields: Any) -> Grade:
    """A finished run of ``entity`` with its grading booked (the judge has not answered yet)."""
    changes = {name: run_fields.pop(name) for name in ("output", "duration_ms") if name in run_fields}
    run = make_run(entity, **run_fields)
    for name, value in changes.items():
        setattr(run, name, value)
    run.save()
    return make_grade(run, status=Grade.Status.BOOKED)


def card_of(run: Execution) -> Card | None:
    return Card.objects.filter(key=card_key(run.pk)).first()


@pytest.fixture
def carded(django_capture_on_commit_callbacks):
    """Return a function that books-and-asks: ``maybe_card`` as the booking calls it, its after-commit task run."""

    def carded(grade: Grade) -> Card | None:
        with django_capture_on_commit_callbacks(execute=True):
            maybe_card(grade)
        return card_of(grade.execution)

    return carded


def calibrate(entity: Entity, person: Any, pairs: int = 5) -> None:
    """Give ``entity`` ``pairs`` graded runs where the judge and ``person`` agree on layout_fit."""
    start = timezone.now() - timedelta(days=3)
    for n in range(pairs):
        run = make_run(entity, completed_at=start + timedelta(hours=n))
        make_grade(run, metrics={"layout_fit": 0.75}, judge=JUDGE)
        Rating.objects.create(execution=run, metric_id="layout_fit", user=person, value=4, normalized=0.75)


def spot_checked(run_id: Any, share: float) -> bool:
    """The seed's rule, written out: SHA-256 of the salted run id, its first 8 bytes against share × 2^64."""
    return int.from_bytes(hashlib.sha256(b"spot-check\0" + str(run_id).encode()).digest()[:8], "big") < share * 2**64


# --- Who is asked (R4.17–R4.21) ----------------------------------------------


def test_ask_never_posts_no_card_when_a_run_is_booked(django_capture_on_commit_callbacks):
    entity = make_entity(metrics={"helpful": HELPFUL}, evaluation={"method": "none"})
    run = make_run(entity, sampling="")
    with django_capture_on_commit_callbacks(execute=True):
        assert on_terminal(run) is not None
    assert not Card.objects.exists()
    run.refresh_from_db()
    assert run.awaiting_rating_until is None


def test_ask_always_cards_every_graded_run_where_its_grading_is_booked(django_capture_on_commit_callbacks):
    entity = make_entity(metrics={"helpful": HELPFUL}, evaluation={"method": "none", "human": {"ask": "always"}})
    runs = [make_run(entity, sampling="") for _ in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        for run in runs:
            assert on_terminal(run) is not None
    assert Card.objects.filter(producer="grading", kind="rating").count() == 3
    for run in runs:
        card = card_of(run)
        run.refresh_from_db()
        assert card is not None and card.status == Card.Status.PENDING
        assert run.awaiting_rating_until == card.expires_at
        assert card.payload == {"run_kind": "workflow", "run_id": str(run.pk), "entity": str(entity)}


def test_runs_booked_as_a_reported_batch_are_carded_too(django_capture_on_commit_callbacks):
    from grading.booking import on_terminal_many

    entity = make_entity(metrics={"helpful": HELPFUL}, evaluation={"method": "none", "human": {"ask": "always"}})
    runs = [make_run(entity, sampling="") for _ in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        assert all(grade is not None for grade in on_terminal_many(runs))
    assert all(card_of(run) is not None for run in runs)


def test_a_run_the_sampler_passed_by_is_not_carded(django_capture_on_commit_callbacks):
    entity = make_entity(
        metrics={"helpful": HELPFUL}, evaluation={"method": "none", "human": {"ask": "always"}, "sample": {"rate": 0}}
    )
    run = make_run(entity, sampling="")
    with django_capture_on_commit_callbacks(execute=True):
        assert on_terminal(run) is None
    assert card_of(run) is None


def test_a_booking_made_by_a_persons_rating_asks_nobody(django_capture_on_commit_callbacks):
    entity = make_entity(metrics={"helpful": HELPFUL}, evaluation={"method": "none", "human": {"ask": "always"}})
    run = make_run(entity, sampling=Execution.Sampling.SKIPPED_RATE)
    with django_capture_on_commit_callbacks(execute=True):
        assert book_for_rating(run).reason == "rated"
    assert card_of(run) is None


def test_a_loop_replay_is_never_carded(carded):
    entity = asking("always")
    grade = booked(entity, loop_launched=True)
    assert carded(grade) is None
    assert decide(grade.execution) == (False, "a loop replay is never carded")


def test_an_entity_people_rate_nothing_on_is_never_carded(carded):
    entity = asking("always", metrics={})
    assert carded(booked(entity)) is None
    assert decide(booked(entity).execution) == (False, "no metric is rated by people")


def test_a_run_is_carded_once_however_often_it_is_asked(carded):
    grade = booked(asking("always"))
    first = carded(grade)
    assert carded(grade) == first
    assert post_card(grade.execution_id) == first, "the task run again opens nothing new"
    assert Card.objects.count() == 1


def test_a_card_whose_task_was_lost_is_opened_by_the_sweep_once(django_capture_on_commit_callbacks):
    grade = booked(asking("always"))
    with django_capture_on_commit_callbacks(execute=False):  # the process dies before the task is enqueued
        assert maybe_card(grade)
    assert card_of(grade.execution) is None
    assert open_missing_cards() == 1
    assert open_missing_cards() == 0
    assert card_of(grade.execution) is not None


def test_one_card_and_one_telegram_message_per_run(carded, telegram_on):
    grade = booked(asking("always"))
    card = carded(grade)
    carded(grade)
    post_card(grade.execution_id)
    assert send_pending() == 0, "the sender woken after the card opened sent it"
    assert Delivery.objects.filter(card=card).count() == 1
    assert len(telegram_on.calls_of("sendMessage")) == 1


def test_until_calibrated_cards_every_run_while_the_judge_is_not_calibrated(carded, alice):
    entity = asking("until-calibrated")
    calibrate(entity, alice, pairs=4)  # one short of minPairs
    grades = [booked(entity) for _ in range(5)]
    assert all(carded(grade) is not None for grade in grades)
    assert "not calibrated" in decide(grades[0].execution)[1]


def test_until_calibrated_then_cards_only_the_spot_check_share_by_the_run_id(carded, alice):
    entity = asking("until-calibrated")
    calibrate(entity, alice)
    runs = [make_run(entity) for _ in range(400)]
    decisions = {run.pk: decide(run)[0] for run in runs}
    assert decisions == {run.pk: spot_checked(run.pk, 0.1) for run in runs}
    # Random run ids: the share of 400 draws at 0.1 lies within five standard deviations (±0.075) but once in
    # millions of runs (±0.05 failed about once in ten thousand: 63 of 400 was seen).
    assert 0.025 <= sum(decisions.values()) / len(runs) <= 0.175
    assert {run.pk: decide(run)[0] for run in runs} == decisions, "the same run id decides the same"
    inside = next(run for run in runs if decisions[run.pk])
    outside = next(run for run in runs if not decisions[run.pk])
    assert carded(make_grade(inside, status=Grade.Status.BOOKED)) is not None
    assert carded(make_grade(outside, status=Grade.Status.BOOKED)) is None


@pytest.mark.parametrize("rate", [0.2, 0.05])
def test_the_spot_check_is_drawn_independently_of_the_sampler(alice, rate):
    """R4.19: of the runs the sampler grades, spotCheck's share is carded — not spotCheck / rate of them (0.5 at
    rate 0.2, every graded run at rate 0.05), which drawing both from the same hash of the id gave."""
    from grading.sampling import in_rate

    entity = asking("until-calibrated", spotCheck=0.1)
    calibrate(entity, alice)
    graded = [run for run in (make_run(entity) for _ in range(2500)) if in_rate(run.pk, rate)]
    assert len(graded) > 80
    share = sum(decide(run)[0] for run in graded) / len(graded)
    # The draw is a hash of each id, so the share over a suite's ids is binomial: 0.1 over ~125 runs lies in
    # (0, 0.3] but for odds under one in a million, far from the 0.5 and 1.0 the shared hash gave.
    assert 0 < share <= 0.3, share


def test_the_spot_check_share_is_the_entitys_own(alice):
    entity = asking("until-calibrated", spotCheck=0.5)
    calibrate(entity, alice)
    runs = [make_run(entity) for _ in range(200)]
    # Binomial over the ids a suite happens to give (0.375 was seen): 0.5 over 200 runs lies in 0.3–0.7 but for odds
    # under one in ten million, apart from the default share (0.1) and from every run (1.0).
    assert 0.3 <= sum(decide(run)[0] for run in runs) / len(runs) <= 0.7


def test_a_reported_metric_is_carded_every_time_under_until_calibrated(carded, alice):
    entity = asking("until-calibrated", metrics={"layout_fit": LAYOUT_FIT, "helpful": HELPFUL})
    calibrate(entity, alice)
    assert [c.status for c in calibration(entity)] == ["ok"]
    grades = [booked(entity) for _ in range(20)]
    assert all(carded(grade) is not None for grade in grades)


# --- What the card shows and offers (R4.23, R4.24) -----------------------------


def test_one_metric_on_five_steps_is_five_buttons_with_the_rubrics_words(carded):
    card = carded(booked(asking("always")))
    assert card.options == [
        {"value": "1", "label": "1 · Unusable", "metric_id": "layout_fit"},
        {"value": "2", "label": "2 · Poor", "metric_id": "layout_fit"},
        {"value": "3", "label": "3 · Acceptable", "metric_id": "layout_fit"},
        {"value": "4", "label": "4 · Good", "metric_id": "layout_fit"},
        {"value": "5", "label": "5 · Excellent", "metric_id": "layout_fit"},
    ]
    assert not card.is_form


def test_thumbs_are_two_buttons(carded):
    card = carded(booked(asking("always", metrics={"helpful": HELPFUL})))
    assert [o["label"] for o in card.options] == ["0 · 👎", "1 · 👍"]


def test_a_one_to_ten_metric_is_a_form(carded):
    card = carded(booked(asking("always", metrics={"clarity": CLARITY})))
    assert card.is_form
    assert card.options == [
        {
            "metric_id": "clarity",
            "label": "Clarity",
            "min": 1,
            "max": 10,
            "step": 1,
            "labels": {"1..3": "Muddled", "8..10": "Crisp"},
        }
    ]


def test_two_metrics_are_a_form_in_id_order_and_a_continuous_scale_takes_two_decimals(carded):
    card = carded(booked(asking("always", metrics={"layout_fit": LAYOUT_FIT, "score": SCORE100})))
    assert card.is_form
    assert [(o["metric_id"], o["min"], o["max"], o["step"]) for o in card.options] == [
        ("layout_fit", 1, 5, 1),
        ("score", 0, 100, 0.01),
    ]


def test_the_card_cuts_the_runs_summary_at_1500_characters_and_says_so(carded):
    text = "".join(chr(ord("a") + n % 26) for n in range(2000))
    card = carded(booked(asking("always"), output={"result": text, "tasks": {}}))
    assert text[:1500] + "\n… (cut at 1,500 characters)" in card.text
    assert text[:1501] not in card.text


def test_a_short_summary_is_whole_and_not_said_cut(carded):
    card = carded(booked(asking("always"), output={"result": "Three scenes, one per beat."}))
    assert "Three scenes, one per beat." in card.text
    assert "cut at" not in card.text


def test_the_card_links_the_whole_run_and_shows_each_criterion_and_rubric(carded, settings):
    settings.SINGULARITY_PUBLIC_URL = "https://singularity.example.org/"
    grade = booked(asking("always", metrics={"layout_fit": LAYOUT_FIT, "clarity": CLARITY}))
    card = carded(grade)
    # The permanent short link (R4.23), which answers with the run's page wherever that page lives.
    assert f"The whole run: https://singularity.example.org/evolution/go/run:{grade.execution_id}/" in card.text
    assert "Layout fit (1–5, step 1): The scenes follow the strategy" in card.text
    assert "  4 — Good" in card.text
    assert "Clarity (1–10, step 1): Reads clearly" in card.text and "  8..10 — Crisp" in card.text
    assert card.subject_url == f"/evolution/runs/{grade.execution_id}/"


def test_a_pipelines_output_is_its_summary(carded):
    entity = make_entity(
        "scores", kind="pipeline", metrics={"helpful": HELPFUL}, evaluation={"human": {"ask": "always"}}
    )
    card = carded(booked(entity, output={"scores": [3, 4]}))
    assert '"scores"' in card.text and "Pipeline run of" in card.text


def test_an_episode_card_carries_its_shape_never_the_dialogs_words(carded):
    entity = make_entity("helpdesk", kind="role", metrics={"helpful": HELPFUL}, evaluation={"human": {"ask": "always"}})
    dialog = [{"role": "user", "content": "My card was charged twice"}, {"role": "assistant", "content": "Refunded."}]
    card = carded(booked(entity, output={"turns": dialog}, duration_ms=95000))
    assert "2 turns, 95 s" in card.text
    assert "charged twice" not in card.text and "Refunded" not in card.text


def test_the_card_expires_after_expires_hours(carded):
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        card = carded(booked(asking("always", expiresHours=6)))
    assert card.expires_at == now + timedelta(hours=6)


# --- The answer (R4.25, R4.26) -------------------------------------------------


def answered(card: Card, capture, user: Any, **answer: Any):
    with capture(execute=True):
        return answer_card(card.pk, user=user, is_agent=False, via="dashboard", **answer)


def test_an_answer_in_the_inbox_lands_a_rating_through_the_door(carded, alice, django_capture_on_commit_callbacks):
    grade = booked(asking("always"))
    card = carded(grade)
    result = answered(card, django_capture_on_commit_callbacks, alice, choice="4", note="good pacing")
    assert result.ok, result.detail
    [rating] = Rating.objects.filter(execution=grade.execution)
    assert (rating.metric_id, rating.value, rating.normalized, rating.note, rating.user) == (
        "layout_fit", 4, 0.75, "good pacing", alice,
    )  # fmt: skip
    assert RatingSubmission.objects.get(user=alice).idempotency_key == f"card:{card.pk}"
    card.refresh_from_db()
    assert card.handler_error == "" and card.handled_at is not None
    grade.execution.refresh_from_db()
    assert grade.execution.awaiting_rating_until is None


def test_a_form_answered_on_the_inbox_page_rates_each_metric(carded, alice, client, django_capture_on_commit_callbacks):
    grade = booked(asking("always", metrics={"layout_fit": LAYOUT_FIT, "score": SCORE100}))
    card = carded(grade)
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/inbox/cards/{card.pk}/answer/",
            {"choice": "rate", "value_layout_fit": "2", "value_score": "62.5", "note": "thin"},
        )
    assert response.status_code == 302
    ratings = dict(Rating.objects.filter(execution=grade.execution).values_list("metric_id", "value"))
    assert ratings == {"layout_fit": 2, "score": 62.5}
    assert set(Rating.objects.values_list("note", flat=True)) == {"thin"}


def test_an_agent_answering_is_refused_and_nothing_is_written(carded, alice):
    grade = booked(asking("always"))
    card = carded(grade)
    result = answer_card(card.pk, user=alice, is_agent=True, choice="4", via="api")
    assert (result.ok, result.code) == (False, "unauthorized_responder")
    card.refresh_from_db()
    assert card.status == Card.Status.PENDING
    assert not Rating.objects.exists() and not RatingSubmission.objects.exists()
    assert observed(Execution.objects.filter(pk=grade.execution_id)).count() == 0, "still waiting"


def test_a_double_tap_writes_one_rating(carded, alice, bob, django_capture_on_commit_callbacks):
    grade = booked(asking("always"))
    card = carded(grade)
    assert answered(card, django_capture_on_commit_callbacks, alice, choice="4").ok
    again = answered(card, django_capture_on_commit_callbacks, bob, choice="2")
    assert (again.ok, again.code) == (False, "already_closed")
    Card.objects.filter(pk=card.pk).update(handled_at=None)
    assert run_handler(card.pk), "the handler called twice (a retry) writes nothing more"
    assert Rating.objects.count() == 1 and RatingSubmission.objects.count() == 1


def test_a_refused_rating_is_kept_on_the_card_and_writes_nothing(carded, alice, django_capture_on_commit_callbacks):
    grade = booked(asking("always"))
    card = carded(grade)
    entity = grade.entity
    entity.terms["evaluation"]["metrics"]["layout_fit"]["scale"] = {"min": 1, "max": 3, "step": 1, "labels": None}
    entity.save()  # the brain rescaled the metric while the card waited
    assert answered(card, django_capture_on_commit_callbacks, alice, choice="5").ok
    card.refresh_from_db()
    assert card.handler_error.startswith(RatingRefused.__name__)
    assert "invalid" in card.handler_error and "off the scale 1..3" in card.handler_error
    assert not Rating.objects.exists()
    grade.execution.refresh_from_db()
    assert grade.execution.awaiting_rating_until == card.expires_at, "not rated: it waits out its deadline"


def test_an_unanswered_card_expires_after_48_hours_and_writes_nothing(carded, django_capture_on_commit_callbacks):
    grade = booked(asking("always"))
    grade.metrics = {"layout_fit": 0.5}
    grade.save()
    card = carded(grade)
    with time_machine.travel(timezone.now() + timedelta(hours=47, minutes=59)):
        assert expire_due_cards() == 0
    later = timezone.now() + timedelta(hours=48, seconds=1)
    with time_machine.travel(later), django_capture_on_commit_callbacks(execute=True):
        assert expire_due_cards() == 1
    card.refresh_from_db()
    assert card.status == Card.Status.EXPIRED and card.handler_error == "" and card.handled_at is not None
    assert not Rating.objects.exists() and not RatingSubmission.objects.exists()
    grade.refresh_from_db()
    assert grade.metrics == {"layout_fit": 0.5}, "the judge's number stands"
    grade.execution.refresh_from_db()
    assert grade.execution.awaiting_rating_until is None


# --- Waiting: no observed window holds a carded run (R4.16) --------------------


def test_a_waiting_run_is_in_no_observed_window_until_rated(carded, alice, django_capture_on_commit_callbacks):
    entity = asking("always")
    quiet, carded_grade = booked(entity), booked(entity)
    card = carded(carded_grade)
    runs = Execution.objects.filter(entity=entity)
    assert set(observed(runs)) == {quiet.execution}
    assert set(observed(Grade.objects.filter(entity=entity))) == {quiet}
    answered(card, django_capture_on_commit_callbacks, alice, choice="3")
    assert set(observed(runs)) == {quiet.execution, carded_grade.execution}


def test_a_waiting_run_enters_the_windows_at_its_deadline_even_before_the_sweep(carded):
    grade = booked(asking("always"))
    card = carded(grade)
    runs = Execution.objects.filter(pk=grade.execution_id)
    assert not observed(runs).exists()
    with time_machine.travel(card.expires_at + timedelta(seconds=1)):
        assert observed(runs).count() == 1
        assert Card.objects.get(pk=card.pk).status == Card.Status.PENDING  # the sweep has not run: one clock


def test_a_rating_given_on_the_dashboard_ends_the_wait_too(carded, alice):
    from grading.ratings import rate

    grade = booked(asking("always"))
    carded(grade)
    answer = rate(
        actor_user=alice,
        is_agent=False,
        run_kind="workflow",
        run_id=str(grade.execution_id),
        idempotency_key=str(uuid.uuid4()),
        ratings=[{"metric_id": "layout_fit", "value": 4}],
    )
    assert answer.ok, answer.detail
    assert observed(Execution.objects.filter(pk=grade.execution_id)).count() == 1


def test_the_run_page_says_it_waits_for_a_rating(carded, alice, client):
    grade = booked(asking("always"))
    card = carded(grade)
    client.force_login(alice)
    page = client.get(f"/evolution/runs/{grade.execution_id}/").content.decode()
    assert "Waiting for a rating until" in page and card.get_absolute_url() in page


# --- Telegram (R4.24) ------------------------------------------------------------


def test_a_telegram_reply_4_good_pacing_rates_4_with_the_note(
    carded, telegram_on, alice, django_capture_on_commit_callbacks
):
    TelegramUser.objects.create(telegram_user_id=ALICE_TG, user=alice)
    grade = booked(asking("always"))
    card = carded(grade)
    message_id = Delivery.objects.get(card=card).message_id
    with django_capture_on_commit_callbacks(execute=True):
        handle_update(telegram_on.reply(message_id, "4 good pacing", user_id=ALICE_TG))
    [rating] = Rating.objects.filter(execution=grade.execution)
    assert (rating.value, rating.note, rating.user) == (4, "good pacing", alice)
    card.refresh_from_db()
    assert (card.answered_via, card.handler_error) == ("telegram", "")


def test_the_handler_is_registered_for_grading_rating_cards():
    from grading.ratings import on_rating_card

    assert registry.handler_for("grading", "rating") is on_rating_card


def test_the_sweep_of_lost_card_openings_is_on_the_beat(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["grading-open-missing-rating-cards"]
    assert entry["task"] == "grading.tasks.cards.open_missing_rating_cards"
    assert 0 < entry["options"]["expires"] <= entry["schedule"]


def test_the_short_link_of_a_run_leads_to_its_page_and_an_unknown_one_is_not_found(client, alice):
    import uuid

    run = make_run(make_entity("digest"))
    client.force_login(alice)
    answer = client.get(f"/evolution/go/run:{run.pk}/")
    assert answer.status_code == 302 and answer["Location"] == f"/evolution/runs/{run.pk}/"
    assert client.get(f"/evolution/go/run:{uuid.uuid4()}/").status_code == 404
    assert client.get("/evolution/go/run:not-a-run/").status_code == 404
