"""The evolve trigger: trigger.windowRuns is the cadence, the window every grade since the previous cycle's mark
(seed 003, "Improving what already works"; CONFORMANCE R6.8–R6.10, R6.13, R6.19, R14.14)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.loop import trigger
from evolution.models import Cycle
from evolution.presets import evolve, resolve
from grading.models import Grade
from tests.evolution.evolve_helpers import MINUTE, graded_at, runs, shop, window_of
from tests.evolution.loop_helpers import cycles_of

pytestmark = pytest.mark.django_db


def land(grade: Grade) -> int:
    return trigger.on_landed([grade.pk], now=grade.graded_at)


def healthy(entity, n, *, start):
    return window_of(entity, runs([1000.0] * n), start=start)


def settle(cycle: Cycle) -> None:
    """The cycle is over (its claim released): the next one may open."""
    Cycle.objects.filter(pk=cycle.pk).update(
        claim=None, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED, completed_at=cycle.started_at
    )


def test_nine_grades_open_nothing_and_the_tenth_opens_a_cycle_whatever_the_scores():
    entity = shop()
    start = timezone.now() - timedelta(hours=1)
    for grade in healthy(entity, 9, start=start):
        assert land(grade) == 0
    assert cycles_of(entity) == []  # a look that opens nothing leaves no row
    tenth = graded_at(entity, start + 9 * MINUTE, {"revenue": 1000.0, "conversion": 0.4})
    assert land(tenth) == 1
    [cycle] = cycles_of(entity)
    assert cycle.origin == Cycle.Origin.GRADE and cycle.anchor_id == tenth.execution_id
    assert len(cycle.window["runIds"]) == 10 and cycle.window["ready"] is True
    assert cycle.window["runIds"][-1] == str(tenth.execution_id)
    assert cycle.window["reason"] == "10 graded runs since the previous cycle's window (a cycle opens every 10)"


def test_the_next_window_starts_at_the_previous_cycles_mark():
    entity = shop(loop={"cooldownHours": 0})
    start = timezone.now() - timedelta(hours=2)
    first = healthy(entity, 10, start=start)
    assert land(first[-1]) == 1
    [cycle] = cycles_of(entity)
    settle(cycle)
    mark = cycle.started_at
    later = healthy(entity, 10, start=mark + MINUTE)
    assert [land(g) for g in later[:9]] == [0] * 9
    assert land(later[9]) == 1
    second = cycles_of(entity)[-1]
    assert second.window["runIds"] == [str(g.execution_id) for g in later]
    assert second.window["from"] == mark.isoformat()


def test_a_grade_pending_when_the_previous_cycle_looked_enters_the_next_window():
    entity = shop(loop={"cooldownHours": 0})
    start = timezone.now() - timedelta(hours=2)
    assert land(healthy(entity, 10, start=start)[-1]) == 1
    [cycle] = cycles_of(entity)
    settle(cycle)
    # A run that ended before the look, its grade still pending then (booked, landing after the mark).
    late = graded_at(entity, cycle.started_at + MINUTE, {"revenue": 1000.0, "conversion": 0.4})
    late.execution.completed_at = cycle.started_at - 5 * MINUTE
    late.execution.save(update_fields=["completed_at"])
    rest = healthy(entity, 9, start=cycle.started_at + 2 * MINUTE)
    assert land(late) == 0
    assert [land(g) for g in rest] == [0] * 8 + [1]
    assert str(late.execution_id) in cycles_of(entity)[-1].window["runIds"]


def test_the_first_window_reads_the_whole_history_capped_at_the_engines_bound(monkeypatch):
    monkeypatch.setattr(evolve, "WINDOW_BOUND", 30)
    entity = shop()
    grades = healthy(entity, 50, start=timezone.now() - timedelta(hours=3))
    window = resolve.request_window(entity, now=timezone.now())
    assert window["ready"] is True and window["from"] is None
    assert window["runIds"] == [str(g.execution_id) for g in grades[-30:]]
    assert window["reason"].startswith("the first window: the entity's newest 30 graded runs")


def test_a_scheduled_look_opens_on_a_ready_window_and_nothing_before_it():
    entity = shop(trigger={"windowRuns": 5, "every": 24})
    start = timezone.now() - timedelta(hours=3)
    healthy(entity, 4, start=start)
    assert trigger.look(entity) is False
    assert cycles_of(entity) == []
    healthy(entity, 1, start=start + 30 * MINUTE)
    assert trigger.look(entity) is True
    [cycle] = cycles_of(entity)
    assert cycle.origin == Cycle.Origin.CADENCE and len(cycle.window["runIds"]) == 5


def test_analyze_now_opens_on_the_evolve_window():
    entity = shop()
    grades = healthy(entity, 3, start=timezone.now() - timedelta(hours=1))
    opened = trigger.analyze_now(entity)
    assert opened.opened
    assert opened.cycle.window["runIds"] == [str(g.execution_id) for g in grades]
    assert opened.cycle.window["ready"] is False  # a thin baseline: the watch will say so


def test_a_grade_while_a_cycle_is_live_is_refused_into_one_row():
    entity = shop(trigger={"windowRuns": 3})
    start = timezone.now() - timedelta(hours=1)
    grades = healthy(entity, 8, start=start)
    # Opened at the third; the mark moves there, so the next window is ready three grades on, and refused.
    assert [trigger.on_landed([g.pk], now=g.graded_at) for g in grades] == [0, 0, 1, 0, 0, 0, 0, 0]
    live, refused = cycles_of(entity)
    assert live.claim == entity.pk
    assert refused.status == Cycle.Status.SKIPPED and refused.refusals == 3


def test_a_batch_opens_once_at_the_landing_that_fills_the_window():
    entity = shop(trigger={"windowRuns": 4})
    grades = healthy(entity, 6, start=timezone.now() - timedelta(hours=1))
    with time_machine.travel(grades[-1].graded_at + MINUTE, tick=False):
        assert trigger.on_landed([g.pk for g in grades]) == 1
    live = [c for c in cycles_of(entity) if c.claim == entity.pk]
    assert len(live) == 1 and live[0].anchor_id == grades[3].execution_id


def test_the_preset_rule_opens_on_a_ready_window_whatever_its_runs_scored():
    answer = resolve.ask_should_open(shop(), [{"bad": True}], {"windowRuns": 10})
    assert answer["open"] is True
