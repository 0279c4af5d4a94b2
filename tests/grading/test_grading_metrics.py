"""Reading grades: tolerance bands, aggregates, people's ratings over the judge, and what makes a run bad."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from grading.metrics import aggregate, is_bad, past_tolerance, run_value, tolerance_band
from grading.models import Grade, Rating
from tests.grading.grading_helpers import make_entity, make_run

JUDGE = {"model": "m", "method": "default", "method_hash": "h", "loop_hash": "", "role_hash": "r"}


def terms_of(**evaluation):
    """Resolved terms (through the real resolver) without saving an entity."""
    from singularity.brain.terms import resolve_terms

    frontmatter = {"evaluation": {"enabled": True, **evaluation}}
    return resolve_terms("pipeline", {}, frontmatter, entity_label="features/x/x.scenario.md")[0]


# --- Tolerance bands ----------------------------------------------------------


def test_a_metric_naming_an_absolute_tolerance_owns_both_axes():
    terms = terms_of(metrics={"cost_usd": {"tolerance": 0.01}})
    assert tolerance_band("cost_usd", terms, "1.00") == Decimal("0.01")
    # A cent, not a cent-or-10%-whichever-is-kinder.
    assert past_tolerance("cost_usd", terms, "1.00", "1.02") is True
    assert past_tolerance("cost_usd", terms, "1.00", "1.01") is False  # exactly on the band, exactly
    assert past_tolerance("cost_usd", terms, "1.00", "0.50") is False  # cheaper is better, not worse


def test_a_computed_metric_without_its_own_band_moves_by_ten_percent():
    terms = terms_of()
    assert tolerance_band("duration_ms", terms, 1000) == Decimal("100.0")
    assert past_tolerance("duration_ms", terms, 1000, 1100) is False
    assert past_tolerance("duration_ms", terms, 1000, 1101) is True


def test_a_judged_metric_without_its_own_band_moves_by_five_hundredths():
    terms = terms_of()
    assert past_tolerance("quality", terms, 0.80, 0.76) is False
    assert past_tolerance("quality", terms, 0.80, 0.74) is True


def test_both_axes_named_take_the_more_forgiving():
    terms = terms_of(metrics={"cost_usd": {"tolerance": 0.01, "tolerancePct": 0.05}})
    assert tolerance_band("cost_usd", terms, "1.00") == Decimal("0.05")
    assert tolerance_band("cost_usd", terms, "0.10") == Decimal("0.01")


def test_judged_zero_restores_exact_comparison():
    terms = terms_of(metricTolerance={"judged": 0})
    assert tolerance_band("quality", terms, 0.8) == 0
    assert past_tolerance("quality", terms, 0.8, 0.79) is True


# --- Aggregates -------------------------------------------------------------


def test_mean_and_median_read_a_share_differently():
    assert aggregate([0, 0, 1], "median") == 0
    assert aggregate([0, 0, 1], "mean") == pytest.approx(1 / 3)


def test_money_aggregates_exactly_and_absent_values_are_skipped():
    assert aggregate(["0.10", "0.20", None], "mean") == Decimal("0.15")
    assert aggregate(["0.1", "0.2", "0.4"]) == Decimal("0.2")
    assert aggregate([None, None]) is None


# --- Reading a graded run ---------------------------------------------------

FIT = {
    "kind": "judged",
    "human": True,
    "direction": "max",
    "role": "guard",
    "target": 0.5,
    "criterion": "Follows the strategy",
}


def graded(entity, **fields) -> Grade:
    run = make_run(entity)
    defaults = {"status": Grade.Status.GRADED, "score": 0.9, "passed": True, "judge": JUDGE, "metrics": {}}
    return Grade.objects.create(
        execution=run, entity=entity, day=run.completed_at.date(), due_at=run.completed_at, **{**defaults, **fields}
    )


def rate(grade: Grade, metric_id: str, normalized: float, who: str) -> None:
    user = User.objects.create_user(who)
    Rating.objects.create(
        execution=grade.execution, metric_id=metric_id, user=user, value=Decimal(1), normalized=normalized
    )


@pytest.mark.django_db
def test_a_person_rating_stands_over_the_judge():
    entity = make_entity(evaluation={"metrics": {"layout_fit": FIT}})
    grade = graded(entity, metrics={"layout_fit": 0.8})
    assert run_value(grade, "layout_fit") == 0.8
    rate(grade, "layout_fit", 0.2, "alice")
    assert run_value(grade, "layout_fit") == 0.2
    assert run_value(grade, "layout_fit", ratings={"layout_fit": 0.4}) == 0.4
    assert run_value(grade, "layout_fit", ratings={}) == 0.8


@pytest.mark.django_db
def test_several_people_are_read_by_their_median():
    entity = make_entity(evaluation={"metrics": {"layout_fit": FIT}})
    grade = graded(entity, metrics={"layout_fit": 0.8})
    for who, value in (("alice", 0.0), ("bob", 0.25), ("charlie", 1.0)):
        rate(grade, "layout_fit", value, who)
    assert run_value(grade, "layout_fit") == 0.25


@pytest.mark.django_db
def test_a_judge_only_metric_ignores_ratings():
    spec = {**FIT, "human": False}
    entity = make_entity(evaluation={"metrics": {"layout_fit": spec}})
    grade = graded(entity, metrics={"layout_fit": 0.8})
    assert run_value(grade, "layout_fit", ratings={"layout_fit": 0.1}) == 0.8


@pytest.mark.django_db
def test_a_reported_metric_nobody_rated_has_no_value():
    helpful = {
        "kind": "reported",
        "direction": "max",
        "role": "objective",
        "criterion": "Solved it",
        "scale": {"min": 0, "max": 1, "step": 1},
    }
    entity = make_entity(evaluation={"metrics": {"helpful": helpful}})
    assert run_value(graded(entity), "helpful") is None


@pytest.mark.django_db
def test_a_score_below_the_threshold_is_bad_and_above_it_is_not():
    entity = make_entity(loop={"threshold": 0.8})
    assert is_bad(graded(entity, score=0.7), entity.terms) is True
    assert is_bad(graded(entity, score=0.85), entity.terms) is False


@pytest.mark.django_db
def test_with_no_threshold_every_judged_run_is_bad():
    entity = make_entity()
    assert entity.terms["loop"]["threshold"] is None
    assert is_bad(graded(entity, score=1.0), entity.terms) is True


@pytest.mark.django_db
def test_a_failed_evaluation_is_bad_whatever_its_score():
    entity = make_entity(loop={"threshold": 0.5})
    assert is_bad(graded(entity, score=0.9, passed=False), entity.terms) is True


@pytest.mark.django_db
def test_a_run_the_judge_passed_and_a_person_rated_under_the_target_is_bad():
    entity = make_entity(evaluation={"metrics": {"layout_fit": FIT}}, loop={"threshold": 0.5})
    grade = graded(entity, score=0.9, metrics={"layout_fit": 0.75})
    assert is_bad(grade, entity.terms) is False
    rate(grade, "layout_fit", 0.25, "alice")
    assert is_bad(grade, entity.terms) is True
    grade.refresh_from_db()
    assert grade.passed is True  # a rating changes a metric, never the judge's verdict


@pytest.mark.django_db
def test_a_missed_target_is_read_in_the_metric_direction():
    entity = make_entity(
        evaluation={"metrics": {"cost_usd": {"role": "guard", "target": 0.25}}}, loop={"threshold": 0.5}
    )
    assert is_bad(graded(entity, metrics={"cost_usd": "0.30"}), entity.terms) is True
    assert is_bad(graded(entity, metrics={"cost_usd": "0.20"}), entity.terms) is False


@pytest.mark.django_db
def test_an_ungraded_run_is_never_bad():
    entity = make_entity(loop={"threshold": 0.9})
    grade = graded(entity, status=Grade.Status.FAILED, score=None, passed=None, error="judge: no structured output")
    assert is_bad(grade, entity.terms) is False
