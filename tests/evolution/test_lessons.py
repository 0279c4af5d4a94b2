"""Lessons: one per round that reached a terminal with a proposal, recall order and bound, citation credit, the sweep."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from evolution.loop.lessons import credit, recall, sweep, write_for
from evolution.models import Cycle, Lesson, Round
from grading.models import Entity
from tests.evolution.loop_helpers import looped
from tests.grading.grading_helpers import brain_repo

pytestmark = pytest.mark.django_db

NOW = timezone.now()
FILES = [{"path": "features/triage/triage.scenario.md", "content": "new"}]


def settled(entity: Entity, status: str, *, reason: str = "", days_ago: float = 0, **fields: Any) -> Cycle:
    at = NOW - timedelta(days=days_ago)
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{uuid.uuid4()}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.SETTLED,
        status=status,
        reason=reason,
        analysed=True,
        completed_at=at,
        **fields,
    )


def proposed(cycle: Cycle, number: int = 1, **fields: Any) -> Round:
    values: dict[str, Any] = {
        "summary": f"Add a keyword (r{number})",
        "hypothesis": "The word was missing.",
        "files": FILES,
        "status": Round.Status.MERGED,
    }
    values.update(fields)
    return Round.objects.create(cycle=cycle, number=number, **values)


# --- Writing ------------------------------------------------------------------------------------


def test_a_validated_round_leaves_one_lesson_with_the_watchs_numbers_first():
    entity = looped()
    cycle = settled(
        entity,
        Cycle.Status.VALIDATED,
        reason="the entity did not trigger again",
        watch_verdict={"verdict": "validated", "perMetric": {"accuracy": {"baseline": 0.6, "observed": 0.9}}},
    )
    rnd = proposed(
        cycle, merge_sha="a" * 40, check_verdict={"perMetric": [{"metric": "accuracy", "delta": 0.2}]}, cited_lessons=[]
    )
    lessons = write_for(cycle)
    assert len(lessons) == 1
    lesson = lessons[0]
    assert (lesson.entity, lesson.cycle, lesson.round) == (entity, cycle, rnd)
    assert lesson.outcome == "validated"
    assert lesson.summary == "Add a keyword (r1)" and lesson.hypothesis == "The word was missing."
    assert lesson.reason == "the entity did not trigger again"
    assert lesson.files == ["features/triage/triage.scenario.md"]
    assert lesson.per_metric == [
        {"metric": "accuracy", "baseline": 0.6, "observed": 0.9, "source": "watch"},
        {"metric": "accuracy", "delta": 0.2, "source": "check"},
    ]


def test_writing_twice_writes_once():
    cycle = settled(looped(), Cycle.Status.UNVALIDATED)
    proposed(cycle, merge_sha="b" * 40)
    first = write_for(cycle)
    again = write_for(cycle)
    assert [lesson.pk for lesson in again] == [lesson.pk for lesson in first]
    assert Lesson.objects.count() == 1


@pytest.mark.parametrize("status", ["validated", "regressed", "unvalidated", "skipped", "failed"])
def test_every_terminal_writes_a_lesson_for_a_round_with_a_proposal(status):
    cycle = settled(looped(), status)
    proposed(cycle, status=Round.Status.SKIPPED if status == "skipped" else Round.Status.CLOSED)
    assert [lesson.outcome for lesson in write_for(cycle)] == [status]


def test_a_persons_skip_is_kept_with_its_note_apart_from_a_timeout():
    entity = looped()
    skip = settled(entity, Cycle.Status.SKIPPED)
    proposed(skip, status=Round.Status.SKIPPED, rejection="human", decision_note="Not that word.", decided_by="alice")
    expired = settled(entity, Cycle.Status.SKIPPED)
    proposed(expired, status=Round.Status.SKIPPED, rejection="timeout", decided_by=expired.actor)
    (by_person,) = write_for(skip)
    (by_clock,) = write_for(expired)
    assert (by_person.rejection, by_person.note) == ("human", "Not that word.")
    assert (by_clock.rejection, by_clock.note) == ("timeout", "")


def test_no_round_or_no_proposal_or_the_kill_switch_leaves_no_lesson():
    entity = looped()
    assert write_for(settled(entity, Cycle.Status.SKIPPED, reason="cooldown: rests until 14:00")) == []
    nothing = settled(entity, Cycle.Status.SKIPPED, reason="the proposer had nothing to propose")
    Round.objects.create(cycle=nothing, number=1, status=Round.Status.SKIPPED, rejection="proposer")
    assert write_for(nothing) == []
    killed = settled(entity, Cycle.Status.SKIPPED, reason="the loop was switched off during the analysis")
    proposed(killed, status=Round.Status.SKIPPED)
    assert write_for(killed) == []
    assert not Lesson.objects.exists()


def test_a_refined_round_leaves_none_its_child_leaves_the_cycles():
    cycle = settled(looped(), Cycle.Status.VALIDATED)
    parent = proposed(cycle, 1, status=Round.Status.REFINED)
    child = proposed(cycle, 2, parent=parent, merge_sha="c" * 40)
    (lesson,) = write_for(cycle)
    assert lesson.round == child and lesson.outcome == "validated"


def test_a_failed_round_retried_before_the_change_that_shipped_is_recorded_failed():
    cycle = settled(looped(), Cycle.Status.VALIDATED)
    proposed(cycle, 1, status=Round.Status.FAILED, error="apply: the diff gate refused it")
    proposed(cycle, 2, merge_sha="d" * 40)
    assert [(lesson.round.number, lesson.outcome) for lesson in write_for(cycle)] == [(1, "failed"), (2, "validated")]


def test_a_live_cycle_owes_no_lesson():
    cycle = Cycle.objects.create(entity=looped(), key="live", origin="grade")
    proposed(cycle, status=Round.Status.PROPOSED)
    assert write_for(cycle) == []


# --- Recall ---------------------------------------------------------------------------------------


def lesson_of(entity: Entity, *, rejection: str = "", status: str = "validated", days_ago: float = 1) -> Lesson:
    cycle = settled(entity, status, days_ago=days_ago)
    proposed(cycle, rejection=rejection, status=Round.Status.SKIPPED if rejection else Round.Status.MERGED)
    (lesson,) = write_for(cycle)
    return lesson


def test_recall_puts_a_persons_no_first_then_the_newest_and_bounds_after_ordering():
    entity = looped()
    old_skip = lesson_of(entity, rejection="human", status="skipped", days_ago=30)
    timeout = lesson_of(entity, rejection="timeout", status="skipped", days_ago=2)
    validated = lesson_of(entity, days_ago=1)
    other = lesson_of(looped("billing"), rejection="human", status="skipped", days_ago=0)
    assert recall(entity, 1) == [old_skip]
    assert recall(entity, 10) == [old_skip, validated, timeout]
    assert other not in recall(entity, 10)
    assert recall(entity, 0) == []


# --- Credit ---------------------------------------------------------------------------------------


def cited_cycle(status: str, cited: list[Any], **cycle_fields: Any) -> Cycle:
    cycle = settled(looped("subject"), status, **cycle_fields)
    proposed(cycle, merge_sha="e" * 40, cited_lessons=cited)
    return cycle


def scores(lesson: Lesson) -> tuple[int, int]:
    lesson.refresh_from_db()
    return lesson.helpful, lesson.harmful


def test_a_measured_validated_round_credits_each_cited_lesson_helpful():
    entity = looped()
    cited, uncited = lesson_of(entity), lesson_of(entity)
    cycle = cited_cycle("validated", [cited.pk, 999999], watch_verdict={"comparator": "count", "n": 5})
    assert credit(cycle) == 1
    assert scores(cited) == (1, 0) and scores(uncited) == (0, 0)


def test_a_blind_validated_round_credits_nothing():
    lesson = lesson_of(looped())
    cycle = cited_cycle("validated", [lesson.pk], watch_verdict={"comparator": "compare", "perMetric": []})
    assert credit(cycle) == 0
    assert scores(lesson) == (0, 0)


def test_a_regressed_round_charges_each_cited_lesson_harmful_whatever_measured_it():
    lesson = lesson_of(looped())
    assert credit(cited_cycle("regressed", [lesson.pk, lesson.pk])) == 1
    assert scores(lesson) == (0, 1)


@pytest.mark.parametrize("status", ["unvalidated", "skipped", "failed"])
def test_the_other_terminals_move_no_score(status):
    lesson = lesson_of(looped())
    assert credit(cited_cycle(status, [lesson.pk], watch_verdict={"comparator": "count", "n": 5})) == 0
    assert scores(lesson) == (0, 0)


# --- The sweep ------------------------------------------------------------------------------------


def test_the_sweep_deletes_lessons_past_retention_in_one_dated_delete():
    entity = looped()
    old = lesson_of(entity, days_ago=200)
    young = lesson_of(entity, days_ago=100)
    assert sweep(now=NOW) == 1  # the engine's 180 days
    assert not Lesson.objects.filter(pk=old.pk).exists() and Lesson.objects.filter(pk=young.pk).exists()
    assert sweep(now=NOW + timedelta(days=81)) == 1
    assert not Lesson.objects.exists()


def test_the_sweep_honours_the_brain_wide_retention_not_an_entitys(tmp_path):
    checkout, commit = brain_repo(
        tmp_path / "brain", {"constitution/MANIFEST.yaml": "loop:\n  lessons:\n    retentionDays: 30\n"}
    )
    entity = looped(loop={"lessons": {"maxRecalled": 10, "retentionDays": 365}}, commit=commit)
    kept = lesson_of(entity, days_ago=20)
    lesson_of(entity, days_ago=40)
    assert sweep(now=NOW, checkout=checkout) == 1
    assert list(Lesson.objects.all()) == [kept]
