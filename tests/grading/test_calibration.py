"""Calibration: the judge against people per judged human:true metric, under the current judge only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from grading.calibration import MetricCalibration, calibration
from grading.models import Entity, Rating
from grading.ratings import scale_of
from singularity.brain.defaults import DEFAULT_HUMAN_SCALE
from tests.grading.rating_helpers import HELPFUL, JUDGE, LAYOUT_FIT, RELEVANCE, make_entity, make_grade, make_run

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(days=10)


def paired_run(entity: Entity, person: User, n: int, judge_value: float, people_value: float, **judge_changes):
    """A graded run ``n`` hours after START with the judge's and one person's value on layout_fit (0..1)."""
    run = make_run(entity, completed_at=START + timedelta(hours=n))
    make_grade(run, metrics={"layout_fit": judge_value}, judge={**JUDGE, **judge_changes})
    Rating.objects.create(
        execution=run, metric_id="layout_fit", user=person, value=1 + 4 * people_value, normalized=people_value
    )
    return run


def only(entity: Entity) -> MetricCalibration:
    (answer,) = calibration(entity)
    assert answer.metric_id == "layout_fit"
    return answer


def test_nine_of_ten_agreeing_pairs_is_ok(alice) -> None:
    entity = make_entity()
    for n in range(9):
        paired_run(entity, alice, n, 0.75, 0.5)  # 0.25 apart: agrees at the edge of the tolerance
    paired_run(entity, alice, 9, 1.0, 0.5)
    answer = only(entity)
    assert (answer.status, answer.pairs, answer.agreement) == ("ok", 10, 0.9)
    assert answer.as_dict() == {"metricId": "layout_fit", "status": "ok", "pairs": 10, "agreement": 0.9}


def test_too_few_agreeing_is_low(alice) -> None:
    entity = make_entity()
    for n in range(7):
        paired_run(entity, alice, n, 0.75, 0.75)
    for n in range(7, 10):
        paired_run(entity, alice, n, 0.0, 1.0)
    answer = only(entity)
    assert (answer.status, answer.pairs, answer.agreement) == ("low", 10, 0.7)
    assert "7 of 10 pairs agree" in answer.reason


def test_too_few_pairs_is_low_and_says_so_even_when_all_agree(alice) -> None:
    entity = make_entity()
    for n in range(4):
        paired_run(entity, alice, n, 0.5, 0.5)
    answer = only(entity)
    assert (answer.status, answer.pairs, answer.agreement) == ("low", 4, 1.0)
    assert "4 of 5 pairs" in answer.reason


def test_min_pairs_and_tolerance_and_threshold_come_from_the_terms(alice) -> None:
    agreement = {"minPairs": 2, "tolerance": 0.1, "threshold": 0.5, "maxPairs": 20}
    entity = make_entity(evaluation={"human": {"agreement": agreement}})
    paired_run(entity, alice, 0, 0.5, 0.55)
    paired_run(entity, alice, 1, 0.75, 0.5)  # 0.25 apart: outside 0.1
    assert (only(entity).status, only(entity).agreement) == ("ok", 0.5)


def test_only_the_newest_max_pairs_count(alice) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 5, "maxPairs": 5}}})
    for n in range(5):
        paired_run(entity, alice, n, 0.0, 1.0)  # old disagreement, pushed out of the window
    for n in range(5, 10):
        paired_run(entity, alice, n, 0.5, 0.5)
    assert (only(entity).status, only(entity).pairs, only(entity).agreement) == ("ok", 5, 1.0)


def test_a_drifting_judge_falls_back_to_low(alice) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 5, "maxPairs": 5}}})
    for n in range(5):
        paired_run(entity, alice, n, 0.5, 0.5)
    assert only(entity).status == "ok"
    for n in range(5, 7):
        paired_run(entity, alice, n, 1.0, 0.0)
    assert (only(entity).status, only(entity).agreement) == ("low", 0.6)


def test_people_are_read_by_their_median(alice, bob, charlie) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 1}}})
    run = paired_run(entity, alice, 0, 0.5, 0.0)
    for person, value in ((bob, 0.5), (charlie, 1.0)):
        Rating.objects.create(execution=run, metric_id="layout_fit", user=person, value=3, normalized=value)
    assert only(entity).agreement == 1.0  # median 0.5 agrees; alice's 0.0 alone would not


def test_a_new_judge_model_starts_the_pairs_over(alice) -> None:
    entity = make_entity()
    for n in range(6):
        paired_run(entity, alice, n, 0.5, 0.5)
    assert only(entity).status == "ok"
    paired_run(entity, alice, 6, 0.5, 0.5, model="anthropic:claude-opus-5")
    answer = only(entity)
    assert (answer.status, answer.pairs) == ("low", 1)
    assert "1 of 5 pairs" in answer.reason


@pytest.mark.parametrize("change", [{"method": "strict"}, {"method_hash": "m2"}, {"role_hash": "r2"}])
def test_a_new_method_or_evaluator_role_starts_the_pairs_over(alice, change) -> None:
    entity = make_entity()
    for n in range(6):
        paired_run(entity, alice, n, 0.5, 0.5)
    paired_run(entity, alice, 6, 0.5, 0.5, **change)
    assert (only(entity).status, only(entity).pairs) == ("low", 1)


def test_editing_the_loop_module_keeps_calibration(alice) -> None:
    entity = make_entity()
    for n in range(5):
        paired_run(entity, alice, n, 0.5, 0.5)
    paired_run(entity, alice, 5, 0.5, 0.5, loop_hash="l2")
    assert (only(entity).status, only(entity).pairs) == ("ok", 6)


def test_a_judge_that_states_no_role_hash_matches_only_another_such(alice) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 1}}})
    paired_run(entity, alice, 0, 0.5, 0.5)
    legacy = {key: value for key, value in JUDGE.items() if key != "role_hash"}
    run = make_run(entity, completed_at=START + timedelta(hours=1))
    make_grade(run, metrics={"layout_fit": 0.5}, judge=legacy)
    Rating.objects.create(execution=run, metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    assert only(entity).pairs == 1


def test_runs_without_both_numbers_and_loop_replays_are_not_pairs(alice) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 1}}})
    paired_run(entity, alice, 0, 0.5, 0.5)
    unrated = make_run(entity, completed_at=START + timedelta(hours=1))
    make_grade(unrated, metrics={"layout_fit": 0.5})
    ungraded = make_run(entity, completed_at=START + timedelta(hours=2))
    Rating.objects.create(execution=ungraded, metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    replay = paired_run(entity, alice, 3, 0.0, 1.0)
    type(replay).objects.filter(pk=replay.pk).update(loop_launched=True)
    answer = only(entity)
    assert (answer.pairs, answer.agreement) == (1, 1.0)


def test_no_grades_yet_is_low_with_no_pairs() -> None:
    answer = only(make_entity())
    assert (answer.status, answer.pairs, answer.agreement) == ("low", 0, None)
    assert "0 of 5 pairs" in answer.reason


def test_nothing_to_calibrate_is_an_empty_list() -> None:
    assert calibration(make_entity(metrics={"helpful": HELPFUL, "relevance": RELEVANCE})) == []


def test_each_judged_human_metric_is_calibrated_on_its_own(alice) -> None:
    entity = make_entity(metrics={"layout_fit": LAYOUT_FIT, "pacing": LAYOUT_FIT, "helpful": HELPFUL})
    paired_run(entity, alice, 0, 0.5, 0.5)
    assert [(c.metric_id, c.pairs) for c in calibration(entity)] == [("layout_fit", 1), ("pacing", 0)]


def test_it_reads_a_bounded_number_of_queries(alice, django_assert_max_num_queries) -> None:
    entity = make_entity()
    for n in range(15):
        paired_run(entity, alice, n, 0.5, 0.5)
    with django_assert_max_num_queries(3):
        calibration(entity)


def test_resolved_terms_without_a_human_block_calibrate_on_the_engine_defaults(alice) -> None:
    from singularity.brain.terms import resolve_terms

    frontmatter = {
        "name": "Storyboard",
        "evaluation": {
            "enabled": True,
            "metrics": {
                "layout_fit": {
                    "kind": "judged",
                    "human": True,
                    "direction": "max",
                    "role": "guard",
                    "criterion": "The scenes follow the strategy",
                },  # fmt: skip
            },
        },
    }
    terms, provenance = resolve_terms("workflow", {}, frontmatter, entity_label="features/s/storyboard.scenario.md")
    human = terms["evaluation"]["human"]
    assert human == {
        "ask": "never",
        "spotCheck": 0.1,
        "expiresHours": 48,
        "agreement": {"minPairs": 5, "tolerance": 0.25, "threshold": 0.8, "maxPairs": 20},
    }
    assert scale_of(terms["evaluation"]["metrics"]["layout_fit"]) == DEFAULT_HUMAN_SCALE  # the engine's 1–5
    entity = make_entity("storyboard")
    entity.terms, entity.provenance = terms, provenance
    entity.save()
    for n in range(4):
        paired_run(entity, alice, n, 0.75, 0.5)
    answer = only(entity)
    assert (answer.status, answer.pairs) == ("low", 4)
    assert "4 of 5 pairs" in answer.reason
    paired_run(entity, alice, 4, 0.75, 0.5)  # 0.25 apart: agrees at the default tolerance
    assert only(entity).status == "ok"


def test_a_judge_whose_role_hash_is_empty_reads_as_stating_none(alice) -> None:
    entity = make_entity(evaluation={"human": {"agreement": {"minPairs": 1}}})
    paired_run(entity, alice, 0, 0.5, 0.5, role_hash=None)
    paired_run(entity, alice, 1, 0.5, 0.5, role_hash="")
    assert only(entity).pairs == 2
