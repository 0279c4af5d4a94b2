"""The one door for people's ratings: refusals, idempotency, replacement, median, booking an unsampled run."""

from __future__ import annotations

import importlib.util
import uuid
from decimal import Decimal

import pytest

from grading.models import Execution, Grade, Rating, RatingSubmission
from grading.ratings import people_value, rate
from tests.grading.rating_helpers import HELPFUL, LAYOUT_FIT, RELEVANCE, SCORE100, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db

needs_booking = pytest.mark.skipif(
    importlib.util.find_spec("grading.booking") is None, reason="grading.booking (engineer C) not written yet"
)


def rate_as(user, run: Execution, *ratings: dict, key: str = "k1", agent: bool = False):
    return rate(
        actor_user=user,
        is_agent=agent,
        run_kind=run.run_kind,
        run_id=str(run.id),
        idempotency_key=key,
        ratings=list(ratings),
    )


@pytest.fixture
def graded_run() -> Execution:
    run = make_run(make_entity())
    make_grade(run, metrics={"layout_fit": 0.75, "quality": 0.8})
    return run


def test_a_person_rates_a_judged_human_metric_on_its_own_scale(alice, graded_run) -> None:
    answer = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4, "note": "good pacing"})
    assert (answer.ok, answer.code, answer.written) == (True, "ok", 1)
    rating = Rating.objects.get()
    assert rating.value == Decimal(4)
    assert rating.normalized == 0.75  # 4 of 1–5 → (4-1)/(5-1)
    assert rating.note == "good pacing"
    assert rating.user == alice


def test_a_reported_metric_takes_its_declared_scale(alice, graded_run) -> None:
    assert rate_as(alice, graded_run, {"metric_id": "helpful", "value": 1}).ok
    assert Rating.objects.get().normalized == 1.0


def test_a_continuous_scale_takes_any_value_inside_it(alice) -> None:
    run = make_run(make_entity(metrics={"overall": SCORE100}))
    make_grade(run)
    assert rate_as(alice, run, {"metric_id": "overall", "value": "62.5"}).ok
    assert Rating.objects.get().normalized == 0.625


def test_a_retry_with_the_same_key_writes_nothing_and_answers_the_same(alice, graded_run) -> None:
    first = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4}, key="tap-1")
    again = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 2}, key="tap-1")
    assert again == first
    assert Rating.objects.get().value == Decimal(4)
    assert RatingSubmission.objects.count() == 1


def test_the_same_key_from_another_person_is_their_own_request(alice, bob, graded_run) -> None:
    rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4}, key="tap-1")
    assert rate_as(bob, graded_run, {"metric_id": "layout_fit", "value": 2}, key="tap-1").written == 1
    assert Rating.objects.count() == 2


def test_a_person_who_rates_again_replaces_their_own_rating(alice, graded_run) -> None:
    rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 2}, key="a")
    rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4, "note": "on reflection"}, key="b")
    rating = Rating.objects.get()
    assert (rating.value, rating.note) == (Decimal(4), "on reflection")
    assert people_value(graded_run, "layout_fit") == 0.75


def test_several_people_are_read_by_their_median(alice, bob, charlie) -> None:
    run = make_run(make_entity(metrics={"overall": SCORE100}))
    make_grade(run)
    for person, value in ((alice, 20), (bob, 60), (charlie, 100)):
        assert rate_as(person, run, {"metric_id": "overall", "value": value}).ok
    assert people_value(run, "overall") == pytest.approx(0.6)


def test_nobody_rated_is_no_value_never_a_zero(graded_run) -> None:
    assert people_value(graded_run, "helpful") is None


# --- refusals: nothing is written by any of them ---------------------------------------------


def refused(answer, code: str, *words: str) -> bool:
    assert (answer.ok, answer.code, answer.written) == (False, code, 0), answer
    for word in words:
        assert word in answer.detail, answer.detail
    assert not Rating.objects.exists() and not RatingSubmission.objects.exists()
    return True


def test_an_agent_is_refused_because_only_a_person_rates(alice, graded_run) -> None:
    answer = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4}, agent=True)
    assert refused(answer, "refused", "unauthorized_responder: only a person rates")


def test_an_unknown_run_is_not_found(alice) -> None:
    answer = rate(
        actor_user=alice,
        is_agent=False,
        run_kind="workflow",
        run_id=str(uuid.uuid4()),
        idempotency_key="k",
        ratings=[{"metric_id": "layout_fit", "value": 4}],
    )
    assert refused(answer, "not_found", "not found")


def test_a_run_id_of_another_kind_or_not_an_id_is_not_found(alice, graded_run) -> None:
    wrong_kind = rate(actor_user=alice, is_agent=False, run_kind="heartbeat", run_id=str(graded_run.id),
                      idempotency_key="k", ratings=[{"metric_id": "layout_fit", "value": 4}])  # fmt: skip
    assert refused(wrong_kind, "not_found")
    garbage = rate(actor_user=alice, is_agent=False, run_kind="workflow", run_id="nope",
                   idempotency_key="k", ratings=[{"metric_id": "layout_fit", "value": 4}])  # fmt: skip
    assert refused(garbage, "not_found")


def test_a_running_run_is_a_precondition(alice) -> None:
    run = make_run(make_entity(), status=Execution.Status.RUNNING)
    assert refused(rate_as(alice, run, {"metric_id": "layout_fit", "value": 4}), "precondition", "still running")


def test_an_entity_whose_grading_is_off_is_a_precondition(alice) -> None:
    run = make_run(make_entity(enabled=False), sampling=Execution.Sampling.OFF)
    answer = rate_as(alice, run, {"metric_id": "layout_fit", "value": 4})
    assert refused(answer, "precondition", "evaluation.enabled: false", "scenario:digest")
    assert not Grade.objects.exists()


def test_a_loop_replay_is_refused(alice) -> None:
    run = make_run(make_entity(), loop_launched=True, sampling=Execution.Sampling.LOOP_LAUNCHED)
    assert refused(rate_as(alice, run, {"metric_id": "layout_fit", "value": 4}), "refused", "replay")


@pytest.mark.parametrize(
    ("rating", "words"),
    [
        ({"metric_id": "layout_fit", "value": 7}, ["off the scale", "layout_fit"]),
        ({"metric_id": "layout_fit", "value": 0}, ["off the scale"]),
        ({"metric_id": "layout_fit", "value": 2.5}, ["between the steps"]),
        ({"metric_id": "helpful", "value": 0.5}, ["between the steps", "helpful"]),
        ({"metric_id": "layout_fit", "value": "four"}, ["not a number"]),
        ({"metric_id": "layout_fit", "value": True}, ["not a number"]),
        ({"metric_id": "layout_fit", "value": None}, ["not a number"]),
        ({"metric_id": "layout_fit", "value": "NaN"}, ["not a number"]),
        ({"metric_id": "nope", "value": 3}, ["no metric 'nope'"]),
        ({"metric_id": "relevance", "value": 3}, ["not rated by people"]),
        ({"metric_id": "quality", "value": 3}, ["not rated by people"]),
        ({"metric_id": "cost_usd", "value": 3}, ["not rated by people"]),
        ({"value": 3}, ["metricId: required"]),
        ({"metric_id": "layout_fit", "value": 3, "note": "x" * 4001}, ["note"]),
    ],
)
def test_an_invalid_rating_is_refused_naming_the_field(alice, rating, words) -> None:
    run = make_run(make_entity(metrics={"layout_fit": LAYOUT_FIT, "helpful": HELPFUL, "relevance": RELEVANCE}))
    make_grade(run)
    assert refused(rate_as(alice, run, rating), "invalid", *words)


def test_one_bad_rating_refuses_the_whole_request(alice, graded_run) -> None:
    answer = rate_as(alice, graded_run, {"metric_id": "helpful", "value": 1}, {"metric_id": "layout_fit", "value": 9})
    assert refused(answer, "invalid", "layout_fit")


def test_a_metric_rated_twice_in_one_request_is_invalid(alice, graded_run) -> None:
    answer = rate_as(alice, graded_run, {"metric_id": "helpful", "value": 1}, {"metric_id": "helpful", "value": 0})
    assert refused(answer, "invalid", "twice")


def test_no_ratings_or_no_key_is_invalid(alice, graded_run) -> None:
    assert refused(rate_as(alice, graded_run), "invalid", "ratings")
    answer = rate_as(alice, graded_run, {"metric_id": "helpful", "value": 1}, key="  ")
    assert refused(answer, "invalid", "idempotencyKey")


def test_a_rating_changes_a_metric_never_the_judges_verdict(alice, graded_run) -> None:
    assert rate_as(alice, graded_run, {"metric_id": "helpful", "value": 0}).ok
    grade = Grade.objects.get()
    assert grade.passed is True
    assert grade.metrics == {"layout_fit": 0.75, "quality": 0.8}


# --- a run the sampler passed by ----------------------------------------------------------------


@needs_booking
def test_rating_a_run_the_sampler_skipped_books_its_grading_once(alice, bob) -> None:
    run = make_run(make_entity(), sampling=Execution.Sampling.SKIPPED_RATE)
    assert rate_as(alice, run, {"metric_id": "layout_fit", "value": 4}).ok
    assert Grade.objects.filter(execution=run).count() == 1
    booked = Grade.objects.get(execution=run)
    assert rate_as(bob, run, {"metric_id": "layout_fit", "value": 2}).ok
    assert rate_as(alice, run, {"metric_id": "helpful", "value": 1}, key="k2").ok
    assert list(Grade.objects.filter(execution=run)) == [booked]
    assert Rating.objects.filter(execution=run).count() == 3


@needs_booking
def test_a_refused_rating_books_nothing(alice) -> None:
    run = make_run(make_entity(), sampling=Execution.Sampling.SKIPPED_RATE)
    assert refused(rate_as(alice, run, {"metric_id": "layout_fit", "value": 7}), "invalid")
    assert refused(rate_as(alice, run, {"metric_id": "layout_fit", "value": 4}, agent=True), "refused")
    assert not Grade.objects.exists()


@needs_booking
def test_a_rated_run_that_already_has_a_grade_books_nothing(alice, graded_run) -> None:
    before = Grade.objects.get()
    assert rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4}).ok
    assert list(Grade.objects.all()) == [before]


def test_a_user_who_is_not_signed_in_is_refused(graded_run) -> None:
    from django.contrib.auth.models import AnonymousUser

    assert refused(rate_as(AnonymousUser(), graded_run, {"metric_id": "helpful", "value": 1}), "refused")


def test_a_note_holding_a_nul_is_refused_naming_it_and_nothing_is_written(alice, graded_run) -> None:
    # Whatever door it came through: PostgreSQL cannot hold U+0000, and a person's note is theirs to retype.
    answer = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4, "note": "good\x00pacing"})
    assert (answer.ok, answer.code, answer.detail) == (False, "invalid", "ratings[0].note: contains a NUL character")
    assert not Rating.objects.exists() and not RatingSubmission.objects.exists()


def test_an_idempotency_key_holding_a_nul_is_refused_naming_it(alice, graded_run) -> None:
    answer = rate_as(alice, graded_run, {"metric_id": "layout_fit", "value": 4}, key="tap\x00-1")
    assert (answer.ok, answer.code, answer.detail) == (False, "invalid", "idempotencyKey: contains a NUL character")
    assert not Rating.objects.exists()
