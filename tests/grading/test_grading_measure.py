"""measure(run): the loop module read at the entity's commit, owed ids, replays, a module changing mid-grading."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from grading.booking import book_exempt, eval_start, on_terminal
from grading.grade import grade_now
from grading.loop_modules import RunInfo
from grading.models import Entity, Grade
from singularity.brain.modules import load_at
from tests.grading.grading_helpers import brain_repo, commit_files, make_entity, make_run

pytestmark = pytest.mark.django_db

LOOP_PATH = "features/outreach/outreach.loop.py"
MEASURE = """
import pathlib, time
SEEN = []

def measure(run):
    SEEN.append(run)
    hook = run.output.get("_hook_dir") if isinstance(run.output, dict) else None
    if hook:
        # A sync lands while this runs: say we are inside, wait until the test has moved the brain.
        pathlib.Path(hook, "inside").touch()
        for _ in range(500):
            if pathlib.Path(hook, "moved").exists():
                break
            time.sleep(0.01)
    return [{"id": key, "value": value} for key, value in (run.output or {}).items() if not key.startswith("_")]
"""
REPLIED = {"kind": "computed", "direction": "max", "unit": "share", "role": "objective", "aggregate": "mean"}
MINUTES = {"kind": "computed", "direction": "min", "unit": "minutes", "role": "guard", "floor": 120, "optional": True}


@pytest.fixture
def brain(tmp_path):
    return brain_repo(tmp_path / "brain", {LOOP_PATH: MEASURE, "features/outreach/outreach.scenario.md": "---\n---\n"})


def outreach(brain, **evaluation) -> Entity:
    checkout, commit = brain
    metrics = evaluation.pop("metrics", {"replied": REPLIED, "reply_minutes": MINUTES})
    return make_entity(
        "outreach",
        kind="pipeline",
        evaluation={"method": "none", "metrics": metrics, **evaluation},
        commit=commit,
        loop_module_path=LOOP_PATH,
    )


def grade_of(run, checkout) -> Grade:
    return grade_now(on_terminal(run), checkout=checkout)


def module(brain):
    checkout, commit = brain
    return load_at(checkout, commit, LOOP_PATH).module


def test_measure_gets_the_execution_described_never_the_grading(brain):
    checkout, _ = brain
    entity = outreach(brain)
    run = make_run(entity, output={"replied": 0.5}, input={"lead": "acme"})
    grade_of(run, checkout)
    seen = module(brain).SEEN[-1]
    # measure() runs in the sandbox: the run reaches it as a namespace of RunInfo's fields, read by attribute.
    assert vars(seen) == vars(
        SimpleNamespace(
            **asdict(
                RunInfo(
                    runKind="pipeline",
                    runId=str(run.pk),
                    targetId="outreach",
                    completedAt=run.completed_at,
                    replay=False,
                    input={"lead": "acme"},
                    output={"replied": 0.5},
                )
            )
        )
    )


def test_measured_values_land_on_the_vector_and_the_module_hash_is_pinned(brain):
    checkout, _ = brain
    grade = grade_of(make_run(outreach(brain), output={"replied": 0.5, "reply_minutes": 30}), checkout)
    assert grade.status == Grade.Status.GRADED
    assert grade.metrics["replied"] == 0.5 and grade.metrics["reply_minutes"] == 30
    assert grade.judge["loop_hash"] == hashlib.sha256(MEASURE.encode()).hexdigest()


def test_a_live_grading_missing_an_owed_id_fails_naming_it(brain):
    checkout, _ = brain
    grade = grade_of(make_run(outreach(brain), output={"reply_minutes": 30}), checkout)
    assert grade.status == Grade.Status.FAILED
    assert "did not return replied" in grade.error
    assert grade.metrics == {}


def test_an_optional_id_may_be_missing(brain):
    checkout, _ = brain
    grade = grade_of(make_run(outreach(brain), output={"replied": 1}), checkout)
    assert grade.status == Grade.Status.GRADED
    assert "reply_minutes" not in grade.metrics


def test_a_replay_may_return_fewer_ids(brain):
    checkout, _ = brain
    replay = make_run(outreach(brain), output={}, loop_launched=True)
    on_terminal(replay)
    grade = grade_now(book_exempt(replay, "check:c1"), checkout=checkout)
    assert grade.status == Grade.Status.GRADED
    assert "replied" not in grade.metrics
    assert module(brain).SEEN[-1].replay is True


def test_period_metrics_are_never_owed_by_measure(brain):
    checkout, _ = brain
    approval = {"kind": "computed", "direction": "max", "role": "guard", "scope": "period"}
    entity = outreach(brain, metrics={"replied": REPLIED, "approval_rate": approval})
    grade = grade_of(make_run(entity, output={"replied": 1, "approval_rate": 0.9}), checkout)
    assert grade.status == Grade.Status.GRADED
    assert "approval_rate" not in grade.metrics  # window()'s to produce, not measure()'s


@pytest.mark.parametrize("replay", [False, True])
def test_declared_computed_metrics_without_a_loop_module_fail_every_grading_naming_them(replay):
    entity = make_entity(
        "outreach",
        kind="pipeline",
        evaluation={"method": "none", "metrics": {"replied": REPLIED, "reply_minutes": MINUTES}},
    )
    run = make_run(entity, loop_launched=replay)
    on_terminal(run)
    grade = grade_now(book_exempt(run, "check:c1") if replay else run.grade)
    assert grade.status == Grade.Status.FAILED
    assert grade.error == "scenario:outreach: no loop module measures replied, reply_minutes"


def test_a_module_without_measure_fails_naming_the_ids(tmp_path):
    checkout, commit = brain_repo(tmp_path / "brain", {LOOP_PATH: "CASES = []\n"})
    entity = make_entity(
        "outreach",
        kind="pipeline",
        evaluation={"method": "none", "metrics": {"replied": REPLIED}},
        commit=commit,
        loop_module_path=LOOP_PATH,
    )
    grade = grade_of(make_run(entity), checkout)
    assert grade.status == Grade.Status.FAILED
    assert "has no measure()" in grade.error and "replied" in grade.error


def test_measure_raising_fails_the_grade_naming_the_module(tmp_path):
    checkout, commit = brain_repo(
        tmp_path / "brain", {LOOP_PATH: "def measure(run):\n    raise RuntimeError('db down')\n"}
    )
    entity = make_entity(
        "outreach",
        kind="pipeline",
        evaluation={"method": "none", "metrics": {"replied": REPLIED}},
        commit=commit,
        loop_module_path=LOOP_PATH,
    )
    grade = grade_of(make_run(entity), checkout)
    assert grade.status == Grade.Status.FAILED
    assert grade.error == f"{LOOP_PATH}: measure() raised RuntimeError: db down"


def test_an_edited_loop_module_is_used_by_the_next_grading_without_a_restart(brain):
    checkout, _ = brain
    entity = outreach(brain, metrics={"replied": REPLIED})
    first = grade_of(make_run(entity, output={"replied": 0.2}), checkout)
    edited = "def measure(run):\n    return [{'id': 'replied', 'value': 0.9}]\n"
    entity.commit = commit_files(checkout, {LOOP_PATH: edited})
    entity.save(update_fields=["commit"])
    second = grade_of(make_run(entity, output={"replied": 0.2}), checkout)
    assert (first.metrics["replied"], second.metrics["replied"]) == (0.2, 0.9)
    assert second.judge["loop_hash"] == hashlib.sha256(edited.encode()).hexdigest() != first.judge["loop_hash"]


@pytest.mark.django_db(transaction=True)  # the sync is another thread with its own connection: its write commits
def test_a_module_changing_while_a_run_is_graded_fails_that_attempt_and_the_retry_reads_it_again(brain, tmp_path):
    checkout, _ = brain
    entity = outreach(brain, metrics={"replied": REPLIED})
    edited = "def measure(run):\n    return [{'id': 'replied', 'value': 0.75}]\n"

    def brain_sync_lands() -> None:
        for _ in range(500):  # measure() is running in the sandbox: move the brain under it
            if (tmp_path / "inside").exists():
                break
            time.sleep(0.01)
        commit = commit_files(checkout, {LOOP_PATH: edited})
        Entity.objects.filter(pk=entity.pk).update(commit=commit)
        (tmp_path / "moved").touch()

    sync = threading.Thread(target=brain_sync_lands)
    sync.start()
    run = make_run(entity, output={"replied": 0.2, "_hook_dir": str(tmp_path)})
    grade = grade_of(run, checkout)
    sync.join()
    assert grade.status == Grade.Status.FAILED
    assert grade.error.startswith(f"loop module changed while grading: {LOOP_PATH}")

    retried = grade_now(eval_start_grade(run), checkout=checkout)
    assert retried.status == Grade.Status.GRADED
    assert retried.metrics["replied"] == 0.75
    assert retried.judge["loop_hash"] == hashlib.sha256(edited.encode()).hexdigest()


def eval_start_grade(run) -> Grade:
    """Book the retry without grading it (eval_start grades with the engine checkout; this test has its own)."""
    Grade.objects.filter(execution=run).update(status=Grade.Status.BOOKED, error="")
    return Grade.objects.get(execution=run)


def test_eval_start_reads_the_engine_brain_checkout(brain, settings):
    checkout, _ = brain
    settings.BRAIN_CHECKOUT = checkout.path
    entity = outreach(brain, metrics={"replied": REPLIED})
    run = make_run(entity, output={"replied": 0.4})
    grade = eval_start(run)
    assert grade.status == Grade.Status.GRADED and grade.metrics["replied"] == 0.4
