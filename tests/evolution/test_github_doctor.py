"""The doctor's "GitHub merge gate" against the fake GitHub (seed 003 "GitHub (GitHub merge gate)"; R12.14, R12.16, R12.24).

With no entity in the loop it passes without asking GitHub; a credential
GitHub refuses to let post a status comes first, as a fail; then the base
branch's required statuses, the plan, allow_auto_merge under merge: auto,
the arms GitHub will refuse every time, and when the webhook last delivered.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.github_doctor import NAME
from evolution.models import GitHubDelivery
from grading.doctor import run_doctor
from grading.models import Entity
from tests.evolution.github_helpers import github_brain
from tests.fakes.github import TOKEN

pytestmark = pytest.mark.django_db

AUTO = {"autonomy": {"decide": "auto", "merge": "auto"}}


def findings() -> list[tuple[str, str]]:
    return [(f.level, f.message) for f in run_doctor(only=[NAME])]


def lines(level: str | None = None) -> list[str]:
    return [message for lvl, message in findings() if level is None or lvl == level]


@pytest.fixture
def human(tmp_path, settings, github_on):
    return github_brain(tmp_path, settings, github_on)


@pytest.fixture
def auto(tmp_path, settings, github_on):
    return github_brain(tmp_path, settings, github_on, **AUTO)


def test_with_no_entity_in_the_loop_it_passes_without_asking_github(human, github_on):
    Entity.objects.update(loop_enabled=False)
    before = len(github_on.requests)
    assert findings() == [("pass", "no entity is in the loop: nothing opens a pull request for a rule to hold")]
    assert len(github_on.requests) == before


def test_under_the_local_forge_it_does_not_ask_github(human, github_on, settings):
    settings.LOOP_FORGE = "local"
    before = len(github_on.requests)
    assert [lvl for lvl, _ in findings()] == ["pass"] and len(github_on.requests) == before


def test_a_credential_github_refuses_a_status_is_the_first_finding_and_a_fail(auto, github_on):
    github_on.tokens[TOKEN] = False
    found = findings()
    level, message = found[0]
    assert level == "fail" and "GITHUB_TOKEN may not post commit statuses on acme/brain" in message
    assert (
        "Resource not accessible by personal access token" in message and "Commit statuses: Read and write" in message
    )
    assert len(found) > 1  # the other findings still follow it
    assert github_on.statuses("0" * 40) == {}  # the probe wrote nothing


def test_a_credential_that_may_post_and_a_branch_requiring_both_statuses_pass(human, github_on):
    github_on.protection = [DIFF_GATE]
    github_on.rulesets = [[VALIDATION, "ci/tests"]]
    passed = lines("pass")
    assert any("GITHUB_TOKEN may post commit statuses on acme/brain (GitHub answered 422" in m for m in passed)
    assert f"main requires {DIFF_GATE} and {VALIDATION} (branch protection, ruleset 100)" in passed
    assert lines("fail") == []


def test_a_branch_missing_a_status_is_named(human, github_on):
    github_on.protection = [VALIDATION]
    assert any(m.startswith(f"main does not require {DIFF_GATE}: anyone can merge") for m in lines("warn"))
    github_on.protection = None
    warned = lines("warn")
    assert any(f"does not require {DIFF_GATE} and {VALIDATION}" in m and "holds no auto-merge" in m for m in warned)


def test_a_branch_missing_only_the_validation_the_check_posts_is_a_warning(human, github_on):
    github_on.protection = [DIFF_GATE]
    warned = lines("warn")
    assert any(
        m.startswith(
            f"main does not require {VALIDATION}: anyone can merge a candidate the pre-merge check found worse"
        )
        and f"requiring both {DIFF_GATE} and {VALIDATION}" in m
        for m in warned
    )
    assert not any("no pre-merge check posts" in m for m in lines())


def test_a_private_repository_on_a_plan_without_branch_rules_is_named(auto, github_on):
    github_on.private, github_on.has_branch_rules_plan = True, False
    warned = lines("warn")
    assert any("is private on a plan without branch rules" in m and "GitHub Pro" in m for m in warned)


def test_auto_merge_off_under_merge_auto_warns_and_an_unseen_setting_is_a_hint(auto, github_on):
    github_on.protection = [DIFF_GATE, VALIDATION, "ci/tests"]
    github_on.allow_auto_merge = False
    assert any("does not allow auto-merge, and scenario:digest declares merge: auto" in m for m in lines("warn"))
    github_on.show_settings = False
    assert any(m.startswith("hint: GitHub does not show this credential whether") for m in lines("pass"))


def test_auto_merge_off_is_not_named_when_nobody_declares_merge_auto(human, github_on):
    github_on.allow_auto_merge = False
    assert not any("allow auto-merge" in m for m in lines())


def test_under_merge_auto_the_doctor_explains_the_clean_status_merge(auto, github_on):
    github_on.protection = [DIFF_GATE, VALIDATION]
    assert not any("Pull request is in clean status" in m for m in lines("warn"))
    hint = next(m for m in lines("pass") if m.startswith("hint: scenario:digest declares merge: auto"))
    assert "the loop merges it through GitHub bound to the checked head" in hint and "revert PRs" in hint
    github_on.rulesets = [["ci/tests"]]
    hint = next(m for m in lines("pass") if m.startswith("hint: scenario:digest declares merge: auto"))
    assert "while ci/tests still runs the arm holds and GitHub merges it" in hint
    assert not any("no pre-merge check posts" in m or "a person merges each revert" in m for m in lines())


def test_a_base_requiring_nothing_still_refuses_every_arm(auto, github_on):
    github_on.protection = None
    warned = lines("warn")
    assert any(
        "holds no auto-merge on a PR nothing gates (every merge: auto round falls to a person)" in m for m in warned
    )


def test_the_webhook_is_reported_by_when_it_last_delivered(human, github_on, settings):
    assert any("GitHub has not delivered to /github/webhook/ yet" in m for m in lines("warn"))
    GitHubDelivery.objects.create(
        delivery="d-1", event="pull_request", action="closed", outcome="woke the wait of PR #1"
    )
    assert any(m.startswith("the webhook last delivered just now (pull_request closed") for m in lines("pass"))
    settings.GITHUB_WEBHOOK_SECRET = ""
    assert any("GITHUB_WEBHOOK_SECRET is not set" in m for m in lines("warn"))


def test_manage_py_doctor_reports_the_merge_gate_and_fails_on_a_refused_credential(auto, github_on):
    github_on.protection = [DIFF_GATE, VALIDATION, "ci/tests"]
    out = io.StringIO()
    call_command("doctor", "--section", NAME, stdout=out)
    assert f"[pass] {NAME}: main requires {DIFF_GATE} and {VALIDATION}" in out.getvalue()
    github_on.tokens[TOKEN] = False
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", "--section", NAME, stdout=out)
    assert out.getvalue().splitlines()[0].startswith(f"[fail] {NAME}: GITHUB_TOKEN may not post commit statuses")
