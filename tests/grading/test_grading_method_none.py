"""method: none — graded by measurements alone: no model, passed by floors, bad by failure or a missed target."""

from __future__ import annotations

import pytest

from grading.booking import on_terminal
from grading.grade import grade_now
from grading.metrics import is_bad
from grading.models import Grade
from tests.grading.grading_helpers import make_entity, make_run

pytestmark = pytest.mark.django_db


def graded(entity, **run_fields) -> Grade:
    return grade_now(on_terminal(make_run(entity, **run_fields)))


def cost_entity(**cost_usd):
    return make_entity(
        kind="pipeline", evaluation={"method": "none", "metrics": {"cost_usd": {"role": "objective", **cost_usd}}}
    )


def test_no_model_is_called_and_the_vector_is_the_computed_catalog(fake_gateway, settings):
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    grade = graded(cost_entity(floor=1), cost_usd="0.25", duration_ms=900, tool_failures=2)
    assert fake_gateway.requests == []
    assert grade.status == Grade.Status.GRADED
    assert grade.metrics == {"cost_usd": "0.25", "duration_ms": 900, "tool_failures": 2}
    assert grade.score is None  # no score, and quality is absent
    assert grade.cost_usd == 0


def test_a_run_below_an_objective_floor_fails(settings):
    grade = graded(cost_entity(floor=0.20), cost_usd="0.25")
    assert grade.passed is False
    assert grade.failure_category == "below floor: cost_usd"
    assert grade.criteria[0]["passed"] is False and "cost_usd" in grade.criteria[0]["criterion"]


def test_a_run_on_its_floors_passes():
    assert graded(cost_entity(floor=0.25), cost_usd="0.25").passed is True


def test_a_missed_target_never_fails_the_run_but_makes_it_bad():
    entity = cost_entity(target=0.10)
    grade = graded(entity, cost_usd="0.25")
    assert grade.passed is True
    assert is_bad(grade, entity.terms) is True


def test_a_run_that_met_its_target_and_floors_is_not_bad_whatever_threshold_says():
    entity = make_entity(
        kind="pipeline",
        evaluation={"method": "none", "metrics": {"cost_usd": {"role": "objective", "target": 0.30, "floor": 1}}},
    )
    grade = graded(entity, cost_usd="0.25")
    assert grade.passed is True
    assert is_bad(grade, entity.terms) is False
    # A repair threshold is a bar on the judge's score: under method none it reads nothing.
    terms = {**entity.terms, "loop": {**entity.terms["loop"], "threshold": 0.9}}
    assert is_bad(grade, terms) is False


def test_a_failed_run_is_bad():
    entity = cost_entity(floor=0.10)
    assert is_bad(graded(entity, cost_usd="0.25"), entity.terms) is True


def test_a_floor_on_an_observe_metric_does_nothing():
    entity = make_entity(
        kind="pipeline",
        evaluation={
            "method": "none",
            "metrics": {
                "cost_usd": {"role": "objective", "floor": 1},
                "tool_failures": {"role": "observe", "floor": 0},
            },
        },
    )
    grade = graded(entity, tool_failures=3)
    assert grade.passed is True


def test_the_pin_says_none_for_model_method_and_role_and_keeps_the_loop_hash():
    grade = graded(cost_entity(floor=1))
    assert grade.judge == {
        "model": "none",
        "method": "none",
        "method_hash": "none",
        "loop_hash": "",
        "role_hash": "none",
    }
