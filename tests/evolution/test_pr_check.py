"""The pre-merge check for a person's pull request on the local forge (issue 35): `manage.py loop check-pr`, the
API and the PR page's button run the cycle's check on it and answer on the PR."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from evolution import prcheck
from evolution.forges.base import VALIDATION
from evolution.forges.local import LocalForge
from evolution.models import PullCheck, PullRequest
from grading.demo import TRIAGE_PATH
from grading.models import Grade
from singularity.brain.git import clone, git
from tests.evolution.demo_helpers import person_commits, run, tickets, triage

pytestmark = [pytest.mark.django_db(transaction=True)]

FIXED = (
    "- refund, charged twice, invoice, payment -> billing\n- crash, crashes, error, bug -> technical\n"
    "- otherwise -> general\n"
)
BROKEN = "- otherwise -> general\n"


def triage_with(rules: str) -> str:
    text = (Path(django_settings.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    head, sep, _ = text.partition("## Rules")
    return head + sep + "\n\n" + rules


def person_opens_pr(tmp_path: Path, branch: str, files: dict[str, str]) -> int:
    """A person pushes ``branch`` with ``files`` changed and opens a PR of it into main; return its number."""
    work = clone(str(Path(django_settings.VAR_DIR) / "brain.git"), tmp_path / f"pr-{branch.replace('/', '-')}")
    git("checkout", "--quiet", "-b", branch, cwd=work.path)
    for rel, text in files.items():
        (work.path / rel).write_text(text)
    git("commit", "--quiet", "-am", f"A person's change: {branch}", cwd=work.path)
    git("push", "--quiet", "origin", branch, cwd=work.path)
    return LocalForge().open_pull(head=branch, base="main", title=branch, body="").number


def graded_history(count: int = 6) -> None:
    for ticket in tickets()[:count]:
        run(ticket)
    assert Grade.objects.filter(entity=triage(), status=Grade.Status.GRADED).exists()


def test_a_persons_pr_that_breaks_the_triage_rules_is_answered_regressed_with_its_pairs(embedded, tmp_path):
    graded_history()
    number = person_opens_pr(tmp_path, "person/fewer-rules", {TRIAGE_PATH: triage_with(BROKEN)})
    checked = prcheck.check_pr(number, by="alice")
    assert checked.verdict == "regressed", checked.reason
    (entity,) = checked.entities
    assert entity["entity"] == "scenario:triage" and entity["pairs"]
    pull = PullRequest.objects.get(number=number)
    assert pull.state == "open"  # a person's PR is never closed by the check: they decide
    assert {s.context: s.state for s in LocalForge().statuses(pull.head_sha)}[VALIDATION] == "failure"
    (comment,) = pull.comments
    assert comment["body"].startswith("**The pre-merge check: regressed**") and "| frozen input |" in comment["body"]
    assert comment["by"] == "alice"


def test_a_persons_pr_that_fixes_the_rules_is_validated(embedded, tmp_path, settings):
    person_commits(settings, {TRIAGE_PATH: triage_with(BROKEN)}, tmp_path, "Someone broke the rules")
    graded_history()
    number = person_opens_pr(tmp_path, "person/fix-rules", {TRIAGE_PATH: triage_with(FIXED)})
    checked = prcheck.check_pr(number, by="bob")
    assert checked.verdict == "validated", checked.reason
    head = PullRequest.objects.get(number=number).head_sha
    assert {s.context: s.state for s in LocalForge().statuses(head)}[VALIDATION] == "success"
    assert PullCheck.objects.get(number=number).head_sha == head


def test_a_pr_changing_no_loop_entity_is_answered_so(embedded, tmp_path):
    number = person_opens_pr(tmp_path, "person/readme", {"README.md": "A note.\n"})
    checked = prcheck.check_pr(number, by="alice")
    assert checked.verdict == "none" and checked.entities == []
