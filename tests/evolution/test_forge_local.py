"""The local forge over a real bare repository: open, read, statuses, merge (with protection), close, and its pages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db.models import Max
from django.test import Client
from django.urls import reverse

from evolution.forges import get_forge
from evolution.forges import local as local_module
from evolution.forges.base import DIFF_GATE, VALIDATION, ForgeError
from evolution.forges.local import LocalForge
from evolution.models import CommitStatus, PullRequest
from singularity.brain.git import git
from tests.evolution.forge_helpers import ForgeBrain, forge_brain

pytestmark = pytest.mark.django_db


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    return forge_brain(tmp_path, settings)


def _open(fb: ForgeBrain, branch: str = "loop/digest-0000aaaa", files=None) -> tuple[int, str]:
    head = fb.push_branch(branch, files or {"features/digest/notes.md": "Line one.\nLine 2.\n"})
    info = fb.forge.open_pull(head=branch, base="main", title="Shorter notes", body="Why: brevity.")
    return info.number, head


def test_get_forge_is_the_local_forge_on_the_brain_repository(fb):
    forge = get_forge()
    assert isinstance(forge, LocalForge)
    assert forge.remote_url() == str(fb.brain.origin)
    assert forge.default_branch() == "main"


def test_open_pull_records_the_branch_and_numbers_requests_in_order(fb):
    main = fb.branch_sha("main")
    number, head = _open(fb)
    second, _ = _open(fb, "loop/digest-0000bbbb", {"features/digest/style.md": "Be briefer.\n"})
    assert (number, second) == (1, 2)
    info = fb.forge.get_pull(number)
    assert info.state == "open" and info.head == "loop/digest-0000aaaa" and info.head_sha == head
    assert info.base == "main"
    assert info.url == "http://singularity.test/evolution/pulls/1/"
    row = PullRequest.objects.get(number=1)
    assert row.base_sha == main and row.title == "Shorter notes" and row.body == "Why: brevity."


def test_open_pull_refuses_a_missing_branch_a_duplicate_and_an_empty_head(fb):
    with pytest.raises(ForgeError, match="branch 'loop/nope' is not in"):
        fb.forge.open_pull(head="loop/nope", base="main", title="t", body="")
    _open(fb)
    with pytest.raises(ForgeError, match="already open: #1"):
        fb.forge.open_pull(head="loop/digest-0000aaaa", base="main", title="again", body="")
    git("push", "--quiet", "origin", "main:refs/heads/loop/empty", cwd=fb.brain.work.path)
    with pytest.raises(ForgeError, match="has no commits that main lacks"):
        fb.forge.open_pull(head="loop/empty", base="main", title="empty", body="")
    assert PullRequest.objects.count() == 1


def test_a_number_another_opener_took_is_drawn_again(fb, monkeypatch):
    fb.push_branch("loop/a", {"features/digest/style.md": "A.\n"})
    PullRequest.objects.create(number=1, title="taken", head="x", base="main", head_sha="a" * 40, base_sha="b" * 40)
    real = PullRequest.objects.aggregate
    calls = []

    def stale(*args, **kwargs):
        calls.append(1)
        return {"top": 0} if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(PullRequest.objects, "aggregate", stale)
    info = fb.forge.open_pull(head="loop/a", base="main", title="a", body="")
    assert info.number == 2 and len(calls) == 2
    assert PullRequest.objects.aggregate(top=Max("number"))["top"] == 2


def test_set_status_keeps_the_latest_per_sha_and_context_and_refuses_unknown_states(fb):
    _, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "pending", "checking")
    fb.forge.set_status(head, DIFF_GATE, "success", "passed")
    fb.forge.set_status(head, VALIDATION, "failure", "worse")
    statuses = fb.forge.statuses(head)
    assert [(s.context, s.state, s.description) for s in statuses] == [
        (DIFF_GATE, "success", "passed"),
        (VALIDATION, "failure", "worse"),
    ]
    assert CommitStatus.objects.filter(sha=head).count() == 2
    with pytest.raises(ForgeError, match="'green' is not one of"):
        fb.forge.set_status(head, DIFF_GATE, "green", "")


def test_merge_is_refused_naming_each_required_status_not_success(fb, settings):
    settings.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION]
    number, head = _open(fb)
    fb.forge.set_status(head, VALIDATION, "failure", "the candidate is worse")
    with pytest.raises(ForgeError) as refused:
        fb.forge.merge_pull(number, by="bob")
    message = str(refused.value)
    assert f"required status {DIFF_GATE} is missing on {head[:12]}" in message
    assert f"required status {VALIDATION} is failure on {head[:12]} (the candidate is worse)" in message
    assert fb.forge.get_pull(number).state == "open"
    assert fb.branch_sha("main") == PullRequest.objects.get(number=number).base_sha


def test_merge_makes_a_merge_commit_with_two_parents_on_the_base(fb):
    main = fb.branch_sha("main")
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    info = fb.forge.merge_pull(number, by="bob")
    assert info.state == "merged" and info.merged_by == "bob" and info.merged_at is not None
    assert fb.branch_sha("main") == info.merge_sha
    assert fb.parents(info.merge_sha) == [main, head]
    subject = git("log", "-1", "--format=%B", info.merge_sha, cwd=fb.brain.origin).decode()
    assert subject.startswith("Merge pull request #1 from loop/digest-0000aaaa\n\nShorter notes")
    assert fb.show("main", "features/digest/notes.md") == "Line one.\nLine 2.\n"
    with pytest.raises(ForgeError, match="is merged, not open"):
        fb.forge.merge_pull(number, by="bob")


def test_merge_onto_a_base_that_moved_since_the_request_opened(fb):
    number, head = _open(fb)
    moved = fb.commit_main({"tools/helper.py": "def help():\n    return 2\n"})
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    info = fb.forge.merge_pull(number, by="bob")
    assert fb.parents(info.merge_sha) == [moved, head]
    assert fb.show("main", "tools/helper.py").endswith("return 2\n")


def test_a_push_race_on_the_base_is_merged_again_from_the_new_tip(fb, monkeypatch):
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    raced = []

    def racing_git(*args, **kwargs):
        if args[:1] == ("push",) and not raced:
            raced.append(fb.commit_main({"tools/helper.py": "def help():\n    return 3\n"}, "Meanwhile"))
        return git(*args, **kwargs)

    monkeypatch.setattr(local_module, "git", racing_git)
    info = fb.forge.merge_pull(number, by="bob")
    assert raced and fb.parents(info.merge_sha) == [raced[0], head]
    assert fb.show("main", "tools/helper.py").endswith("return 3\n")
    assert fb.show("main", "features/digest/notes.md") == "Line one.\nLine 2.\n"


def test_a_conflicting_merge_is_refused_naming_the_file(fb):
    number, head = _open(fb)
    fb.commit_main({"features/digest/notes.md": "Line one.\nLine two, edited by a person.\n"})
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    before = fb.branch_sha("main")
    with pytest.raises(ForgeError, match=r"conflicts with main in features/digest/notes\.md"):
        fb.forge.merge_pull(number, by="bob")
    assert fb.branch_sha("main") == before
    assert fb.forge.get_pull(number).state == "open"


def test_a_head_that_moved_is_followed_and_needs_its_own_statuses(fb):
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    work = fb.brain.work.path
    git("checkout", "--quiet", "-B", "loop/digest-0000aaaa", "origin/loop/digest-0000aaaa", cwd=work)
    (work / "features/digest/style.md").write_text("Be terse.\n")
    git("commit", "--quiet", "-am", "more", cwd=work)
    git("push", "--quiet", "origin", "loop/digest-0000aaaa", cwd=work)
    moved = git("rev-parse", "HEAD", cwd=work).decode().strip()
    assert fb.forge.get_pull(number).head_sha == moved
    with pytest.raises(ForgeError, match=f"missing on {moved[:12]}"):
        fb.forge.merge_pull(number, by="bob")
    assert "+Be terse." in fb.forge.diff(number)


def test_a_head_already_in_the_base_is_recorded_as_merged_by_that_commit(fb):
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    work = fb.brain.work.path
    git("fetch", "--quiet", "origin", cwd=work)
    git("merge", "--quiet", "--no-ff", "-m", "by hand", "origin/loop/digest-0000aaaa", cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)
    by_hand = git("rev-parse", "HEAD", cwd=work).decode().strip()
    info = fb.forge.merge_pull(number, by="bob")
    assert info.merge_sha == by_hand and fb.branch_sha("main") == by_hand


def test_close_closes_an_open_request_and_refuses_a_merged_one(fb):
    number, head = _open(fb)
    info = fb.forge.close_pull(number, by="bob")
    assert info.state == "closed" and info.closed_at is not None
    assert PullRequest.objects.get(number=number).closed_by == "bob"
    with pytest.raises(ForgeError, match="is closed, not open"):
        fb.forge.merge_pull(number, by="bob")
    other, other_head = _open(fb, "loop/digest-0000cccc", {"features/digest/style.md": "x\n"})
    fb.forge.set_status(other_head, DIFF_GATE, "success", "ok")
    fb.forge.merge_pull(other, by="bob")
    with pytest.raises(ForgeError, match="already merged"):
        fb.forge.close_pull(other, by="bob")


def test_diff_is_the_unified_diff_base_to_head(fb):
    number, _ = _open(fb)
    diff = fb.forge.diff(number)
    assert "diff --git a/features/digest/notes.md b/features/digest/notes.md" in diff
    assert "-Line two." in diff and "+Line 2." in diff


def test_an_unknown_request_is_named(fb):
    with pytest.raises(ForgeError, match="no pull request #99"):
        fb.forge.get_pull(99)


# --- The pages ---------------------------------------------------------------------------------


@pytest.fixture
def rung(monkeypatch) -> list[int]:
    calls: list[int] = []
    from evolution.loop import machine

    monkeypatch.setattr(machine, "on_pull_event", calls.append)
    return calls


def _client(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_the_list_shows_open_requests_first_with_their_statuses(fb, bob):
    first, first_head = _open(fb)
    second, _ = _open(fb, "loop/digest-0000bbbb", {"features/digest/style.md": "B.\n"})
    fb.forge.set_status(first_head, DIFF_GATE, "success", "ok")
    fb.forge.merge_pull(first, by="bob")
    page = _client(bob).get(reverse("evolution:pulls"))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index('id="pull-2"') < html.index('id="pull-1"')
    assert f"{DIFF_GATE}*: success" in html


def test_the_pages_need_a_login(fb):
    number, _ = _open(fb)
    for url in (reverse("evolution:pulls"), reverse("evolution:pull", args=[number])):
        page = _client(None).get(url)
        assert page.status_code == 302 and "/accounts/login/" in page["Location"]


def test_the_detail_shows_body_statuses_and_a_coloured_diff(fb, bob):
    number, head = _open(fb)
    fb.forge.set_status(head, VALIDATION, "pending", "replaying")
    html = _client(bob).get(reverse("evolution:pull", args=[number])).content.decode()
    assert "Shorter notes" in html and "Why: brevity." in html
    assert head[:12] in html
    assert '<span class="add">+Line 2.</span>' in html and '<span class="del">-Line two.</span>' in html
    assert f"required status {DIFF_GATE} is missing" in html
    assert 'id="merge-button"' in html and 'id="close-button"' in html


def test_merge_through_the_page_shows_the_refusal_then_merges(fb, bob, rung):
    number, head = _open(fb)
    client = _client(bob)
    page = client.post(reverse("evolution:pull-merge", args=[number]), follow=True)
    assert f"Not merged: PR #{number} cannot be merged: required status {DIFF_GATE} is missing" in page.content.decode()
    assert PullRequest.objects.get(number=number).state == "open" and rung == []
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    page = client.post(reverse("evolution:pull-merge", args=[number]), follow=True)
    row = PullRequest.objects.get(number=number)
    assert row.state == "merged" and row.merged_by == "bob"
    assert f"Merged PR #{number} as {row.merge_sha[:12]}" in page.content.decode()
    assert 'id="merge-button"' not in page.content.decode()
    assert rung == [number]


def test_merge_and_close_refuse_anonymous_and_non_staff_people(fb, charlie, rung):
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    anonymous = _client(None).post(reverse("evolution:pull-merge", args=[number]))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert _client(charlie).post(reverse("evolution:pull-merge", args=[number])).status_code == 403
    assert _client(charlie).post(reverse("evolution:pull-close", args=[number])).status_code == 403
    assert 'id="merge-button"' not in _client(charlie).get(reverse("evolution:pull", args=[number])).content.decode()
    assert PullRequest.objects.get(number=number).state == "open" and rung == []


def test_close_through_the_page(fb, bob, rung):
    number, _ = _open(fb)
    page = _client(bob).post(reverse("evolution:pull-close", args=[number]), follow=True)
    assert f"Closed PR #{number}." in page.content.decode()
    assert PullRequest.objects.get(number=number).state == "closed" and rung == [number]


def test_a_push_git_refuses_is_a_forge_refusal_and_the_request_stays_open(fb, monkeypatch):
    number, head = _open(fb)
    fb.forge.set_status(head, DIFF_GATE, "success", "ok")
    main = fb.branch_sha("main")

    def refusing_git(*args, **kwargs):
        if args[:1] == ("push",):
            raise local_module.GitError("git push: permission denied")
        return git(*args, **kwargs)

    monkeypatch.setattr(local_module, "git", refusing_git)
    with pytest.raises(ForgeError, match=f"PR #{number} cannot be merged: git push: permission denied"):
        fb.forge.merge_pull(number, by="bob")
    assert PullRequest.objects.get(number=number).state == "open" and fb.branch_sha("main") == main
