"""Backtest (issue 16): a loop policy replayed over the entity's graded history through the live loop's functions."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.loop import backtest as bt
from evolution.loop import trigger
from evolution.models import Backtest, Cycle, Supervision
from tests.evolution.loop_helpers import cycles_of, graded, looped

pytestmark = pytest.mark.django_db

HOLD = timedelta(hours=2)


def record_history(entity, *, steps: int, start, every=timedelta(minutes=30), seed: int = 7, hold_at=None):
    """Land graded runs one by one through the live trigger, settling each opened cycle ``HOLD`` after it opened.

    What the live loop opened and refused is the recorded history the backtest must reproduce.
    """
    rng = random.Random(seed)
    for step in range(steps):
        at = start + every * step
        with time_machine.travel(at, tick=False):
            for cycle in Cycle.objects.filter(entity=entity, analysed=True, completed_at=None):
                if cycle.started_at + HOLD <= at:
                    done = cycle.started_at + HOLD
                    Cycle.objects.filter(pk=cycle.pk).update(
                        phase=Cycle.Phase.SETTLED, status=Cycle.Status.UNVALIDATED, completed_at=done, claim=None
                    )
            if hold_at is not None and at == hold_at:
                Supervision.objects.create(kind="hold", entity=entity, actor="alice", reason="a look", created_at=at)
            if hold_at is not None and at == hold_at + timedelta(hours=3):
                Supervision.objects.create(kind="release", entity=entity, actor="alice", created_at=at)
            trigger.on_landed([graded(entity, bad=rng.random() < 0.45, at=at).pk])
    # Every cycle has settled by the end, so each was held exactly HOLD (the median the backtest uses).
    end = start + every * steps + HOLD
    for cycle in Cycle.objects.filter(entity=entity, analysed=True, completed_at=None):
        Cycle.objects.filter(pk=cycle.pk).update(
            phase=Cycle.Phase.SETTLED,
            status=Cycle.Status.UNVALIDATED,
            completed_at=cycle.started_at + HOLD,
            claim=None,
        )
    return end


@pytest.fixture
def recorded():
    entity = looped(loop={"cooldownHours": 1, "maxAnalysesPerDay": 3, "trigger": {"windowRuns": 5, "minFailures": 2}})
    start = timezone.now() - timedelta(days=5)
    end = record_history(entity, steps=150, start=start, hold_at=start + timedelta(hours=40))
    entity.refresh_from_db()
    return entity, start, end


def test_the_policy_that_was_live_reproduces_the_cycles_that_really_opened(recorded):
    entity, start, end = recorded
    real = [c for c in cycles_of(entity) if c.analysed]
    assert len(real) >= 5  # the history is worth reproducing: several cycles, and each gate refused some
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=end)
    assert report["opened"] == len(real)
    assert [c["anchor"] for c in report["cycles"]] == [str(c.anchor_id) for c in real]
    repro = report["reproduction"]
    assert repro["reproduced"] is True and repro["missed"] == [] and repro["extra"] == []
    assert repro["really_refused"] == report["refusals"]
    for kind in ("live_cycle", "cooldown", "daily_cap", "hold"):
        assert report["refusals"][kind] > 0, kind
    assert report["held_for_seconds"] == HOLD.total_seconds()
    assert "the entity's" in report["held_for"]


def test_a_stricter_min_failures_opens_fewer_cycles_on_the_same_history(recorded):
    entity, start, end = recorded
    today = bt.backtest(entity, since=start - timedelta(minutes=1), now=end)
    stricter = {**entity.terms, "loop": {**entity.terms["loop"], "trigger": {"windowRuns": 5, "minFailures": 4}}}
    proposed = bt.backtest(entity, since=start - timedelta(minutes=1), now=end, terms=stricter, label="proposed")
    assert 0 < proposed["opened"] < today["opened"]
    assert "reproduction" not in proposed  # only today's policy is compared with what really happened


def test_cycles_opened_by_a_person_are_kept_as_they_happened_and_said_so():
    entity = looped(loop={"cooldownHours": 1})
    start = timezone.now() - timedelta(days=1)
    with time_machine.travel(start + timedelta(hours=1), tick=False):
        opened = trigger.analyze_now(entity)
    Cycle.objects.filter(pk=opened.cycle.pk).update(
        phase=Cycle.Phase.SETTLED, status=Cycle.Status.UNVALIDATED, completed_at=start + timedelta(hours=5), claim=None
    )
    for minute in range(0, 180, 20):  # bad runs while the requested cycle was live: refused by the live cycle
        graded(entity, bad=True, at=start + timedelta(hours=2, minutes=minute))
    report = bt.backtest(entity, since=start, now=start + timedelta(hours=6))
    # The first bad run is withheld by the count (1 of 5 bad); the eight after it meet the live cycle.
    assert report["opened"] == 0 and report["refusals"]["live_cycle"] == 8
    [kept] = report["reproduction"]["not_reproducible"]
    assert kept["cycle"] == opened.cycle.pk and "by hand" in kept["why"]


def test_with_no_settled_cycle_anywhere_a_cycle_settles_as_it_opens():
    entity = looped(
        loop={"cooldownHours": 1, "maxAnalysesPerDay": None, "trigger": {"windowRuns": 1, "minFailures": 1}}
    )
    start = timezone.now() - timedelta(hours=10)
    for hour in range(6):
        graded(entity, bad=True, at=start + timedelta(hours=hour, minutes=30))
    report = bt.backtest(entity, since=start, now=start + timedelta(hours=9))
    assert report["held_for_seconds"] == 0 and "no cycle has settled" in report["held_for"]
    assert report["opened"] == 6 and report["refused"] == 0  # an hour apart: the 1 h cooldown has passed each time


def test_the_spend_is_the_count_at_the_recorded_median_cost_per_cycle_exactly(recorded):
    entity, start, end = recorded
    for index, cycle in enumerate(c for c in cycles_of(entity) if c.analysed):
        Cycle.objects.filter(pk=cycle.pk).update(spent_usd=["0.10", "0.30", "0.20"][index % 3])
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=end)
    spend = report["spend"]
    assert spend["per_cycle_proposer_usd"] == "0.20"
    from decimal import Decimal

    assert Decimal(spend["proposer_usd"]) == Decimal("0.20") * report["opened"]
    assert isinstance(spend["total_usd"], str)


def test_the_history_is_read_in_a_fixed_number_of_queries_whatever_its_length():
    entity = looped(loop={"cooldownHours": 1})
    start = timezone.now() - timedelta(days=20)

    def queries(runs: int) -> int:
        Cycle.objects.filter(entity=entity).delete()
        for index in range(runs):
            graded(entity, bad=index % 3 == 0, at=start + timedelta(minutes=7 * index + 1))
        with CaptureQueriesContext(connection) as seen:
            bt.backtest(entity, since=start, now=start + timedelta(days=19))
        return len(seen.captured_queries)

    small = queries(40)
    assert queries(400) == small


@pytest.mark.parametrize(
    ("raw", "words"),
    [("30x", "neither a period"), ("0d", "at least 1"), ("2999-01-01", "not in the past"), ("", "neither")],
)
def test_a_bad_since_is_refused_naming_it(raw, words):
    with pytest.raises(ValueError, match="since") as refused:
        bt.parse_since(raw, now=timezone.now())
    assert words in str(refused.value)


def test_since_reads_periods_and_dates():
    now = timezone.now()
    assert bt.parse_since("30d", now=now) == now - timedelta(days=30)
    assert bt.parse_since("12h", now=now) == now - timedelta(hours=12)
    assert bt.parse_since("2w", now=now) == now - timedelta(weeks=2)
    assert bt.parse_since("2020-05-01", now=now).year == 2020


def test_run_keeps_the_report_and_writes_nothing_else(recorded):
    entity, start, end = recorded
    before = Cycle.objects.count()
    current, proposed = bt.run(entity, since=start, actor="alice", now=end)
    assert proposed is None and current.label == Backtest.Label.CURRENT and current.result["opened"] > 0
    assert Cycle.objects.count() == before and Backtest.objects.count() == 1


def record_evolve(entity, *, steps: int, start, every=timedelta(minutes=20)):
    """Land an evolve entity's graded runs one by one through the live trigger, each cycle settled HOLD later."""
    from tests.evolution.evolve_helpers import graded_at

    for step in range(steps):
        at = start + every * step
        with time_machine.travel(at, tick=False):
            for cycle in Cycle.objects.filter(entity=entity, analysed=True, completed_at=None):
                if cycle.started_at + HOLD <= at:
                    Cycle.objects.filter(pk=cycle.pk).update(
                        phase=Cycle.Phase.SETTLED,
                        status=Cycle.Status.UNVALIDATED,
                        completed_at=cycle.started_at + HOLD,
                        claim=None,
                    )
            trigger.on_landed([graded_at(entity, at, {"revenue": step % 7, "conversion": 0.5}).pk])
    for cycle in Cycle.objects.filter(entity=entity, analysed=True, completed_at=None):
        Cycle.objects.filter(pk=cycle.pk).update(
            phase=Cycle.Phase.SETTLED, status=Cycle.Status.UNVALIDATED, completed_at=cycle.started_at + HOLD, claim=None
        )
    return start + every * steps + HOLD


def test_an_evolve_entitys_cadence_is_reproduced_mark_by_mark():
    from tests.evolution.evolve_helpers import shop

    entity = shop(trigger={"windowRuns": 4}, loop={"cooldownHours": 1, "maxAnalysesPerDay": 4})
    start = timezone.now() - timedelta(days=3)
    end = record_evolve(entity, steps=120, start=start)
    real = [c for c in cycles_of(entity) if c.analysed]
    assert len(real) >= 4
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=end)
    assert report["preset"] == "evolve"
    assert [c["anchor"] for c in report["cycles"]] == [str(c.anchor_id) for c in real]
    assert report["reproduction"]["reproduced"] is True, report["reproduction"]
    slower = {**entity.terms, "loop": {**entity.terms["loop"], "trigger": {"windowRuns": 30}}}
    assert bt.backtest(entity, since=start - timedelta(minutes=1), now=end, terms=slower)["opened"] < len(real)


RULE = (
    "def should_open(window, trigger):\n"
    "    ok = len(window) == 3 and all(run['bad'] for run in window)\n"
    "    return {'open': ok, 'reason': 'three bad in a row'}\n"
)
#: window() narrows the preset's to its newest three runs.
MODULE = (
    "def window(ctx):\n"
    "    w = ctx.preset.window(ctx)\n"
    "    return {**w, 'runIds': w['runIds'][-3:], 'reason': 'the last three'}\n\n\n" + RULE
)
#: window() reads the entity's graded runs itself (in a backtest: the replayed history, newest first).
READING = (
    "def window(ctx):\n"
    "    runs = ctx.gradedRuns(limit=3)['comparable']\n"
    "    return {'from': None, 'to': ctx.now.isoformat(), 'runIds': [r['runId'] for r in runs], 'metrics': [],\n"
    "            'ready': True, 'reason': 'the last three'}\n\n\n" + RULE
)


def _module_entity(tmp_path, settings, source: str, **loop):
    from tests.grading.grading_helpers import brain_repo

    checkout, commit = brain_repo(tmp_path / "brain", {"features/triage/triage.loop.py": source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    return looped(loop_module_path="features/triage/triage.loop.py", commit=commit, loop=loop)


def test_the_entitys_own_window_and_should_open_are_asked_over_the_replayed_history(tmp_path, settings):
    from evolution.models import WaitingWindow

    entity = _module_entity(tmp_path, settings, MODULE, cooldownHours=1, maxAnalysesPerDay=3)
    start = timezone.now() - timedelta(days=4)
    end = record_history(entity, steps=120, start=start, seed=11)
    real = [c for c in cycles_of(entity) if c.analysed]
    assert len(real) >= 3
    recorded = WaitingWindow.objects.count()
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=end)
    assert [c["anchor"] for c in report["cycles"]] == [str(c.anchor_id) for c in real]
    assert report["reproduction"]["reproduced"] is True, report["reproduction"]
    assert WaitingWindow.objects.count() == recorded  # the replay records no window


def test_ctx_graded_runs_reads_the_replayed_history_through_each_landing(tmp_path, settings):
    entity = _module_entity(tmp_path, settings, READING, cooldownHours=1, maxAnalysesPerDay=None)
    start = timezone.now() - timedelta(hours=12)
    runs = [graded(entity, bad=c == "b", at=start + timedelta(hours=i)) for i, c in enumerate("bbgbbbgbbb")]
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=start + timedelta(hours=11))
    assert [c["anchor"] for c in report["cycles"]] == [str(runs[5].execution_id), str(runs[9].execution_id)]


def test_a_rule_that_hangs_is_cut_at_its_deadline_and_the_run_withheld(tmp_path, settings):
    import time

    settings.BRAIN_CODE_DEADLINE_SECS = 0.3
    entity = _module_entity(
        tmp_path, settings, "import time\n\n\ndef should_open(window, trigger):\n    time.sleep(3)\n"
    )
    start = timezone.now() - timedelta(hours=3)
    graded(entity, bad=True, at=start + timedelta(minutes=5))
    graded(entity, bad=False, at=start + timedelta(minutes=10))
    began = time.monotonic()
    report = bt.backtest(entity, since=start, now=start + timedelta(hours=1))
    assert time.monotonic() - began < 2.5  # two deadlines, never a 3 s sleep
    assert report["opened"] == 0 and report["rule_failures"] == 2 and report["refused"] == 0
    assert "should_open() did not answer within 0.3 s" in report["rule_failure"]


def test_proposals_waiting_on_a_person_hold_no_claim_and_start_no_cooldown():
    entity = looped(loop={"cooldownHours": 6, "maxAnalysesPerDay": 3})
    start = timezone.now() - timedelta(days=2)
    rng = random.Random(3)
    for step in range(120):
        at = start + timedelta(minutes=20) * step
        with time_machine.travel(at, tick=False):
            trigger.on_landed([graded(entity, bad=rng.random() < 0.5, at=at).pk])
            # Each proposal is made a minute in and waits on a person's card: the claim is let go, nothing settles.
            Cycle.objects.filter(entity=entity, analysed=True, phase=Cycle.Phase.ANALYSING).update(
                phase=Cycle.Phase.DECIDING, claim=None, proposed_at=at
            )
    real = [c for c in cycles_of(entity) if c.analysed]
    assert len(real) == 6  # the day's ceiling, twice: nothing settled, so no cooldown ever started
    report = bt.backtest(entity, since=start - timedelta(minutes=1), now=start + timedelta(days=2))
    assert "wait on a person" in report["held_for"]
    assert [c["anchor"] for c in report["cycles"]] == [str(c.anchor_id) for c in real]
    assert report["reproduction"]["reproduced"] is True and report["refusals"]["cooldown"] == 0
