"""Looking on a schedule: trigger.every read by the hourly sweep (seed 003 "Looking on a schedule"; R6.11-R6.15).

Entities, graded runs and cycles are real rows; time moves with time_machine.
The only seam watched is ``resolve.request_window`` (wrapped, still real) to
count the looks.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from evolution.loop import intake, trigger
from evolution.models import Cycle, WaitingWindow
from evolution.presets import resolve
from evolution.steering import cadence
from grading.doctor import run_doctor
from singularity.schedule import BEAT_SCHEDULE
from tests.evolution.loop_helpers import cycles_of, history, looped, settled_cycle

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def looks(monkeypatch) -> list[str]:
    """The slugs of the entities each scheduled look sampled, in order (the real request_window still answers)."""
    seen: list[str] = []
    real = resolve.request_window

    def spy(entity, *, now):
        seen.append(entity.slug)
        return real(entity, now=now)

    monkeypatch.setattr(trigger, "request_window", spy)
    return seen


def weekly(slug: str = "triage", **loop) -> object:
    return looped(slug, loop={"trigger": {"windowRuns": 5, "minFailures": 2, "every": 168}, **loop})


# --- No every, no look --------------------------------------------------------------


def test_an_entity_without_every_is_never_looked_at(looks) -> None:
    entity = looped()
    history(entity, "bbbbb", start=START - timedelta(hours=1))
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert looks == [] and cycles_of(entity) == []
    assert cadence.every_hours(entity) is None


def test_an_entity_out_of_the_loop_is_never_looked_at(looks) -> None:
    quiet = looped("quiet", loop={"enabled": False, "trigger": {"every": 1}})
    assert quiet.loop_enabled is False
    with time_machine.travel(START, tick=False):
        trigger.sweep()
    assert looks == []


# --- What a look opens ----------------------------------------------------------------


def test_a_weekly_look_opens_nothing_when_the_newest_graded_run_is_ok(looks, caplog) -> None:
    entity = weekly()
    history(entity, "bbbbg", start=START - timedelta(hours=2))
    before = resolve.request_window(entity, now=START)
    looks.clear()
    with caplog.at_level(logging.INFO, logger="evolution.loop.trigger"), time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert looks == ["triage"]
    assert Cycle.objects.count() == 0  # no cycle, no skipped row: a look that opens nothing costs nothing
    assert "triage: the scheduled look opens nothing: the run that landed is not bad" in caplog.text
    assert resolve.request_window(entity, now=START) == before  # nothing moved in the entity's history


def test_a_weekly_look_opens_a_cadence_cycle_when_the_newest_graded_run_is_bad(looks) -> None:
    entity = weekly()
    runs = history(entity, "ggbgb", start=START - timedelta(hours=2))
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 1
    [cycle] = cycles_of(entity)
    assert cycle.origin == Cycle.Origin.CADENCE and cycle.anchor_id is None
    assert cycle.phase == Cycle.Phase.ANALYSING and cycle.claim == entity.pk
    assert cycle.window["runIds"] == [str(g.execution_id) for g in runs]  # oldest first, through the look
    assert cycle.started_at == START


def test_the_rule_counts_like_the_trigger_one_bad_run_alone_is_withheld(looks) -> None:
    entity = weekly()
    history(entity, "ggggb", start=START - timedelta(hours=2))
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert Cycle.objects.count() == 0


def test_a_look_inside_the_cooldown_opens_nothing_and_records_nothing(looks, caplog) -> None:
    entity = weekly()
    settled_cycle(entity, Cycle.Status.VALIDATED, at=START - timedelta(hours=1))
    history(entity, "bbbbb", start=START - timedelta(minutes=30))
    with caplog.at_level(logging.INFO, logger="evolution.loop.trigger"), time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert looks == ["triage"]
    assert Cycle.objects.filter(entity=entity).count() == 1  # the settled one; no skipped row for the look
    assert "refused: cooldown: rests until" in caplog.text


def test_a_look_past_the_daily_ceiling_opens_nothing(looks, caplog) -> None:
    entity = weekly(maxAnalysesPerDay=1, cooldownHours=0)
    settled_cycle(entity, Cycle.Status.VALIDATED, at=START - timedelta(hours=3))
    history(entity, "bbbbb", start=START - timedelta(hours=1))
    with caplog.at_level(logging.INFO, logger="evolution.loop.trigger"), time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert Cycle.objects.filter(entity=entity).count() == 1
    assert "maxAnalysesPerDay" in caplog.text


def test_a_look_during_a_live_cycle_is_refused_not_queued(looks, caplog) -> None:
    entity = weekly()
    history(entity, "bbbbb", start=START - timedelta(hours=2))
    live = Cycle.objects.create(
        entity=entity, key="test:live", claim=entity.pk, origin=Cycle.Origin.GRADE, analysed=True,
        started_at=START - timedelta(hours=1), moved_at=START - timedelta(hours=1),
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="evolution.loop.trigger"), time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert cycles_of(entity) == [live]
    assert f"refused: cycle {live.pk} is live" in caplog.text
    Cycle.objects.filter(pk=live.pk).update(claim=None, phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED,
                                            analysed=False, completed_at=START)  # fmt: skip
    with time_machine.travel(START + timedelta(hours=1), tick=False):
        assert trigger.sweep() == 0  # nothing was queued: the next look is a week on
    assert looks == ["triage"]


# --- The clock ----------------------------------------------------------------------


def test_a_weekly_entity_is_looked_at_once_a_week(looks) -> None:
    weekly()
    for hours in (0, 1, 24, 167):
        with time_machine.travel(START + timedelta(hours=hours), tick=False):
            trigger.sweep()
    assert looks == ["triage"]
    with time_machine.travel(START + timedelta(hours=168), tick=False):
        trigger.sweep()
    assert looks == ["triage", "triage"]


def test_an_every_below_an_hour_gets_the_sweeps_cadence(looks) -> None:
    looped("often", loop={"trigger": {"every": 0.25}})
    for minutes in (0, 15, 30, 45, 60, 75, 120):
        with time_machine.travel(START + timedelta(minutes=minutes), tick=False):
            trigger.sweep()
    assert looks == ["often", "often", "often"]  # at 0, 60 and 120 minutes: once an hour
    assert cadence.period(looped("fine", loop={"trigger": {"every": 0.25}})) == timedelta(hours=1)


def test_a_sweep_a_few_minutes_early_still_looks(looks) -> None:
    looped("hourly", loop={"trigger": {"every": 1}})
    with time_machine.travel(START, tick=False):
        trigger.sweep()
    with time_machine.travel(START + timedelta(minutes=57), tick=False):
        trigger.sweep()
    assert looks == ["hourly", "hourly"]


def test_the_clock_is_the_last_trigger_sample_and_survives_a_look_that_opened_nothing(looks) -> None:
    entity = looped("daily", loop={"trigger": {"every": 24}})
    with time_machine.travel(START, tick=False):
        trigger.sweep()
    assert WaitingWindow.objects.get(entity=entity).sampled_at == START
    with time_machine.travel(START + timedelta(hours=23), tick=False):
        trigger.sweep()
    assert looks == ["daily"]


# --- The sweep's other duties -----------------------------------------------------------


def test_the_sweep_delivers_queued_ideas_first(monkeypatch, looks) -> None:
    order: list[str] = []
    monkeypatch.setattr(intake, "deliver_queued", lambda now: order.append(f"ideas at {now:%H:%M}") or 2)
    looped("hourly", loop={"trigger": {"every": 1}})
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 2
    assert order == ["ideas at 09:00"] and looks == ["hourly"]


def test_one_broken_look_does_not_stop_the_others(monkeypatch, caplog) -> None:
    first = looped("aaa", loop={"trigger": {"every": 1}})
    second = looped("bbb", loop={"trigger": {"every": 1, "windowRuns": 5, "minFailures": 1}})
    history(second, "b", start=START - timedelta(minutes=5))
    real = resolve.request_window

    def broken(entity, *, now):
        if entity.pk == first.pk:
            raise RuntimeError("window() exploded")
        return real(entity, now=now)

    monkeypatch.setattr(trigger, "request_window", broken)
    with caplog.at_level(logging.INFO, logger="evolution.loop.trigger"), time_machine.travel(START, tick=False):
        assert trigger.sweep() == 1
    assert "aaa: the scheduled look was withheld: window() exploded" in caplog.text
    assert [c.origin for c in cycles_of(second)] == [Cycle.Origin.CADENCE]


def test_the_beat_runs_the_sweep_hourly_and_the_digest_daily() -> None:
    from singularity.celery import app

    sweep, digest = BEAT_SCHEDULE["loop-hourly-sweep"], BEAT_SCHEDULE["loop-needs-you-digest"]
    assert (sweep["task"], sweep["schedule"]) == ("evolution.tasks.hourly_sweep", 3600.0)
    assert (digest["task"], digest["schedule"]) == ("evolution.tasks.needs_you_digest", 86400.0)
    app.loader.import_default_modules()
    assert {sweep["task"], digest["task"]} <= set(app.tasks)


def test_the_task_runs_the_sweep(looks) -> None:
    from evolution.tasks import hourly_sweep

    entity = looped("hourly", loop={"trigger": {"every": 1, "windowRuns": 5, "minFailures": 1}})
    history(entity, "b", start=START - timedelta(minutes=5))
    with time_machine.travel(START, tick=False):
        assert hourly_sweep.apply().get() == 1
    assert looks == ["hourly"]


# --- Doctor -------------------------------------------------------------------------


def test_doctor_says_an_every_below_an_hour_is_looked_at_hourly() -> None:
    looped("often", loop={"trigger": {"every": 0.25}})
    looped("weekly", loop={"trigger": {"every": 168}})
    looped("plain")
    found = [f.line() for f in run_doctor(only=["Loop cadence"]) if f.level != "pass"]
    assert len(found) == 1
    assert "scenario:often" in found[0] and "0.25 h" in found[0] and "once an hour" in found[0]
