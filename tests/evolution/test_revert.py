"""open_revert over a real bare repository: a revert PR that undoes the merge and carries both statuses."""

from __future__ import annotations

import re

import pytest

from evolution.forges.base import DIFF_GATE, VALIDATION, ForgeError
from evolution.loop.apply import apply_round
from evolution.loop.revert import open_revert
from evolution.models import Cycle, PullRequest, Round
from singularity.brain.git import git
from tests.evolution.forge_helpers import ForgeBrain, forge_brain, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    return forge_brain(tmp_path, settings)


def _merged_round(fb: ForgeBrain, files: list[dict]) -> Round:
    """A round applied and merged through the forge, its PR and merge recorded as the lead's code would."""
    round = make_round(fb.digest, files)
    applied = apply_round(round)
    merged = fb.forge.merge_pull(applied.pull.number, by="bob")
    Round.objects.filter(pk=round.pk).update(
        status=Round.Status.MERGED, pr_number=applied.pull.number, merge_sha=merged.merge_sha, branch=applied.branch
    )
    Cycle.objects.filter(pk=round.cycle_id).update(
        status=Cycle.Status.REGRESSED, phase=Cycle.Phase.REVERTING, reason="regressed: quality fell 0.82 -> 0.41"
    )
    round.refresh_from_db()
    round.cycle.refresh_from_db()
    return round


def test_the_revert_pr_undoes_the_merge_and_carries_both_statuses(fb, settings):
    before = fb.branch_sha("main")
    round = _merged_round(fb, [{"path": "features/digest/style.md", "content": "Terse.\n"}])
    settings.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION]
    after_merge = fb.branch_sha("main")
    pull = open_revert(round)
    assert re.fullmatch(r"loop/revert-digest-[0-9a-f]{8}", pull.head)
    assert pull.state == "open" and pull.base == "main"
    assert fb.parents(pull.head_sha) == [after_merge]
    tree = lambda sha: git("rev-parse", f"{sha}^{{tree}}", cwd=fb.brain.origin).decode().strip()  # noqa: E731
    assert tree(pull.head_sha) == tree(before)
    message = git("log", "-1", "--format=%B", pull.head_sha, cwd=fb.brain.origin).decode()
    assert f"This reverts commit {round.merge_sha}" in message
    states = {s.context: s.state for s in fb.forge.statuses(pull.head_sha)}
    assert states == {DIFF_GATE: "success", VALIDATION: "success"}
    row = PullRequest.objects.get(number=pull.number)
    assert f"cycle {round.cycle_id}" in row.title
    assert "because its watch settled regressed" in row.body
    assert "regressed: quality fell 0.82 -> 0.41" in row.body
    assert f"http://singularity.test/evolution/cycles/{round.cycle_id}/" in row.body
    merged = fb.forge.merge_pull(pull.number, by="bob")
    assert fb.show(merged.merge_sha, "features/digest/style.md") == "Be brief.\n"
    assert settings.LOOP_WORK_DIR.exists() and list(settings.LOOP_WORK_DIR.iterdir()) == []


def test_a_revert_by_policy_says_so(fb):
    round = _merged_round(fb, [{"path": "features/digest/style.md", "content": "Terse.\n"}])
    Cycle.objects.filter(pk=round.cycle_id).update(status=Cycle.Status.UNVALIDATED, reverted_by_policy=True)
    round.cycle.refresh_from_db()
    pull = open_revert(round)
    row = PullRequest.objects.get(number=pull.number)
    assert "watch.onInconclusive says revert" in row.body and "it is unproven" in row.body
    assert row.title.startswith("Revert unproven loop(digest): ")  # R13.19: the PR says unproven
    from evolution.core.outcomes import status_label
    from evolution.loop.settle import notify
    from hitl.models import Notice

    Cycle.objects.filter(pk=round.cycle_id).update(phase=Cycle.Phase.REVERTING)
    round.cycle.refresh_from_db()
    assert status_label(round.cycle) == "Reverting by policy (unproven)"
    notify(round.cycle)
    notice = Notice.objects.latest("pk")
    assert "unproven: reverted by policy" in notice.title and "regressed" not in notice.title


def test_a_conflicting_revert_is_refused_in_gits_words_and_pushes_nothing(fb):
    round = _merged_round(fb, [{"path": "features/digest/style.md", "content": "Terse.\n"}])
    fb.commit_main({"features/digest/style.md": "Terse, and then a person edited it.\n"})
    with pytest.raises(ForgeError) as refused:
        open_revert(round)
    message = str(refused.value)
    assert f"the revert of {round.merge_sha[:12]}" in message
    assert "conflicts in features/digest/style.md" in message and "git revert" in message
    heads = git("for-each-ref", "--format=%(refname:short)", "refs/heads/loop/revert-*", cwd=fb.brain.origin)
    assert heads.decode().strip() == ""
    assert PullRequest.objects.filter(head__startswith="loop/revert-").count() == 0


def test_a_round_with_no_merge_has_nothing_to_revert(fb):
    round = make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}])
    with pytest.raises(ForgeError, match="has no merge commit to revert"):
        open_revert(round)
