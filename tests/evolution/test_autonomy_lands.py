"""merge: auto lands a checked change (issue 32): on the fake GitHub and on the local forge alike.

With the seed's required statuses (diff gate and validation, and a CI that
finished while the replays ran) the PR is clean the moment the check posts
``singularity/validation: success``; GitHub refuses to arm auto-merge on a
clean PR ("Pull request is in clean status"), so the loop merges it through
the merge endpoint bound to the checked head and the configured method. A CI
still pending when the check answers leaves the PR blocked: the arm holds and
GitHub merges it once CI is green.
"""

from __future__ import annotations

import pytest

from evolution.forges.base import DIFF_GATE, VALIDATION, ForgeError
from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle, PullRequest, Round
from grading.demo import TRIAGE_PATH
from grading.sync import sync_brain
from hitl.models import Card, Notice
from tests.evolution.demo_helpers import person_commits
from tests.evolution.github_helpers import push
from tests.evolution.test_check_end_to_end import LOOP_MODULE, accept_first_card, held_steps, triage_text, with_verdict

pytestmark = [pytest.mark.django_db(transaction=True)]

CI = "ci/tests"
VALIDATED = """
def verdict(spec, pairs):
    return {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}
"""


def _files(settings) -> dict[str, str]:
    return {
        LOOP_MODULE: with_verdict(settings, VALIDATED),
        TRIAGE_PATH: triage_text(settings, "  autonomy: {decide: human, merge: auto}\n"),
    }


def _on_github_merge_auto(fake, settings, tmp_path) -> None:
    push(fake, tmp_path, "main", _files(settings), message="Merge on its own")
    sync_brain()


def _checked(alice) -> tuple[Cycle, Round]:
    cycle, rnd = accept_first_card(alice)
    assert cycle.phase == Cycle.Phase.CHECKING
    return cycle, rnd


def _replay(started: list[int]) -> None:
    for replay_id in started:
        machine.replay(replay_id)


# --- the fake GitHub -----------------------------------------------------------------------------


def test_github_ci_finished_during_the_check_the_loop_merges_the_checked_sha(
    on_github, settings, alice, tmp_path, monkeypatch
):
    on_github.protection = [DIFF_GATE, VALIDATION, CI]
    _on_github_merge_auto(on_github, settings, tmp_path)
    started = held_steps(monkeypatch)
    cycle, rnd = _checked(alice)
    assert not on_github.pull(rnd.pr_number).auto_merge
    on_github.post_status(rnd.head_sha, CI, "success")  # CI finishes while the replays run
    _replay(started)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    pull = on_github.pull(rnd.pr_number)
    assert pull.merged and pull.head_sha == rnd.checked_sha, rnd.gate_note
    merges = [r for r in on_github.requests if r.method == "PUT" and r.path.endswith(f"/pulls/{rnd.pr_number}/merge")]
    assert [m.status for m in merges] == [200]
    assert rnd.merge_gate == "auto" and rnd.gate_note == ""
    assert cycle.phase == Cycle.Phase.WATCHING and cycle.merged_at is not None
    assert not Notice.objects.filter(kind="merge-demoted").exists()
    assert not Card.objects.filter(producer="loop", status=Card.Status.PENDING, kind="merge").exists()


def test_github_ci_still_pending_the_arm_holds_and_github_merges(on_github, settings, alice, tmp_path, monkeypatch):
    on_github.protection = [DIFF_GATE, VALIDATION, CI]
    _on_github_merge_auto(on_github, settings, tmp_path)
    started = held_steps(monkeypatch)
    cycle, rnd = _checked(alice)
    _replay(started)
    rnd.refresh_from_db()
    pull = on_github.pull(rnd.pr_number)
    assert rnd.merge_gate == "auto" and pull.state == "open" and pull.auto_merge is not None
    assert not [r for r in on_github.requests if r.method == "PUT" and "/merge" in r.path]
    on_github.post_status(rnd.checked_sha, CI, "success")
    assert on_github.pull(rnd.pr_number).merged and on_github.pull(rnd.pr_number).merged_by == "singularity-bot"


# --- the local forge -----------------------------------------------------------------------------


def test_local_ci_finished_during_the_check_the_loop_merges_the_checked_sha(embedded, alice, tmp_path, monkeypatch):
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION, CI]
    person_commits(embedded, _files(embedded), tmp_path, "Merge on its own")
    started = held_steps(monkeypatch)
    cycle, rnd = _checked(alice)
    LocalForge().set_status(rnd.head_sha, CI, "success", "CI")
    _replay(started)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    pull = PullRequest.objects.get(number=rnd.pr_number)
    assert pull.state == "merged" and pull.head_sha == rnd.checked_sha, rnd.gate_note
    assert pull.merged_by == f"clean-status merge ({cycle.actor})"
    assert rnd.merge_gate == "auto" and cycle.phase == Cycle.Phase.WATCHING


def test_local_ci_still_pending_the_arm_holds_and_the_forge_merges(embedded, alice, tmp_path, monkeypatch):
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION, CI]
    person_commits(embedded, _files(embedded), tmp_path, "Merge on its own")
    started = held_steps(monkeypatch)
    cycle, rnd = _checked(alice)
    _replay(started)
    rnd.refresh_from_db()
    pull = PullRequest.objects.get(number=rnd.pr_number)
    assert rnd.merge_gate == "auto" and pull.state == "open" and pull.auto_merge["sha"] == rnd.checked_sha
    LocalForge().set_status(rnd.checked_sha, CI, "success", "CI")
    pull.refresh_from_db()
    assert pull.state == "merged" and pull.merged_by.startswith("auto-merge")
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING


def test_the_local_forge_refuses_an_arm_on_a_clean_pr_with_githubs_words(embedded, alice, tmp_path, monkeypatch):
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION, CI]
    person_commits(embedded, _files(embedded), tmp_path, "Merge on its own")
    held_steps(monkeypatch)
    _cycle, rnd = _checked(alice)
    forge = LocalForge()
    for context in (VALIDATION, CI):
        forge.set_status(rnd.head_sha, context, "success", "green")
    with pytest.raises(ForgeError, match="auto-merge unavailable: Pull request is in clean status"):
        forge.arm_auto_merge(rnd.pr_number, method="merge", sha=rnd.head_sha, by="test")
    assert PullRequest.objects.get(number=rnd.pr_number).state == "open"
    with pytest.raises(ForgeError, match="Head branch was modified"):
        forge.merge_checked(rnd.pr_number, method="merge", sha="f" * 40, by="test")
    assert forge.merge_checked(rnd.pr_number, method="merge", sha=rnd.head_sha, by="test").state == "merged"
