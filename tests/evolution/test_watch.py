"""The watch after the merge (seed 003 "How a cycle is judged", "The watch — when the evidence never arrives").

R13.2–R13.18, R13.21, R13.24, R24.9, R25.6: the count by the trigger's rule
over runs graded since the merge under the pinned judge, judge health, the
deadline, compare and should_open replacing the count, the exemption and the
frozen judge. Runs are booked and graded by the real grading code at the
instant the test travels to.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
import time_machine
from django.db import connection

from evolution.core import outcomes as verdicts
from evolution.loop import machine, watch
from evolution.models import Cycle, Round
from grading.models import Episode, Execution, Grade
from hitl.models import Notice
from singularity.brain.modules import load_at
from tests.concurrency import at_once
from tests.evolution.watch_helpers import (
    HOUR,
    NONE_JUDGE,
    OTHER_JUDGE,
    T0,
    made_grade,
    merged_pull,
    pulse,
    refreshed,
    shipped,
    tick,
    ticks,
)
from tests.grading.grading_helpers import brain_repo, commit_files, make_entity

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


# --- Opening ---------------------------------------------------------------------------


def test_the_watch_opens_at_the_merge_with_its_deadline_counted_from_it():
    cycle = shipped(pulse(watch_block={"deadlineHours": 48}), merged_at=T0)
    assert cycle.phase == Cycle.Phase.WATCHING and cycle.status == ""
    assert cycle.watch_opened_at == T0
    assert cycle.watch_deadline == T0 + 48 * HOUR
    assert cycle.watch_window["runIds"] == []
    assert cycle.watch_window["progress"] == {"have": 0, "need": 5, "unit": "graded runs"}
    assert cycle.watch_tally == "0 of 5 graded runs, 0 bad"
    assert cycle.claim == cycle.entity_id  # the entity stays owned while the change is watched


def test_the_engine_deadline_is_336_hours():
    assert shipped(pulse()).watch_deadline == T0 + 336 * HOUR


def test_the_window_and_min_failures_default_to_the_triggers_pair():
    cycle = shipped(pulse(trigger={"windowRuns": 10, "minFailures": 3}))
    assert cycle.watch_window["progress"]["need"] == 10 and cycle.watch_window["minFailures"] == 3


def test_a_declared_watch_block_sizes_the_window_itself():
    cycle = shipped(
        pulse(trigger={"windowRuns": 10, "minFailures": 3}, watch_block={"windowRuns": 4, "minFailures": 1})
    )
    assert cycle.watch_window["progress"]["need"] == 4 and cycle.watch_window["minFailures"] == 1


def test_watch_mode_none_settles_unvalidated_at_once_with_no_verdict():
    cycle = shipped(pulse(watch_block={"mode": "none"}))
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert "watch.mode is none" in cycle.reason
    assert cycle.watch_verdict is None and cycle.claim is None
    assert verdicts.strength(cycle) == "blind" and verdicts.grade(cycle) is None


# --- The count --------------------------------------------------------------------------


def test_a_full_window_with_fewer_bad_than_min_failures_validates_at_its_last_grade():
    entity = pulse()
    cycle = shipped(entity)
    grades = ticks(entity, "gbgg", start=T0 + MINUTE)
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING
    assert cycle.watch_window["progress"] == {"have": 4, "need": 5, "unit": "graded runs"}
    assert cycle.watch_tally == "4 of 5 graded runs, 1 bad"
    grades += ticks(entity, "g", start=T0 + HOUR)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.VALIDATED and cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None
    assert cycle.watch_window["runIds"] == [str(g.execution_id) for g in grades]  # oldest first
    assert cycle.watch_verdict["verdict"] == "validated"
    assert cycle.watch_verdict["perMetric"] == [] and cycle.watch_verdict["perInput"] == []
    assert cycle.watch_verdict["tally"] == "5 of 5 graded runs, 1 bad"
    assert cycle.watch_verdict["n"] == 5 and cycle.watch_verdict["bad"] == 1
    assert verdicts.strength(cycle) == "measured"  # the count counted graded runs; there was no check
    assert verdicts.grade(cycle) == ("Improvement", 5)


def test_runs_before_the_merge_and_the_loops_own_replays_are_never_counted():
    entity = pulse()
    before = [made_grade(entity, T0 - HOUR + i * MINUTE, bad=True) for i in range(3)]
    cycle = shipped(entity)
    made_grade(entity, T0 + MINUTE, bad=True, loop_launched=True)
    made_grade(entity, T0 + 2 * MINUTE, bad=True, loop_launched=True)
    grades = ticks(entity, "gggg", start=T0 + 5 * MINUTE)
    cycle = refreshed(cycle)
    assert cycle.phase == Cycle.Phase.WATCHING  # five bad grades exist, none of them the watch's
    assert cycle.watch_window["runIds"] == [str(g.execution_id) for g in grades]
    assert not {str(g.execution_id) for g in before} & set(cycle.watch_window["runIds"])
    ticks(entity, "g", start=T0 + HOUR)
    assert refreshed(cycle).status == Cycle.Status.VALIDATED


def test_grades_under_another_judge_fill_no_slot_and_are_never_bad():
    entity = pulse()
    cycle = shipped(entity)
    ticks(entity, "gggg", start=T0 + MINUTE)
    made_grade(entity, T0 + 30 * MINUTE, judge=OTHER_JUDGE, bad=True)
    made_grade(entity, T0 + 31 * MINUTE, judge=OTHER_JUDGE, bad=True)
    machine.on_grades([])  # nothing to hear
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING
    ticks(entity, "g", start=T0 + HOUR)
    cycle = refreshed(cycle)
    # 2 ungraded of 7 judged (0.29) is healthy; the window is the five runs graded under the pinned judge.
    assert cycle.status == Cycle.Status.VALIDATED
    assert cycle.watch_verdict["tally"] == "5 of 5 graded runs, 0 bad"
    assert cycle.watch_window["ungraded"] == 2


def test_a_row_recording_no_judge_is_ungraded_too():
    entity = pulse()
    cycle = shipped(entity)
    made_grade(entity, T0 + MINUTE, judge={})
    seen = watch.observe(refreshed(cycle), T0 + 2 * MINUTE)
    assert (seen.have, seen.graded, seen.ungraded) == (0, 0, 1)


def test_a_run_still_waiting_for_a_rating_is_not_counted_yet():
    entity = pulse()
    cycle = shipped(entity)
    grade = ticks(entity, "g", start=T0 + MINUTE)[0]
    Execution.objects.filter(pk=grade.execution_id).update(awaiting_rating_until=T0 + 5 * HOUR)
    assert watch.observe(refreshed(cycle), T0 + HOUR).have == 0
    assert watch.observe(cycle, T0 + 6 * HOUR).have == 1  # the card's deadline passed: the judge's number stands


def test_an_episode_that_ran_under_two_role_versions_is_in_no_window():
    role = make_entity("helpdesk", kind="role", evaluation={"method": "none"}, loop={"enabled": True})
    cycle = shipped(role)
    for mixed in (False, True):
        grade = made_grade(role, T0 + HOUR)
        Execution.objects.filter(pk=grade.execution_id).update(run_kind=Execution.RunKind.EPISODE)
        Episode.objects.create(
            execution_id=grade.execution_id, role=role, surface="dashboard", status="closed", mixed_versions=mixed
        )
    seen = watch.observe(refreshed(cycle), T0 + 2 * HOUR)
    assert (seen.have, seen.ungraded) == (1, 0)


def test_a_challenger_graded_after_the_judge_moved_fails_and_takes_no_slot(tmp_path, settings):
    module = "features/pulse/pulse.loop.py"
    checkout, first = brain_repo(tmp_path / "brain", {module: "VERSION = 1\n"})
    settings.BRAIN_CHECKOUT = checkout.path
    entity = pulse(commit=first, loop_module_path=module)
    pinned = {**NONE_JUDGE, "loop_hash": hashlib.sha256(b"VERSION = 1\n").hexdigest()}
    cycle = shipped(entity, judge=pinned)
    assert tick(entity, T0 + MINUTE, checkout=checkout).status == Grade.Status.GRADED
    second = commit_files(checkout, {module: "VERSION = 2\n"})
    entity.commit = second
    entity.save(update_fields=["commit"])
    failed = tick(entity, T0 + 10 * MINUTE, checkout=checkout)
    assert failed.status == Grade.Status.FAILED
    assert failed.error == "judge: loop module changed since the freeze"
    cycle = refreshed(cycle)
    assert cycle.phase == Cycle.Phase.WATCHING
    assert cycle.watch_window["progress"]["have"] == 1 and cycle.watch_window["ungraded"] == 1


# --- Judge health -----------------------------------------------------------------------


def test_two_ungraded_of_five_judged_settles_unvalidated_judge_unhealthy():
    entity = pulse()
    cycle = shipped(entity)
    ticks(entity, "g", start=T0 + MINUTE)
    made_grade(entity, T0 + 10 * MINUTE, status=Grade.Status.FAILED)
    ticks(entity, "g", start=T0 + 20 * MINUTE)
    made_grade(entity, T0 + 30 * MINUTE, status=Grade.Status.FAILED)
    machine.on_grades([])
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING  # 4 judged: a lone early failure decides nothing
    ticks(entity, "g", start=T0 + 40 * MINUTE)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason.startswith("judge unhealthy")
    assert "2 of 5" in cycle.reason and str(entity) in cycle.reason and "0.34" in cycle.reason
    assert cycle.watch_verdict is None  # the watch never reached a verdict
    assert not Round.objects.filter(cycle=cycle).exclude(revert_pr_number=None).exists()  # nothing reverted
    assert verdicts.strength(cycle) == "blind" and verdicts.grade(cycle) is None


def test_a_share_exactly_at_the_ceiling_is_healthy():
    entity = pulse(manifest={"evaluation": {"judge": {"maxUngradedShare": 0.4}}})
    cycle = shipped(entity)
    ticks(entity, "gg", start=T0 + MINUTE)
    made_grade(entity, T0 + 10 * MINUTE, status=Grade.Status.FAILED)
    made_grade(entity, T0 + 11 * MINUTE, status=Grade.Status.FAILED)
    ticks(entity, "g", start=T0 + 20 * MINUTE)  # 2 of 5 = 0.4, not above 0.4
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING


def test_a_verdict_is_withheld_while_the_judge_is_unhealthy():
    entity = pulse(watch_block={"windowRuns": 5, "minFailures": 1})
    cycle = shipped(entity)
    made_grade(entity, T0 + MINUTE, status=Grade.Status.FAILED)
    ticks(entity, "b", start=T0 + 10 * MINUTE)  # the count would regress here; 1 of 2 ungraded is above 0.34
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.reason.startswith("judge unhealthy")


# --- The deadline -----------------------------------------------------------------------


def test_a_window_short_at_the_deadline_settles_unvalidated_with_its_tally():
    entity = pulse(watch_block={"deadlineHours": 24})
    cycle = shipped(entity)
    ticks(entity, "gbg", start=T0 + HOUR)
    assert machine.watch_tick(T0 + 23 * HOUR) == 0
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING
    with time_machine.travel(T0 + 24 * HOUR + MINUTE, tick=False):
        assert machine.watch_tick() == 1
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason == "the watch closed short: 3 of 5 graded runs, 1 bad"
    assert cycle.watch_tally == "3 of 5 graded runs, 1 bad"
    assert cycle.watch_verdict == {
        "verdict": "unvalidated",
        "perMetric": [],
        "perInput": [],
        "reason": "the watch closed short: 3 of 5 graded runs, 1 bad",
        "tally": "3 of 5 graded runs, 1 bad",
        "comparator": "count",
        "n": 3,
        "bad": 1,
    }
    assert cycle.claim is None
    assert verdicts.strength(cycle) == "measured" and verdicts.grade(cycle) == ("Inconclusive", 3)


def test_a_window_that_saw_nothing_at_the_deadline_is_blind():
    entity = pulse(watch_block={"deadlineHours": 24})
    cycle = shipped(entity)
    assert machine.watch_tick(T0 + 25 * HOUR) == 1
    cycle = refreshed(cycle)
    assert cycle.reason == "the watch closed short: 0 of 5 graded runs, 0 bad"
    assert verdicts.strength(cycle) == "blind"


def test_a_grade_landing_after_the_deadline_closes_the_window_as_the_tick_would():
    entity = pulse(watch_block={"deadlineHours": 1})
    cycle = shipped(entity)
    ticks(entity, "gggg", start=T0 + MINUTE)
    assert tick(entity, T0 + 2 * HOUR) is None  # started past the deadline: not the watch's, not exempt
    machine.on_grades([made_grade(entity, T0 + 2 * HOUR).pk])
    cycle = refreshed(cycle)
    assert (
        cycle.status == Cycle.Status.UNVALIDATED and cycle.reason == "the watch closed short: 4 of 5 graded runs, 0 bad"
    )


# --- The exemption and the frozen judge -------------------------------------------------


def test_a_heartbeat_is_graded_whatever_its_sample_only_while_the_window_is_short():
    entity = pulse(watch_block={"windowRuns": 2, "minFailures": 2})
    assert tick(entity, T0 - HOUR) is None  # no maxPerDay, unattended: not graded
    cycle = shipped(entity)
    first = tick(entity, T0 + MINUTE)
    assert first.reason == f"exempt:watch:{cycle.pk}"
    assert Execution.objects.get(pk=first.execution_id).sampling == Execution.Sampling.EXEMPT
    tick(entity, T0 + 2 * MINUTE)
    assert refreshed(cycle).status == Cycle.Status.VALIDATED
    assert tick(entity, T0 + 3 * MINUTE) is None  # the window is full: the exemption ended


def test_the_exemption_ends_at_a_full_window_even_while_compare_keeps_watching(tmp_path, settings):
    source = "def compare(before, after, terms):\n    return None\n"
    entity, _, _ = compared(tmp_path, settings, source, watch_block={"windowRuns": 2, "minFailures": 2})
    cycle = shipped(entity, judge=judge_of(entity))
    ticks(entity, "gg", start=T0 + MINUTE)
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING and cycle.watch_window["progress"]["have"] == 2
    assert watch.exempt(Execution(entity=entity, started_at=T0 + HOUR)) is None
    assert tick(entity, T0 + HOUR) is None


def test_exempt_and_frozen_judge_answer_only_for_the_entitys_own_runs_since_the_merge():
    entity = pulse(watch_block={"deadlineHours": 24})
    cycle = shipped(entity)
    with time_machine.travel(T0 + HOUR, tick=False):
        after = made_grade(entity, T0 + HOUR)
        replay = made_grade(entity, T0 + HOUR, loop_launched=True)
        earlier = made_grade(entity, T0 - HOUR)
        assert watch.exempt(after.execution) == f"watch:{cycle.pk}"
        assert watch.frozen_judge(after) == NONE_JUDGE
        assert watch.exempt(replay.execution) is None and watch.frozen_judge(replay) is None
        assert watch.exempt(earlier.execution) is None and watch.frozen_judge(earlier) is None
    with time_machine.travel(T0 + 25 * HOUR, tick=False):  # past the deadline, even before the tick closes it
        assert watch.exempt(after.execution) is None and watch.frozen_judge(after) is None


# --- compare and should_open replace the count -----------------------------------------

LOOP_PATH = "features/pulse/pulse.loop.py"


def compared(tmp_path, settings, source: str, **pulse_fields):
    """A pulse whose loop module (at its commit, in the engine's checkout) is ``source``."""
    checkout, commit = brain_repo(tmp_path / "brain", {LOOP_PATH: source})
    settings.BRAIN_CHECKOUT = checkout.path
    entity = pulse(commit=commit, loop_module_path=LOOP_PATH, **pulse_fields)
    return entity, checkout, commit


def judge_of(entity) -> dict:
    """The judge a method-none grade of ``entity`` records: its loop module's hash."""
    from grading.loop_modules import loop_module_hash

    return {**NONE_JUDGE, "loop_hash": loop_module_hash(entity)}


COMPARE = """
SEEN = []

def compare(before, after, terms):
    SEEN.append({"before": before, "after": after, "terms": terms})
    if len(after["outcomes"]) < 3:
        return None
    return {
        "verdict": "validated",
        "perMetric": [{"id": "tool_failures", "before": 0, "after": after["vector"].get("tool_failures")}],
        "perInput": [],
        "reason": None,
    }
"""


def test_compare_replaces_the_count_and_its_record_is_stored_verbatim(tmp_path, settings):
    entity, checkout, commit = compared(tmp_path, settings, COMPARE)
    window = [made_grade(entity, T0 - HOUR + i * MINUTE, judge=judge_of(entity), bad=i == 0) for i in range(2)]
    cycle = shipped(entity, judge=judge_of(entity))
    Cycle.objects.filter(pk=cycle.pk).update(window={"runIds": [str(g.execution_id) for g in window]})
    ticks(entity, "bb", start=T0 + MINUTE)
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING  # two bad runs: the count would have regressed
    ticks(entity, "g", start=T0 + HOUR)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.VALIDATED
    assert cycle.watch_verdict == {
        "verdict": "validated",
        "perMetric": [{"id": "tool_failures", "before": 0, "after": 1}],
        "perInput": [],
        "reason": None,
    }
    seen = load_at(checkout, commit, LOOP_PATH).module.SEEN[-1]
    assert [o["runId"] for o in seen["before"]["outcomes"]] == [str(g.execution_id) for g in window]
    assert seen["before"]["vector"]["tool_failures"] == 0.5
    assert len(seen["after"]["outcomes"]) == 3 and seen["after"]["outcomes"][0]["bad"] is True
    assert seen["after"]["window"]["progress"] == {"have": 3, "need": 5, "unit": "graded runs"}
    assert seen["terms"]["loop"]["enabled"] is True
    assert verdicts.strength(cycle) == "measured"  # compare put what it measured in perMetric
    assert verdicts.grade(cycle) == ("Improvement", 3)


def test_compare_validated_with_an_empty_per_metric_reads_as_blind(tmp_path, settings):
    source = (
        'def compare(before, after, terms):\n    return {"verdict": "validated", "perMetric": [], "perInput": []}\n'
    )
    source = source.replace("    return", "    if not after['outcomes']:\n        return None\n    return")
    entity, _, _ = compared(tmp_path, settings, source)
    cycle = shipped(entity, judge=judge_of(entity))
    ticks(entity, "g", start=T0 + MINUTE)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.VALIDATED and verdicts.strength(cycle) == "blind"


def test_a_compare_that_throws_settles_unvalidated_naming_it(tmp_path, settings):
    source = 'def compare(before, after, terms):\n    if after["outcomes"]:\n        raise ValueError("boom")\n'
    entity, _, _ = compared(tmp_path, settings, source)
    cycle = shipped(entity, judge=judge_of(entity))
    ticks(entity, "g", start=T0 + MINUTE)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason == "compare raised ValueError: boom"
    assert cycle.watch_verdict is None and verdicts.strength(cycle) == "blind"


def test_a_bare_boolean_from_compare_is_a_load_error_naming_the_record_owed(tmp_path, settings):
    entity, _, _ = compared(tmp_path, settings, "def compare(before, after, terms):\n    return True\n")
    cycle = refreshed(shipped(entity, judge=judge_of(entity)))  # asked as the watch opens: settled on the spot
    assert cycle.status == Cycle.Status.UNVALIDATED
    assert "bare boolean" in cycle.reason and "{verdict, perMetric, perInput, reason}" in cycle.reason
    assert cycle.watch_verdict is None


def test_a_negative_verdict_from_compare_owes_a_reason(tmp_path, settings):
    source = (
        'def compare(before, after, terms):\n    return {"verdict": "unvalidated", "perMetric": [], "perInput": []}\n'
    )
    entity, _, _ = compared(tmp_path, settings, source)
    cycle = refreshed(shipped(entity, judge=judge_of(entity)))
    assert cycle.reason == "compare answered unvalidated with no reason; a negative verdict owes one"


def test_a_compare_that_never_answers_closes_unvalidated_at_the_deadline_with_nothing_measured(tmp_path, settings):
    entity, _, _ = compared(
        tmp_path, settings, "def compare(before, after, terms):\n    return None\n", watch_block={"deadlineHours": 24}
    )
    cycle = shipped(entity, judge=judge_of(entity))
    ticks(entity, "ggggg", start=T0 + MINUTE)
    assert tick(entity, T0 + HOUR) is None  # the window is full: no longer exempt, though compare keeps watching
    assert machine.watch_tick(T0 + 2 * HOUR) == 0  # asked again on the tick: still not yet
    assert machine.watch_tick(T0 + 24 * HOUR) == 1
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED
    assert cycle.reason == "the watch closed short: compare gave no verdict by the deadline (5 of 5 graded runs)"
    assert cycle.watch_verdict["verdict"] == "unvalidated" and cycle.watch_verdict["perMetric"] == []
    assert verdicts.strength(cycle) == "blind"


def test_a_loop_module_that_will_not_load_settles_unvalidated_naming_it(tmp_path, settings):
    entity, _, _ = compared(tmp_path, settings, "def compare(:\n")
    cycle = refreshed(shipped(entity))
    assert cycle.status == Cycle.Status.UNVALIDATED
    assert cycle.reason.startswith(f"loop module {LOOP_PATH} would not load")
    assert cycle.watch_verdict is None


SHOULD_OPEN = """
ASKED = []

def should_open(window, trigger):
    ASKED.append([run["runId"] for run in window])
    if len(window) >= 3 and all(run["bad"] for run in window[:3]):
        return {"open": True, "reason": "three bad in a row"}
    return {"open": False, "reason": "fine"}
"""


def test_a_declared_should_open_is_asked_at_each_grade_instead_of_the_count(tmp_path, settings):
    entity, checkout, commit = compared(tmp_path, settings, SHOULD_OPEN)
    cycle = shipped(entity, judge=judge_of(entity))
    grades = ticks(entity, "bgbgg", start=T0 + MINUTE)  # the count would regress at the second bad run
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.VALIDATED
    assert cycle.watch_verdict["comparator"] == "should_open" and cycle.watch_verdict["n"] == 5
    asked = load_at(checkout, commit, LOOP_PATH).module.ASKED
    ids = [str(g.execution_id) for g in grades]
    assert asked == [list(reversed(ids[:k])) for k in range(1, 6)]  # once per grade, newest first


def test_a_should_open_that_throws_settles_unvalidated_naming_it(tmp_path, settings):
    entity, _, _ = compared(tmp_path, settings, "def should_open(window, trigger):\n    return 1 / 0\n")
    cycle = shipped(entity, judge=judge_of(entity))
    ticks(entity, "g", start=T0 + MINUTE)
    cycle = refreshed(cycle)
    assert (
        cycle.status == Cycle.Status.UNVALIDATED
        and cycle.reason == "should_open raised ZeroDivisionError: division by zero"
    )


# --- Regressed: on the spot, and the revert opens ---------------------------------------


@pytest.fixture
def forge(tmp_path, settings):
    from tests.evolution.forge_helpers import forge_brain

    return forge_brain(tmp_path, settings)


def test_min_failures_bad_runs_regress_on_the_spot_and_open_the_revert(forge):
    entity = pulse()
    pull = merged_pull(forge)
    cycle = shipped(entity, merge_sha=pull.merge_sha, pr_number=pull.number)
    grades = ticks(entity, "gb", start=T0 + MINUTE)
    assert refreshed(cycle).phase == Cycle.Phase.WATCHING
    grades += ticks(entity, "b", start=T0 + HOUR)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.phase == Cycle.Phase.REVERTING  # 3 of 5: not full
    assert cycle.watch_verdict["verdict"] == "regressed" and cycle.watch_verdict["n"] == 3
    assert cycle.watch_verdict["bad"] == 2
    assert cycle.watch_window["runIds"] == [str(g.execution_id) for g in grades]
    assert cycle.claim == entity.pk  # held while the revert is followed
    shipped_round = cycle.rounds.get(number=1)
    revert = forge.forge.get_pull(shipped_round.revert_pr_number)
    assert revert.state == "open"
    assert verdicts.grade(cycle) == ("Regression", 3) and verdicts.status_label(cycle) == "Reverting"


# --- Two workers -------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_hearing_the_last_grade_settle_the_watch_once():
    if connection.vendor != "postgresql":
        pytest.skip("real parallel workers need Postgres")
    entity = pulse()
    cycle = shipped(entity)
    ticks(entity, "gggg", start=T0 + MINUTE)
    last = made_grade(entity, T0 + HOUR)
    settled = at_once(lambda: machine.on_grades([last.pk], now=T0 + HOUR))
    assert sorted(settled) == [0, 1]
    assert refreshed(cycle).status == Cycle.Status.VALIDATED
    assert Notice.objects.filter(subject=f"cycle {cycle.pk}", kind="settled").count() == 1
