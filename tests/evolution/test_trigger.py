"""The repair trigger: k of n graded runs with the landed run itself bad (seed 003 "trigger"; R6.*, R7.4)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evolution.loop import machine, trigger
from evolution.models import Cycle
from evolution.presets import base, resolve
from grading.models import Grade
from tests.evolution.loop_helpers import cycles_of, graded, history, looped

pytestmark = pytest.mark.django_db


def land(grade: Grade) -> int:
    return trigger.on_landed([grade.pk])


def test_a_bad_landing_run_with_two_of_five_bad_opens_one_cycle_on_it():
    entity = looped()
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    assert land(landed) == 1
    [cycle] = cycles_of(entity)
    assert cycle.anchor_id == landed.execution_id
    assert cycle.origin == Cycle.Origin.GRADE
    assert cycle.phase == Cycle.Phase.ANALYSING and cycle.claim == entity.pk
    assert cycle.window["runIds"][-1] == str(landed.execution_id)  # oldest first, the landed run last
    assert len(cycle.window["runIds"]) == 5
    assert cycle.window["ready"] is True and cycle.window["from"] is None
    assert cycle.rounds.count() == 1


def test_a_healthy_landing_run_never_opens_whatever_the_window_holds():
    entity = looped()
    history(entity, "bbbb")
    assert land(graded(entity, bad=False)) == 0
    assert cycles_of(entity) == []


def test_one_bad_run_alone_is_withheld_by_the_count():
    entity = looped()
    history(entity, "gggg")
    assert land(graded(entity, bad=True)) == 0
    assert cycles_of(entity) == []  # a look that opens nothing leaves no row


def test_min_failures_one_analyses_the_first_failure():
    entity = looped(loop={"trigger": {"windowRuns": 5, "minFailures": 1}})
    assert land(graded(entity, bad=True)) == 1


def test_ungraded_runs_take_no_slot_in_the_window():
    entity = looped()
    history(entity, "b")
    for _ in range(6):
        graded(entity, bad=True, status=Grade.Status.FAILED)  # the judge failed: neither good nor bad
    history(entity, "ggg")
    landed = graded(entity, bad=True)
    assert land(landed) == 1
    [cycle] = cycles_of(entity)
    assert len(cycle.window["runIds"]) == 5  # five graded runs, the failed gradings left out


def test_the_loops_own_runs_never_open_a_cycle_nor_fill_the_window():
    entity = looped()
    history(entity, "b")
    replay = graded(entity, bad=True, loop_launched=True)
    assert land(replay) == 0
    history(entity, "ggg")
    landed = graded(entity, bad=True)
    land(landed)
    [cycle] = cycles_of(entity)
    assert str(replay.execution_id) not in cycle.window["runIds"]


def test_the_loop_switched_off_opens_nothing():
    entity = looped(loop={"enabled": False})
    history(entity, "bbbb")
    assert land(graded(entity, bad=True)) == 0
    assert cycles_of(entity) == []


def test_the_same_grade_delivered_twice_opens_one_cycle():
    entity = looped()
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    assert land(landed) == 1
    assert land(landed) == 0
    assert len([c for c in cycles_of(entity) if c.analysed]) == 1


def test_a_second_bad_grade_while_a_cycle_is_live_is_recorded_and_skipped():
    entity = looped()
    history(entity, "bggg")
    land(graded(entity, bad=True))
    land(graded(entity, bad=True))
    land(graded(entity, bad=True))
    live, refused = cycles_of(entity)
    assert live.claim == entity.pk
    assert refused.status == Cycle.Status.SKIPPED and not refused.analysed
    assert refused.reason.startswith(f"cycle {live.pk} is live")
    assert refused.refusals == 2  # a run of refusals of one kind is one row


def test_the_decision_costs_the_same_queries_whatever_the_history():
    small, deep = looped("small"), looped("deep")
    history(small, "g" * 5)
    history(deep, "g" * 300)
    costs = []
    for entity in (small, deep):
        landed = graded(entity, bad=True)
        with CaptureQueriesContext(connection) as queries:
            land(landed)
        costs.append(len(queries))
    assert costs[0] == costs[1]
    assert costs[0] <= 25


def test_a_loop_module_should_open_answering_a_bare_boolean_withholds_the_grade(tmp_path, settings):
    from tests.grading.grading_helpers import brain_repo

    checkout, commit = brain_repo(
        tmp_path / "brain", {"features/triage/triage.loop.py": "def should_open(window, trigger):\n    return True\n"}
    )
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path="features/triage/triage.loop.py", commit=commit)
    history(entity, "bbbb")
    assert land(graded(entity, bad=True)) == 0
    with pytest.raises(base.RuleError, match="should_open must answer"):
        resolve.ask_should_open(entity, [{"bad": True}], {"minFailures": 2})


def test_a_loop_module_should_open_replaces_the_count(tmp_path, settings):
    from tests.grading.grading_helpers import brain_repo

    source = (
        "def should_open(window, trigger):\n"
        "    recent = window[:3]\n"
        "    ok = len(recent) == 3 and all(run['bad'] for run in recent)\n"
        "    return {'open': ok, 'reason': f'{len(recent)} in a row'}\n"
    )
    checkout, commit = brain_repo(tmp_path / "brain", {"features/triage/triage.loop.py": source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path="features/triage/triage.loop.py", commit=commit)
    history(entity, "bgb")
    assert land(graded(entity, bad=True)) == 0  # 2 of 5 would open; three in a row is the rule here
    history(entity, "b")
    assert land(graded(entity, bad=True)) == 1


def _module(tmp_path, settings, source: str):
    from tests.grading.grading_helpers import brain_repo

    checkout, commit = brain_repo(tmp_path / "brain", {"features/triage/triage.loop.py": source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    return looped(loop_module_path="features/triage/triage.loop.py", commit=commit)


WAITING = (
    "def window(ctx):\n"
    "    return {'from': None, 'to': ctx.now.isoformat(), 'runIds': [], 'metrics': [], 'ready': False,\n"
    "            'reason': 'PR #16 is open and unscored', 'progress': {'have': 2, 'need': 3, 'unit': 'scored PRs'},\n"
    "            'awaitingPerson': {'what': 'score PR #16', 'url': 'https://example.org/pr/16'}}\n"
)


def test_a_window_that_waits_on_a_person_opens_nothing_and_is_recorded(tmp_path, settings):
    from evolution.models import WaitingWindow

    entity = _module(tmp_path, settings, WAITING)
    history(entity, "bbb")
    assert land(graded(entity, bad=True)) == 0
    record = WaitingWindow.objects.get(entity=entity)
    assert (record.have, record.need, record.unit) == (2, 3, "scored PRs")
    assert record.awaiting_person["what"] == "score PR #16" and record.ended_at is None


def test_a_ready_window_carrying_awaiting_person_is_a_load_error(tmp_path, settings):
    source = WAITING.replace("'ready': False", "'ready': True")
    entity = _module(tmp_path, settings, source)
    history(entity, "bbb")
    assert land(graded(entity, bad=True)) == 0  # withheld: the grade stands, the next one asks again
    from evolution.steering import cadence

    with pytest.raises(base.RuleError, match="awaitingPerson"):
        cadence.check_window(entity, {"ready": True, "awaitingPerson": {"what": "x"}, "runIds": []})


def test_a_window_naming_a_run_twice_is_refused_and_replays_are_dropped(tmp_path, settings, caplog):
    import uuid

    from grading.models import Execution

    replay_id, foreign_id = uuid.uuid4(), uuid.uuid4()
    source = (
        "def window(ctx):\n"
        "    w = ctx.preset.window(ctx)\n"
        "    if ctx.anchor and ctx.anchor['id'] == w['runIds'][-1] and len(w['runIds']) == 4:\n"
        "        return {**w, 'runIds': w['runIds'] + w['runIds'][-1:]}\n"
        f"    return {{**w, 'runIds': ['{replay_id}', '{foreign_id}'] + w['runIds']}}\n"
    )
    entity = _module(tmp_path, settings, source)

    def rekeyed(grade: Grade, new_id) -> None:  # a run the brain's window() names by an id it knows
        Execution.objects.filter(pk=grade.execution_id).update(id=new_id)
        Grade.objects.filter(pk=grade.pk).update(execution_id=new_id)

    rekeyed(graded(entity, bad=True, loop_launched=True), replay_id)  # the loop's own replay: never counted
    rekeyed(graded(looped("other"), bad=True), foreign_id)  # another entity's run: never counted
    history(entity, "ggg")
    with caplog.at_level("WARNING", logger="evolution.loop.trigger"):
        assert land(graded(entity, bad=True)) == 0  # 4 runs, the landed one named twice
    assert "window() named a run twice: a run is one vote" in caplog.text
    assert cycles_of(entity) == []
    landed = graded(entity, bad=True)
    assert land(landed) == 1  # 2 of 5 bad counting only the entity's own runs (the replay is a third bad one)
    [cycle] = cycles_of(entity)
    assert str(replay_id) not in cycle.window["runIds"] and str(foreign_id) not in cycle.window["runIds"]
    assert len(cycle.window["runIds"]) == 5 and cycle.window["runIds"][-1] == str(landed.execution_id)


def test_a_batch_decides_each_landing_on_its_own_window():
    entity = looped()
    history(entity, "gggg")
    first, second, third = (graded(entity, bad=bad) for bad in (True, True, True))
    assert trigger.on_landed([first.pk, second.pk, third.pk]) == 1
    [cycle] = [c for c in cycles_of(entity) if c.analysed]
    assert cycle.anchor_id == second.execution_id  # the first bad run alone was 1 of 5; the second made it 2
    assert cycle.window["runIds"][-1] == str(second.execution_id) and len(cycle.window["runIds"]) == 5
    [refused] = [c for c in cycles_of(entity) if not c.analysed]
    assert refused.refusals == 1 and refused.reason.startswith(f"cycle {cycle.pk} is live")


def test_a_batch_reads_its_bad_landings_windows_together():
    entities = [looped(f"e{i}") for i in range(6)]
    for entity in entities:
        history(entity, "gggb")
    for entity in entities:
        machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)  # every entity is held: bad landings are refused
    trigger.on_landed([graded(entity, bad=True).pk for entity in entities])  # the first refusals write their rows
    landed = [graded(entity, bad=True) for entity in entities]
    with CaptureQueriesContext(connection) as six:
        trigger.on_landed([g.pk for g in landed])
    landed = [graded(entity, bad=True) for entity in entities[:1]]
    with CaptureQueriesContext(connection) as one:
        trigger.on_landed([g.pk for g in landed])
    windows = [q for q in six.captured_queries if "grading_grade" in q["sql"] and "LIMIT" in q["sql"]]
    extra = len(six.captured_queries) - len(one.captured_queries)
    if connection.vendor == "postgresql":
        assert len(windows) == 1 and "LATERAL" in windows[0]["sql"]  # Postgres: one statement for six windows
        assert extra == 0  # and the batch's refusals fold in one UPDATE, however many entities
    else:
        assert extra == 5  # SQLite: one indexed window read per extra landing (the folds: one UPDATE either way)
