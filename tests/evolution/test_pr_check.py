"""The pre-merge check for a person's pull request on the local forge (issue 35): `manage.py loop check-pr`, the
API and the PR page's button run the cycle's check on it and answer on the PR."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from evolution import prcheck
from evolution.forges.base import VALIDATION
from evolution.forges.local import LocalForge
from evolution.models import Cycle, PullCheck, PullRequest
from grading.demo import TRIAGE_PATH
from grading.sync import sync_brain
from singularity.models import ApiToken
from tests.evolution.demo_helpers import person_commits, run
from tests.evolution.prcheck_helpers import BROKEN, FIXED, graded_history, person_opens_pr, triage_with

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_persons_pr_that_breaks_the_triage_rules_is_answered_regressed_with_its_pairs(embedded, tmp_path, alice):
    graded_history()
    number = person_opens_pr(tmp_path, "person/fewer-rules", {TRIAGE_PATH: triage_with(BROKEN)})
    api = APIClient()
    _, key = ApiToken.issue(alice, "ci", is_agent=True)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    answer = api.post("/api/loop/check-pr/", {"number": number}, format="json")
    assert answer.status_code == 200, answer.content
    checked = answer.json()
    assert checked["verdict"] == "regressed", checked["reason"]
    (entity,) = checked["entities"]
    assert entity["entity"] == "scenario:triage" and entity["verdict"] == "regressed"
    assert entity["pairs"] and {"baseline", "challenger", "label"} <= set(entity["pairs"][0])
    assert checked["requestedBy"] == "alice (agent)"
    pull = PullRequest.objects.get(number=number)
    assert pull.state == "open"  # a person's PR is never closed by the check: they decide
    assert {s.context: s.state for s in LocalForge().statuses(pull.head_sha)}[VALIDATION] == "failure"
    (comment,) = pull.comments
    assert comment["body"].startswith("**The pre-merge check: regressed**") and "| frozen input |" in comment["body"]
    assert comment["by"] == "alice (agent)"
    # The PR page shows the answer, each entity's, and the comment with the pairs.
    client = Client()
    client.force_login(alice)
    page = client.get(f"/evolution/pulls/{number}/").content.decode()
    assert 'id="pull-check"' in page and "The pre-merge check: regressed" in page and "frozen input" in page
    assert 'id="check-button"' in page
    story = client.get("/evolution/entities/scenario/triage/cycles/").content.decode()  # the entity's loop story
    assert 'id="pull-checks"' in story and f"PR #{number}</a>" in story and "regressed" in story


def test_the_api_refuses_a_number_that_is_not_one_and_a_pr_that_is_not_there(embedded, alice):
    api = APIClient()
    api.force_authenticate(alice)
    assert api.post("/api/loop/check-pr/", {"number": "twelve"}, format="json").json()["error"] == "invalid"
    missing = api.post("/api/loop/check-pr/", {"number": 99}, format="json")
    assert missing.status_code == 409 and "99" in missing.json()["detail"]


def test_a_persons_pr_that_fixes_the_rules_is_validated(embedded, tmp_path, settings):
    person_commits(settings, {TRIAGE_PATH: triage_with(BROKEN)}, tmp_path, "Someone broke the rules")
    graded_history()
    number = person_opens_pr(tmp_path, "person/fix-rules", {TRIAGE_PATH: triage_with(FIXED)})
    client = Client()
    client.force_login(User.objects.create_user("bob", password="x"))
    answer = client.post(f"/evolution/pulls/{number}/check/", follow=True)  # "Check this PR"
    assert "The pre-merge check answered validated" in answer.content.decode()
    checked = PullCheck.objects.get(number=number)
    assert checked.verdict == "validated", checked.reason
    assert checked.requested_by == "bob"
    head = PullRequest.objects.get(number=number).head_sha
    assert {s.context: s.state for s in LocalForge().statuses(head)}[VALIDATION] == "success"
    assert PullCheck.objects.get(number=number).head_sha == head


def test_the_command_checks_a_pr_changing_no_loop_entity_and_says_so(embedded, tmp_path):
    number = person_opens_pr(tmp_path, "person/readme", {"README.md": "A note.\n"})
    out = StringIO()
    call_command("loop", "check-pr", str(number), stdout=out)
    assert (
        f"PR #{number}" in out.getvalue() and "none — no entity in the loop has files this PR changes" in out.getvalue()
    )
    assert PullCheck.objects.get(number=number).entities == []
    with pytest.raises(CommandError, match="PR #99"):
        call_command("loop", "check-pr", "99")


def test_a_checked_persons_pr_merged_during_a_watch_is_named_with_its_check(embedded, alice, tmp_path):
    from tests.evolution.test_confounded_edits import _watching

    cycle, failed = _watching(embedded, alice)
    definition = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    hotfix = definition.replace("- otherwise -> general", "- password -> technical\n- otherwise -> general")
    number = person_opens_pr(tmp_path, "person/passwords", {TRIAGE_PATH: hotfix})
    checked = prcheck.check_pr(number, by="bob")
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = []  # the person merges it whatever its check said
    LocalForge().merge_pull(number, by="bob")
    sync_brain()
    run(failed[0])  # a grade lands: the watch reads the brain's history
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.reason.startswith("confounded:"), cycle.reason
    assert f"(PR #{number}, checked {checked.verdict} before its merge)" in cycle.reason
    assert cycle.confounded_by_edit["check"]["number"] == number
