"""A brain's own code that hangs: each function answers within its deadline or fails, named (issue 14).

The brain modules here sleep far past a short deadline (``BRAIN_CODE_DEADLINE_SECS``
0.3 s); each call site goes on at the deadline with the function's own
error: measure() fails the grading, window() and should_open() withhold the
trigger, compare() settles the watch unvalidated, a proposer pipeline fails
its round. None waits for the sleep.
"""

from __future__ import annotations

import time

import pytest

from evolution.loop import trigger
from evolution.loop.proposer import ProposalFailed, propose
from evolution.models import Cycle
from grading.booking import on_terminal
from grading.grade import grade_now
from grading.models import Execution, Grade
from tests.evolution.loop_helpers import cycles_of, graded, history, looped
from tests.evolution.test_proposer import brief, cycle_and_round, pipeline_brain
from tests.evolution.watch_helpers import NONE_JUDGE, T0, pulse, refreshed, shipped, ticks
from tests.grading.grading_helpers import brain_repo, make_entity, make_run

pytestmark = pytest.mark.django_db

SLEEP = "import time\n\n\ndef {name}({args}):\n    time.sleep(3)\n"
MINUTE_AFTER = T0.replace(minute=1)


@pytest.fixture(autouse=True)
def short_deadline(settings):
    settings.BRAIN_CODE_DEADLINE_SECS = 0.3
    settings.LOOP_PIPELINE_DEADLINE_SECS = 0.3


def quick(started: float) -> bool:
    return time.monotonic() - started < 2.5  # the deadline, never the 3 s sleep


def test_a_measure_that_hangs_fails_that_grading_naming_the_file_and_the_function(tmp_path):
    path = "features/outreach/outreach.loop.py"
    checkout, commit = brain_repo(tmp_path / "brain", {path: SLEEP.format(name="measure", args="run")})
    metric = {"kind": "computed", "direction": "max", "role": "objective", "aggregate": "mean"}
    entity = make_entity(
        "outreach",
        kind="pipeline",
        evaluation={"method": "none", "metrics": {"replied": metric}},
        commit=commit,
        loop_module_path=path,
    )
    started = time.monotonic()
    grade = grade_now(on_terminal(make_run(entity, output={})), checkout=checkout)
    assert quick(started)
    assert grade.status == Grade.Status.FAILED
    assert grade.error == f"{path}: measure() did not answer within 0.3 s"


@pytest.mark.parametrize(("name", "args"), [("window", "ctx"), ("should_open", "window, trigger")])
def test_a_trigger_function_that_hangs_withholds_the_landing_and_the_grade_stands(tmp_path, settings, name, args):
    path = "features/triage/triage.loop.py"
    checkout, commit = brain_repo(tmp_path / "brain", {path: SLEEP.format(name=name, args=args)})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    entity = looped(loop_module_path=path, commit=commit)
    history(entity, "bbb")
    landed = graded(entity, bad=True)
    started = time.monotonic()
    assert trigger.on_landed([landed.pk]) == 0
    assert quick(started)
    assert cycles_of(entity) == []
    assert Grade.objects.get(pk=landed.pk).status == Grade.Status.GRADED


def test_a_compare_that_hangs_settles_the_watch_unvalidated_naming_it(tmp_path, settings):
    path = "features/pulse/pulse.loop.py"
    source = "import time\n\n\ndef compare(before, after, terms):\n    if after['outcomes']:\n        time.sleep(3)\n"
    checkout, commit = brain_repo(tmp_path / "brain", {path: source})
    settings.BRAIN_CHECKOUT = checkout.path
    entity = pulse(commit=commit, loop_module_path=path)
    from grading.loop_modules import loop_module_hash

    judge = {**NONE_JUDGE, "loop_hash": loop_module_hash(entity)}
    cycle = shipped(entity, judge=judge)
    started = time.monotonic()
    ticks(entity, "g", start=MINUTE_AFTER)
    assert quick(started)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason == f"{path}: compare() did not answer within 0.3 s"


def test_a_proposer_pipeline_that_hangs_fails_its_round_and_its_run_naming_the_deadline(tmp_path):
    checkout, writer = pipeline_brain(tmp_path, SLEEP.format(name="run", args="ctx, brief"))
    cycle, rnd = cycle_and_round(looped(loop={"proposer": {"pipeline": "writer"}}))
    started = time.monotonic()
    with pytest.raises(ProposalFailed) as failed:
        propose(cycle, rnd, brief(), checkout=checkout)
    assert quick(started)
    sentence = "features/writer/writer.pipeline.py: run() did not answer within 0.3 s"
    assert str(failed.value).startswith(f"pipeline:writer: {sentence}")
    execution = Execution.objects.get(entity=writer)
    assert execution.status == Execution.Status.FAILED and execution.error == sentence
