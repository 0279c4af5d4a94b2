"""The judge pin: what every grade records, when two grades compare, a cycle's frozen judge refusing a moved one."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pytest

from grading.booking import on_terminal
from grading.grade import grade_now, register_frozen_judge, unregister_frozen_judge
from grading.judge import resolve_role
from grading.methods import MethodError, resolve_method
from grading.models import Grade
from grading.pin import changed, comparable
from tests.grading.grading_helpers import brain_repo, commit_files, judge_reply, make_entity, make_run

JUDGE = {"model": "openai:gpt-5.2", "method": "default", "method_hash": "m1", "loop_hash": "l1", "role_hash": "r1"}
METHOD = "---\nname: strict\n---\n# Run Evaluation\n\nFail anything vague.\n"
ROLE = "---\nname: evaluator\ncapabilities: [read]\n---\nYou are our own evaluator.\n"
GENERAL = "---\ncapabilities: [search]\n---\nEvery role.\n"


def test_grades_by_the_same_judge_compare():
    assert comparable(JUDGE, dict(JUDGE))


@pytest.mark.parametrize("key", ["model", "method_hash", "loop_hash", "role_hash"])
def test_any_moved_fact_makes_grades_incomparable(key):
    assert not comparable(JUDGE, {**JUDGE, key: "other"})


def test_a_row_recording_no_judge_compares_to_nothing():
    assert not comparable({}, JUDGE)
    assert not comparable({}, {})


def test_a_snapshot_without_a_role_hash_matches_only_another_without_one():
    legacy = {key: value for key, value in JUDGE.items() if key != "role_hash"}
    assert comparable(legacy, dict(legacy))
    assert not comparable(legacy, JUDGE)


def test_switching_to_method_none_is_a_judge_change():
    none = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "l1", "role_hash": "none"}
    assert not comparable(JUDGE, none)
    assert changed(JUDGE, none) == ["model", "method", "evaluator role"]


@pytest.fixture
def judge(fake_gateway, settings):
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("0")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("0")
    return fake_gateway


@pytest.fixture
def brain(tmp_path):
    return brain_repo(
        tmp_path / "brain",
        {
            "constitution/Evaluation/Methods/strict.md": METHOD,
            "constitution/Agents/system/role-evaluator.md": ROLE,
            "constitution/Agents/system/role-general.md": GENERAL,
        },
    )


@pytest.mark.django_db
def test_a_judged_grade_records_model_method_and_hashes(judge, brain):
    checkout, commit = brain
    entity = make_entity(kind="pipeline", evaluation={"method": "strict", "modelRef": "openai:gpt-5.2"}, commit=commit)
    judge.script(judge_reply())
    grade = grade_now(on_terminal(make_run(entity)), checkout=checkout)
    assert grade.status == Grade.Status.GRADED
    assert grade.judge["model"] == "openai:gpt-5.2"
    assert grade.judge["method"] == "strict"
    assert grade.judge["method_hash"] == hashlib.sha256(METHOD.encode()).hexdigest()
    assert grade.judge["loop_hash"] == ""
    assert grade.judge["role_hash"] == resolve_role(entity, checkout=checkout).sha256
    system = judge.requests[0].json["messages"][0]["content"]
    assert system.startswith("You are our own evaluator.")  # the brain's role file wins over the engine's
    assert "Fail anything vague." in system


@pytest.mark.django_db
def test_a_new_grant_in_role_general_changes_the_role_hash(brain):
    checkout, commit = brain
    entity = make_entity(kind="pipeline", commit=commit)
    before = resolve_role(entity, checkout=checkout).sha256
    entity.commit = commit_files(
        checkout, {"constitution/Agents/system/role-general.md": GENERAL.replace("search", "search, write")}
    )
    granted = resolve_role(entity, checkout=checkout).sha256
    assert granted != before
    # Shared prompt fragments are not pinned.
    entity.commit = commit_files(checkout, {"constitution/Agents/system/every.md": "A shared fragment.\n"})
    assert resolve_role(entity, checkout=checkout).sha256 == granted


@pytest.mark.django_db
def test_the_engine_default_method_stands_in_when_the_brain_has_none(brain):
    checkout, commit = brain
    method = resolve_method(make_entity(kind="pipeline", commit=commit), checkout=checkout)
    assert method.path == "engine:default_method.md" and "# Run Evaluation" in method.text


@pytest.mark.django_db
def test_a_named_method_the_brain_lacks_fails_naming_the_file(brain, judge):
    checkout, commit = brain
    entity = make_entity(kind="pipeline", evaluation={"method": "lenient"}, commit=commit)
    with pytest.raises(MethodError, match="constitution/Evaluation/Methods/lenient.md"):
        resolve_method(entity, checkout=checkout)
    grade = grade_now(on_terminal(make_run(entity)), checkout=checkout)
    assert grade.status == Grade.Status.FAILED and "lenient.md" in grade.error
    assert judge.requests == []


@pytest.mark.django_db
def test_a_cycle_grade_refuses_a_method_changed_since_the_freeze(judge, brain):
    checkout, commit = brain
    entity = make_entity(kind="pipeline", evaluation={"method": "strict", "modelRef": "openai:gpt-5.2"}, commit=commit)
    judge.script(judge_reply())
    frozen = grade_now(on_terminal(make_run(entity)), checkout=checkout).judge

    entity.commit = commit_files(checkout, {"constitution/Evaluation/Methods/strict.md": METHOD + "Be harsher.\n"})
    entity.save(update_fields=["commit"])
    replay = make_run(entity)

    def cycle_freeze(grade: Grade) -> dict | None:
        return frozen if grade.execution_id == replay.pk else None

    register_frozen_judge(cycle_freeze)
    try:
        grade = grade_now(on_terminal(replay), checkout=checkout)
    finally:
        unregister_frozen_judge(cycle_freeze)
    assert grade.status == Grade.Status.FAILED
    assert grade.error == "judge: method changed since the freeze"
    assert len(judge.requests) == 1  # nothing was asked of the judge the second time


@pytest.mark.django_db
def test_a_cycle_grade_dispatches_under_the_frozen_model_not_the_current_ref(judge, brain):
    checkout, commit = brain
    entity = make_entity(kind="pipeline", evaluation={"method": "strict", "modelRef": "broken-ref"}, commit=commit)
    frozen = {**resolve_frozen(entity, checkout), "model": "openai:gpt-5.2"}
    run = make_run(entity)

    def cycle_freeze(grade: Grade) -> dict | None:
        return frozen if grade.execution_id == run.pk else None

    judge.script(judge_reply())
    register_frozen_judge(cycle_freeze)
    try:
        grade = grade_now(on_terminal(run), checkout=checkout)
    finally:
        unregister_frozen_judge(cycle_freeze)
    assert grade.status == Grade.Status.GRADED
    assert judge.requests[0].json["model"] == "openai:gpt-5.2"
    assert comparable(grade.judge, frozen)


def resolve_frozen(entity, checkout) -> dict:
    method = resolve_method(entity, checkout=checkout)
    return {
        "method": method.name,
        "method_hash": method.sha256,
        "loop_hash": "",
        "role_hash": resolve_role(entity, checkout=checkout).sha256,
    }
