"""apply_round over a real bare repository: the branch, the commit, the diff-gate status, the PR; refusals push nothing."""

from __future__ import annotations

import re

import pytest

from evolution.forges.base import DIFF_GATE
from evolution.loop import apply as apply_module
from evolution.loop import diffgate
from evolution.loop.apply import ApplyFailed, apply_round
from evolution.models import PullRequest
from singularity.brain.git import GitError, git
from tests.evolution.forge_helpers import DIGEST_PATH, ForgeBrain, edited_digest, forge_brain, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    return forge_brain(tmp_path, settings)


def _heads(fb: ForgeBrain) -> list[str]:
    out = git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=fb.brain.origin).decode()
    return sorted(out.split())


def _leftovers(settings) -> list:
    return list(settings.LOOP_WORK_DIR.iterdir()) if settings.LOOP_WORK_DIR.exists() else []


def test_an_allowed_change_lands_on_a_branch_with_diff_gate_success_and_a_pr(fb, settings):
    main = fb.branch_sha("main")
    round = make_round(
        fb.digest,
        [{"path": DIGEST_PATH, "content": edited_digest()}, {"path": "features/digest/notes.md", "content": None}],
        cited_lessons=[7, 9],
    )
    applied = apply_round(round)
    assert re.fullmatch(r"loop/digest-[0-9a-f]{8}", applied.branch)
    assert applied.base_sha == main and fb.branch_sha("main") == main
    assert fb.branch_sha(applied.branch) == applied.head_sha
    assert fb.parents(applied.head_sha) == [main]
    changed = git("diff-tree", "--no-commit-id", "--name-only", "-r", applied.head_sha, cwd=fb.brain.origin)
    assert sorted(changed.decode().split()) == [DIGEST_PATH, "features/digest/notes.md"]
    assert "Keep it under 200 words." in fb.show(applied.head_sha, DIGEST_PATH)
    message = git("log", "-1", "--format=%B", applied.head_sha, cwd=fb.brain.origin).decode()
    assert message.startswith("loop(digest): Say the digest's length out loud")
    status = {s.context: s for s in fb.forge.statuses(applied.head_sha)}[DIFF_GATE]
    assert status.state == "success" and "2 file(s), 4 of 600 lines" in status.description
    assert applied.gate["paths"] == sorted([DIGEST_PATH, "features/digest/notes.md"]) and applied.gate["lines"] == 4
    pull = PullRequest.objects.get(number=applied.pull.number)
    assert pull.state == "open" and pull.head == applied.branch and pull.base == "main"
    assert pull.base_sha == main and pull.head_sha == applied.head_sha
    assert status.updated_at <= pull.created_at
    assert pull.title == "loop(digest): Say the digest's length out loud"
    for words in (
        "Say the digest's length out loud",
        "A stated length keeps the digest short.",
        f"`{DIGEST_PATH}` (written, 2 lines changed)",
        "`features/digest/notes.md` (deleted, 2 lines changed)",
        "Lessons cited: #7, #9",
        f"http://singularity.test/evolution/cycles/{round.cycle_id}/?proposal=1",
    ):
        assert words in pull.body
    assert applied.pull.url == f"http://singularity.test/evolution/pulls/{pull.number}/"
    assert _leftovers(settings) == []


def test_a_refused_change_pushes_nothing_and_opens_no_pr(fb, settings):
    round = make_round(fb.digest, [{"path": "features/digest/digest.loop.py", "content": "CASES = [1]\n"}])
    with pytest.raises(ApplyFailed) as failed:
        apply_round(round)
    assert failed.value.paths == ["features/digest/digest.loop.py"]
    assert "a *.loop.py file" in failed.value.message
    assert _heads(fb) == ["main"] and PullRequest.objects.count() == 0
    assert _leftovers(settings) == []


def test_a_path_refused_at_parse_fails_before_any_clone(fb, settings):
    round = make_round(fb.digest, [{"path": "features/**", "content": "x"}])
    with pytest.raises(ApplyFailed, match="features/\\*\\*: a glob"):
        apply_round(round)
    assert not settings.LOOP_WORK_DIR.exists() or _leftovers(settings) == []


def test_an_oversized_change_fails_naming_the_count_bound_and_largest(fb, settings):
    round = make_round(fb.digest, [{"path": "features/digest/long.md", "content": "x\n" * 601}])
    with pytest.raises(ApplyFailed) as failed:
        apply_round(round)
    assert "601 lines (added + removed), past loop.maxChangedLines 600" in failed.value.message
    assert failed.value.paths == ["features/digest/long.md"]
    assert _heads(fb) == ["main"]


def test_a_proposal_naming_no_files_fails(fb):
    with pytest.raises(ApplyFailed, match="names no files"):
        apply_round(make_round(fb.digest, []))


def test_the_pr_is_cut_from_the_gated_commit_when_main_moves_after_the_gate(fb, monkeypatch):
    gated = fb.branch_sha("main")
    real_check = diffgate.check

    def check_then_main_moves(*args, **kwargs):
        record = real_check(*args, **kwargs)
        fb.commit_main({"tools/helper.py": "def help():\n    return 5\n"}, "A person's change meanwhile")
        return record

    monkeypatch.setattr(diffgate, "check", check_then_main_moves)
    applied = apply_round(make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}]))
    assert applied.base_sha == gated and fb.parents(applied.head_sha) == [gated]
    assert PullRequest.objects.get(number=applied.pull.number).base_sha == gated
    assert fb.branch_sha("main") != gated


def test_a_history_rewrite_that_drops_the_gated_commit_fails_the_apply(fb, monkeypatch):
    real_check = diffgate.check

    def check_then_rewrite(*args, **kwargs):
        record = real_check(*args, **kwargs)
        work = fb.brain.work.path
        git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=work)
        git("push", "--quiet", "--force", "origin", "main", cwd=work)
        return record

    monkeypatch.setattr(diffgate, "check", check_then_rewrite)
    with pytest.raises(ApplyFailed, match="no longer contains .* the commit the diff gate read"):
        apply_round(make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}]))
    assert _heads(fb) == ["main"]


def test_a_write_after_the_gate_fails_the_apply(fb, monkeypatch):
    real_check = diffgate.check

    def check_then_write(clone, *args, **kwargs):
        record = real_check(clone, *args, **kwargs)
        (clone / "features/digest/style.md").write_text("Written after the gate.\n")
        return record

    monkeypatch.setattr(diffgate, "check", check_then_write)
    with pytest.raises(ApplyFailed) as failed:
        apply_round(make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}]))
    assert failed.value.paths == ["features/digest/style.md"] and "changed after the gate" in failed.value.message
    assert _heads(fb) == ["main"]


def test_each_apply_draws_its_own_branch_and_the_pr_merges(fb):
    first = apply_round(make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}]))
    second = apply_round(make_round(fb.digest, [{"path": "features/digest/notes.md", "content": "One.\n"}]))
    assert first.branch != second.branch
    merged = fb.forge.merge_pull(first.pull.number, by="bob")
    assert fb.parents(merged.merge_sha) == [first.base_sha, first.head_sha]
    assert fb.show("main", "features/digest/style.md") == "Terse.\n"


def test_the_clone_is_removed_when_git_fails(fb, settings, monkeypatch):
    def broken_push(*args, **kwargs):
        if args[:1] == ("push",):
            raise GitError("git push: the remote hung up")
        return git(*args, **kwargs)

    monkeypatch.setattr(apply_module, "git", broken_push)
    with pytest.raises(GitError, match="remote hung up"):
        apply_round(make_round(fb.digest, [{"path": "features/digest/style.md", "content": "Terse.\n"}]))
    assert _leftovers(settings) == [] and PullRequest.objects.count() == 0
