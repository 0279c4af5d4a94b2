"""Bodies within GitHub's bounds (issue 32): a PR body and a comment are cut below 65,536 characters, with a
line saying where the whole of it is (the cycle's story). The fake GitHub refuses a longer body with 422 as
GitHub does, so an uncut body would fail the apply to a Retry card.
"""

from __future__ import annotations

import pytest

from evolution.forges.base import BODY_MAX, fit
from evolution.loop import machine
from evolution.models import Cycle, Round
from tests.evolution.demo_helpers import drive_until_card, press, tickets, triage
from tests.evolution.github_helpers import GitHubBrain, github_brain


@pytest.fixture
def gb(tmp_path, settings, github_on) -> GitHubBrain:
    return github_brain(tmp_path, settings, github_on)


def test_fit_leaves_a_short_body_alone_and_cuts_a_long_one_at_a_line_with_the_link():
    assert fit("short\n", rest="http://x/story") == "short\n"
    long = "".join(f"line {i} " + "x" * 90 + "\n" for i in range(800))
    cut = fit(long, rest="http://x/story")
    assert len(cut) < BODY_MAX and cut.endswith("The whole of it: http://x/story\n")
    assert long.startswith(cut.split("\n\n… cut here")[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.no_check
def test_a_70000_character_summary_still_opens_its_pr_with_a_link_to_the_story(on_github, alice, monkeypatch):
    held: list[int] = []
    monkeypatch.setitem(machine.STEPS, "apply", held.append)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    Round.objects.filter(pk=rnd.pk).update(summary="A long account of the change. " * 2_400)  # 72,000 characters
    assert held == [rnd.pk]
    machine.apply(rnd.pk)
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and rnd.pr_number is not None
    body = on_github.pull(rnd.pr_number).body
    assert len(body) < BODY_MAX
    assert body.rstrip().endswith(f"http://dash.example{cycle.get_absolute_url()}")
    assert "cut here: GitHub takes at most 65,536 characters" in body


@pytest.mark.django_db
def test_a_comment_over_githubs_bound_is_cut_by_the_forge(gb, github_on):
    gb.push("loop/digest-c", {"features/digest/notes.md": "x\n"})
    pull = gb.forge.open_pull(head="loop/digest-c", base="main", title="t", body="b")
    gb.forge.comment(pull.number, "y" * 70_000, by="test")
    (comment,) = github_on.pull(pull.number).comments
    assert len(comment["body"]) < BODY_MAX and comment["body"].endswith(f"{gb.forge.pull_url(pull.number)}\n")


@pytest.mark.django_db(transaction=True)
@pytest.mark.no_check
def test_on_the_local_forge_a_70000_character_summary_is_cut_the_same_way(embedded, alice, monkeypatch):
    from evolution.models import PullRequest

    held: list[int] = []
    monkeypatch.setitem(machine.STEPS, "apply", held.append)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    Round.objects.filter(pk=rnd.pk).update(summary="A long account of the change. " * 2_400)
    machine.apply(rnd.pk)
    rnd.refresh_from_db()
    body = PullRequest.objects.get(number=rnd.pr_number).body
    assert len(body) < BODY_MAX and body.rstrip().endswith(f"http://dash.example{cycle.get_absolute_url()}")
