"""An evolve entity's own loop module: its window() and should_open() replace the preset's on every path — a
landing grade, the scheduled look, Analyze now — with the context the seed gives them (since, gradedRuns,
calibration, groupChangedAt), and its window() at the watch names the runs and lays the period metrics the
comparison reads (seed 003, "What your own window() sees", "Improving what already works"; R6.8, R14.12, R14.15).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from evolution.loop import trigger
from evolution.models import Cycle
from grading.models import Grade
from singularity.brain.modules import load_at
from tests.evolution.evolve_helpers import (
    METRICS,
    MINUTE,
    T0,
    graded_at,
    runs,
    settle_with,
    shipped_on,
    shop,
    window_of,
)
from tests.evolution.loop_helpers import cycles_of
from tests.grading.grading_helpers import brain_repo

pytestmark = pytest.mark.django_db

LOOP_PATH = "features/shop/shop.loop.py"
STEADY = [1000, 1040, 980, 1010, 1020, 990, 1005, 1015, 995, 1030]
PERIOD = {**METRICS, "followers": {"kind": "computed", "scope": "period", "direction": "max", "role": "guard"}}


def with_module(tmp_path, settings, source: str, **shop_kwargs):
    """An evolve shop whose loop module (at its commit, in the engine's checkout) is ``source``."""
    checkout, commit = brain_repo(tmp_path / "brain", {LOOP_PATH: source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = shop(loop_module_path=LOOP_PATH, commit=commit, **shop_kwargs)
    return entity, load_at(checkout, commit, LOOP_PATH).module


def land(grade: Grade) -> int:
    return trigger.on_landed([grade.pk], now=grade.graded_at)


# --- At the trigger: every path asks the entity's own functions --------------------------------

TRIGGER = """
SEEN = []

def window(ctx):
    w = ctx.preset.window(ctx)
    SEEN.append({
        "phase": ctx.phase,
        "since": ctx.since,
        "anchor": ctx.anchor,
        "groupChangedAt": ctx.groupChangedAt,
        "graded": len(ctx.gradedRuns()["comparable"]),
        "calibration": ctx.calibration(),
        "preset": w,
    })
    if not w["ready"]:
        return w
    return {**w, "runIds": w["runIds"][-4:], "reason": "the newest four of the cadence"}

def should_open(window, trigger):
    quiet = any(run["metrics"].get("revenue", 0) < 500 for run in window)
    return {"open": not quiet, "reason": "a sale under 500 USD: not this window" if quiet else "four good sales"}
"""


# The brain's function runs on a thread of its own (singularity.brain.deadline), on a connection of its own: what
# ctx.gradedRuns() reads there must be committed.
@pytest.mark.django_db(transaction=True)
def test_a_landing_asks_the_entitys_window_and_rule_with_the_seeds_context(tmp_path, settings):
    entity, module = with_module(tmp_path, settings, TRIGGER)
    start = timezone.now() - timedelta(hours=1)
    grades = window_of(entity, runs([1000.0] * 9 + [400.0]), start=start)
    assert [land(g) for g in grades] == [0] * 10  # ready at the tenth, but the rule says no
    seen = module.SEEN[-1]
    assert seen["phase"] == "trigger" and seen["since"] is None and seen["groupChangedAt"] is None
    assert seen["anchor"] == {"id": str(grades[-1].execution_id), "createdAt": grades[-1].graded_at.isoformat()}
    assert seen["graded"] == 10 and seen["calibration"] == {"metrics": []}
    assert seen["preset"]["ready"] is True and len(seen["preset"]["runIds"]) == 10
    assert cycles_of(entity) == []

    more = window_of(entity, runs([1000.0] * 4), start=start + 20 * MINUTE)
    assert [land(g) for g in more] == [0, 0, 0, 1]  # the rule reads the four the window names: all good
    [cycle] = cycles_of(entity)
    assert cycle.window["runIds"] == [str(g.execution_id) for g in more]
    assert cycle.window["reason"] == "four good sales"


def test_the_next_window_starts_at_the_previous_cycles_mark_in_the_entitys_context_too(tmp_path, settings):
    entity, module = with_module(tmp_path, settings, TRIGGER, loop={"cooldownHours": 0})
    start = timezone.now() - timedelta(hours=2)
    first = window_of(entity, runs([1000.0] * 10), start=start)
    assert land(first[-1]) == 1
    [cycle] = cycles_of(entity)
    Cycle.objects.filter(pk=cycle.pk).update(claim=None, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED)
    land(graded_at(entity, cycle.started_at + MINUTE, {"revenue": 1000.0, "conversion": 0.4}))
    assert module.SEEN[-1]["since"] == cycle.started_at.isoformat()
    assert module.SEEN[-1]["preset"]["progress"] == {"have": 1, "need": 10, "unit": "graded runs"}


def test_the_scheduled_look_asks_the_entitys_window_and_rule(tmp_path, settings):
    entity, module = with_module(tmp_path, settings, TRIGGER, trigger={"windowRuns": 5, "every": 24})
    start = timezone.now() - timedelta(hours=3)
    window_of(entity, runs([1000.0] * 4 + [300.0]), start=start)
    assert trigger.look(entity) is False  # ready, and the entity's rule says no
    assert module.SEEN[-1]["phase"] == "trigger" and module.SEEN[-1]["anchor"] is None
    window_of(entity, runs([1000.0] * 4), start=start + 30 * MINUTE)
    assert trigger.look(entity) is True
    [cycle] = cycles_of(entity)
    assert cycle.origin == Cycle.Origin.CADENCE and len(cycle.window["runIds"]) == 4


def test_analyze_now_opens_on_the_entitys_window(tmp_path, settings):
    entity, module = with_module(tmp_path, settings, TRIGGER)
    grades = window_of(entity, runs([1000.0] * 12), start=timezone.now() - timedelta(hours=1))
    opened = trigger.analyze_now(entity)
    assert opened.opened
    assert opened.cycle.window["runIds"] == [str(g.execution_id) for g in grades[-4:]]
    assert module.SEEN[-1]["anchor"] is None


# --- At the watch: the entity's window() names the after side -----------------------------------

WATCH = """
SEEN = []

def window(ctx):
    w = ctx.preset.window(ctx)
    SEEN.append({"phase": ctx.phase, "since": ctx.since, "anchor": ctx.anchor, "ready": w["ready"],
                 "runs": len(w["runIds"]), "graded": len(ctx.gradedRuns(since=ctx.since)["comparable"])})
    if ctx.phase != "watch" or not w["ready"]:
        return w
    # The last two sales were a test shop's: not the market's evidence. Followers counted once per window.
    return {**w, "runIds": w["runIds"][:-2], "metrics": [{"id": "followers", "value": 130}]}

def should_open(window, trigger):
    return {"open": True, "reason": "always"}
"""


def watched(tmp_path, settings, source: str = WATCH, **shop_kwargs):
    entity, module = with_module(tmp_path, settings, source, metrics=PERIOD, **shop_kwargs)
    before = window_of(entity, runs(STEADY), start=T0 - 120 * MINUTE)
    return shipped_on(entity, before, merged_at=T0, metrics=[{"id": "followers", "value": 100}]), module


@pytest.mark.django_db(transaction=True)
def test_the_entitys_window_at_the_watch_names_the_runs_and_lays_its_period_metric(tmp_path, settings):
    cycle, module = watched(tmp_path, settings)
    # Eight market sales well up; the two test-shop sales at the end would break the conversion floor.
    values = runs([1400, 1450, 1380, 1420, 1410, 1440, 1390, 1430, 1, 1], [0.4] * 8 + [0.01, 0.01])
    cycle = settle_with(cycle, values, start=T0 + 5 * MINUTE)
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason
    at_watch = [s for s in module.SEEN if s["phase"] == "watch"]
    assert at_watch and at_watch[-1]["since"] == T0.isoformat() and at_watch[-1]["anchor"] is None
    assert at_watch[-1]["ready"] is True and at_watch[-1]["runs"] == 10 and at_watch[-1]["graded"] == 10
    read = {m["metric"]: m for m in cycle.watch_verdict["perMetric"]}
    assert read["revenue"]["after"]["n"] == 8 and read["conversion"]["after"]["n"] == 8
    assert read["followers"]["source"] == "window"
    assert (read["followers"]["before"]["value"], read["followers"]["after"]["value"]) == (100, 130)
    assert len(cycle.watch_window["runIds"]) == 8  # the window the watch stored is the one the comparison read


def test_the_entitys_should_open_is_not_asked_after_an_evolve_merge(tmp_path, settings):
    cycle, _module = watched(tmp_path, settings)  # its should_open always says open: repair would regress
    cycle = settle_with(cycle, runs([1400, 1450, 1380, 1420, 1410, 1440, 1390, 1430, 1400, 1410]), start=T0 + MINUTE)
    assert cycle.watch_verdict["comparator"] == "evolve" and cycle.status == Cycle.Status.VALIDATED


def test_a_window_not_ready_at_the_watch_is_not_yet(tmp_path, settings):
    source = WATCH.replace(
        'if ctx.phase != "watch" or not w["ready"]:', "if True:\n        return {**w, 'ready': False}"
    )
    cycle, _module = watched(tmp_path, settings, source)
    cycle = settle_with(cycle, runs([1400] * 10), start=T0 + MINUTE)
    assert cycle.phase == Cycle.Phase.WATCHING and cycle.watch_verdict is None


def test_a_window_that_throws_at_the_watch_settles_unvalidated_naming_it(tmp_path, settings):
    source = WATCH.replace(
        'if ctx.phase != "watch" or not w["ready"]:',
        'if ctx.phase == "watch":\n        raise ValueError("the followers API is down")\n    if True:',
    )
    cycle, _module = watched(tmp_path, settings, source)
    cycle = settle_with(cycle, runs([1400] * 10), start=T0 + MINUTE)
    assert cycle.status == Cycle.Status.UNVALIDATED
    assert "window raised ValueError at the watch: the followers API is down" in cycle.reason


# --- A period metric is window()'s to measure (R5.15, R14.15) ------------------------------------


def test_a_period_metric_without_a_window_of_its_own_withholds_the_ready_window_naming_it():
    entity = shop(metrics=PERIOD, trigger={"windowRuns": 5, "every": 24})
    grades = window_of(entity, runs([1000.0] * 5), start=timezone.now() - timedelta(hours=1))
    assert land(grades[-1]) == 0  # ready, and nobody measured followers: no cycle
    assert trigger.look(entity) is False
    from evolution.core import periods

    ready = resolve_window(entity)
    assert periods.problem(entity.terms, ready) == (
        "a ready window left out period metric followers (declared scope: period): window() measures it once per "
        "window, and the preset's own sampler measures none"
    )
    assert periods.problem(entity.terms, {**ready, "ready": False}) is None  # only a ready window owes it


def resolve_window(entity):
    from evolution.presets import resolve

    return resolve.request_window(entity, now=timezone.now())


LAYS_A_RUN_METRIC = """
def window(ctx):
    w = ctx.preset.window(ctx)
    return {**w, "metrics": [{"id": "followers", "value": 100}, {"id": "revenue", "value": 5000}]}
"""


def test_a_window_laying_a_run_scoped_metric_over_the_vector_is_refused(tmp_path, settings):
    entity, _module = with_module(tmp_path, settings, LAYS_A_RUN_METRIC, metrics=PERIOD)
    grades = window_of(entity, runs([1000.0] * 10), start=timezone.now() - timedelta(hours=1))
    assert land(grades[-1]) == 0
    assert cycles_of(entity) == []
    from evolution.core import periods

    assert periods.problem(entity.terms, {"ready": True, "metrics": {"revenue": 1}}).startswith(
        "window() laid run-scoped metric revenue over the window's vector"
    )


def test_a_ready_watch_window_without_its_period_metric_settles_unvalidated_naming_it(tmp_path, settings):
    source = WATCH.replace('"metrics": [{"id": "followers", "value": 130}]', '"metrics": []')
    cycle, _module = watched(tmp_path, settings, source)
    cycle = settle_with(cycle, runs([1400] * 10), start=T0 + MINUTE)
    assert cycle.status == Cycle.Status.UNVALIDATED
    assert "a ready window left out period metric followers" in cycle.reason and "(at the watch)" in cycle.reason
