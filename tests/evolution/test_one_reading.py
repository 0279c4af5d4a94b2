"""One reading of a run's value of a metric (issue 29 A; R3.15, R4.10, R4.15): every reader of a run's value
reads the same number — a person's rating over the judge's on a human-rated metric, a reported metric people's
alone — and two windows compared with each other read each metric from ONE source.

Before, four functions read it four ways: a brain's ``should_open`` saw the judge's 0.75 where a person rated
0.25, a reported metric a person rated was missing from its record, and ``compare``'s windows mixed people for
rated runs with the judge for the rest.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from evolution.loop import brief as brief_module
from evolution.loop.verdict import sides
from evolution.models import Cycle
from evolution.presets.base import Observed, outcomes
from evolution.presets.readings import values_by_source
from evolution.presets.resolve import graded_runs
from grading import observed as O
from grading.metrics import is_bad, run_value
from grading.models import Rating
from tests.grading.rating_helpers import JUDGE, THUMBS, make_entity, make_grade, make_run, metric

pytestmark = pytest.mark.django_db

#: Judged by the model, people rate over it (on 0..1 here, so a rating's value is its normalised value).
QUALITY = metric(kind="judged", human=True, direction="max", unit="share", role="objective", target=0.5,
                 criterion="Answers the question", scale={"min": 0, "max": 1, "step": None, "labels": None})  # fmt: skip
#: Only people rate it.
USEFUL = metric(kind="reported", direction="max", unit="share", role="observe", criterion="Useful", scale=THUMBS)


@pytest.fixture
def people():
    User = get_user_model()
    return [User.objects.create_user(f"rater{i}") for i in range(6)]


def entity_of():
    entity = make_entity("triage", metrics={"quality": QUALITY, "useful": USEFUL})
    entity.terms["loop"]["threshold"] = 0.1  # bad only for a missed target here
    entity.save(update_fields=["terms"])
    return entity


def rate(grade, user, metric_id: str, value: float) -> None:
    Rating.objects.create(
        execution=grade.execution, entity=grade.entity, metric_id=metric_id, user=user,
        value=Decimal(str(value)), normalized=value,
    )  # fmt: skip


def graded(entity, quality: float, *, minutes: int = 0):
    when = timezone.now() - timedelta(minutes=minutes)
    return make_grade(make_run(entity, completed_at=when), metrics={"quality": quality}, score=0.9, graded_at=when)


def test_every_reader_of_one_run_reads_the_persons_rating_over_the_judges(people):
    entity = entity_of()
    grade = graded(entity, 0.75)
    rate(grade, people[0], "quality", 0.25)
    rate(grade, people[0], "useful", 1.0)
    terms = entity.terms
    readings = {
        "run_value": run_value(grade, "quality"),
        "outcomes (the trigger, should_open)": outcomes([grade], terms)[0]["metrics"]["quality"],
        "ctx.gradedRuns (a window())": graded_runs(entity, None, None, None, now=timezone.now())["comparable"][0][
            "metrics"
        ]["quality"],
        "observed vectors (pages, compare alone)": O.vectors([(grade.execution_id, grade.metrics)], terms)[
            str(grade.execution_id)
        ]["quality"],
        "the brief": brief_module.run_value(grade, "quality"),
    }
    assert readings == dict.fromkeys(readings, 0.25)
    # a reported metric a person rated is on the record the rules read, and only there as people's
    assert outcomes([grade], terms)[0]["metrics"]["useful"] == 1.0
    # bad is judged on the same value: 0.25 misses the target 0.5 (the judge's 0.75 would not)
    assert outcomes([grade], terms)[0]["bad"] is True
    assert is_bad(grade, terms) is True


def test_an_unrated_run_keeps_the_judges_number_and_no_reported_value(people):
    entity = entity_of()
    grade = graded(entity, 0.75)
    row = outcomes([grade], entity.terms)[0]
    assert row["metrics"]["quality"] == 0.75 and "useful" not in row["metrics"]
    assert row["bad"] is False


def test_compare_reads_both_windows_from_one_source_not_from_who_rated_which_run(people):
    # Judge 1.0 on all ten runs; a person rated three runs of the after window 0.0 (fewer than minPairs 5): the
    # judge is the source in both windows, so both read 1.0. Before, the after window read people for its rated
    # runs and the judge for the rest: median 1.0 → 0.0 of nothing but who rated.
    entity = entity_of()
    before = [graded(entity, 1.0, minutes=100 - i) for i in range(5)]
    after = [graded(entity, 1.0, minutes=50 - i) for i in range(5)]
    for grade, user in zip(after[:3], people, strict=False):
        rate(grade, user, "quality", 0.0)
    cycle = Cycle.objects.create(
        entity=entity, key="k", origin=Cycle.Origin.GRADE, phase=Cycle.Phase.WATCHING, judge=JUDGE,
        window={"runIds": [str(g.execution_id) for g in before]}, started_at=timezone.now(), moved_at=timezone.now(),
    )  # fmt: skip
    seen = Observed(run_ids=[g.execution_id for g in after], graded=5, ungraded=0, need=5, min_failures=2)
    seen._grades = after
    was, now = sides(cycle, seen, {"runIds": [str(g.execution_id) for g in after]})
    assert was["vector"]["quality"] == 1.0 and now["vector"]["quality"] == 1.0
    assert [o["metrics"]["quality"] for o in now["outcomes"]] == [1.0] * 5
    # the watch's readings take the same sources
    runs = lambda grades: [(g.execution_id, g.metrics) for g in grades]  # noqa: E731
    read = values_by_source(entity.terms, ["quality"], runs(before), runs(after))["quality"]
    assert (read.source, read.after) == ("judge", [1.0] * 5)

    # With minPairs rated runs in both windows, people are the source on both sides.
    for grade in before:
        rate(grade, people[5], "quality", 0.5)
    for grade in after[3:]:
        rate(grade, people[5], "quality", 0.0)
    was, now = sides(cycle, seen, {"runIds": [str(g.execution_id) for g in after]})
    assert was["vector"]["quality"] == 0.5 and now["vector"]["quality"] == 0.0
    assert O.sources(entity.terms, [g.execution_id for g in before], [g.execution_id for g in after],
                     O.ratings_of([g.execution_id for g in before + after], entity.terms)) == {
        "quality": "people", "useful": "people"}  # fmt: skip


def test_a_window_with_no_rated_metric_reads_no_ratings(django_assert_num_queries):
    entity = make_entity("plain", metrics={"quality": metric(kind="judged", direction="max", role="objective")})
    grades = [graded(entity, 0.5, minutes=i) for i in range(5)]
    with django_assert_num_queries(0):
        rows = outcomes(grades, entity.terms)
    assert [row["metrics"] for row in rows] == [{"quality": 0.5}] * 5
    assert SimpleNamespace(ok=True).ok
