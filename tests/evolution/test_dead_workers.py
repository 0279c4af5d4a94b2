"""A worker killed between the forge's answer and the loop's record (issue 14): the sweep finishes, one PR only.

A real process (``tests/fakes/dying_worker.py``) runs the step against the
test's database and the test's bare repository and SIGKILLs itself the
moment the local forge has opened the pull request: the PR stands, the
round or the cycle never heard of it. The step is still due in the database
(the apply's claim, the revert's poll lease); once its lease runs out the
loop's sweep hands it to a worker again, which finds the open PR of the
step's own branch and adopts it. On GitHub the same (the fake answers
``GET /pulls?head=owner:branch&state=open``): the step that opened the PR
and recorded nothing is ``apply_round`` / ``open_revert`` alone.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.core import polling
from evolution.loop import machine, recovery
from evolution.loop.apply import apply_round, round_branch
from evolution.models import Cycle, PullRequest, Replay, Round
from tests.evolution.forge_helpers import DIGEST_PATH, ForgeBrain, edited_digest, forge_brain, make_round
from tests.singularity.helpers import ROOT, manage_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    settings.LOOP_FORGE = "local"
    return forge_brain(tmp_path, settings)


def die_after_the_open(step: str, ident: int, settings) -> str:
    """Run ``step`` in a worker process that SIGKILLs itself right after the forge's open; return what it said."""
    env = manage_env(
        BRAIN_REPO=str(settings.BRAIN_REPO),
        BRAIN_BRANCH=settings.BRAIN_BRANCH,
        BRAIN_CHECKOUT=str(settings.BRAIN_CHECKOUT),
        LOOP_WORK_DIR=str(settings.LOOP_WORK_DIR),
        LOOP_FORGE="local",
        SINGULARITY_PUBLIC_URL=settings.SINGULARITY_PUBLIC_URL,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fakes.dying_worker", step, str(ident)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)  # killed, not ended
    assert "dying" in proc.stdout, proc.stdout
    return proc.stdout


def test_a_worker_killed_after_the_forge_opened_the_pr_is_finished_by_the_sweep_with_one_pr(fb, settings, monkeypatch):
    settings.LOOP_APPLY_LEASE_SECS = 600
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    die_after_the_open("apply", rnd.pk, settings)
    [pull] = PullRequest.objects.all()
    assert pull.state == PullRequest.State.OPEN and pull.head == round_branch(rnd)
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.ACCEPTED and rnd.pr_number is None  # never recorded
    assert rnd.apply_claimed_at is not None  # the dead worker's claim

    later = timezone.now() + timedelta(minutes=11)  # past the apply's lease
    handed: list[int] = []
    monkeypatch.setitem(machine.STEPS, "apply", handed.append)  # the sweep's message, kept for the worker below
    with time_machine.travel(later, tick=False):
        assert recovery.sweep() == 1
        assert handed == [rnd.pk]
        assert recovery.run_apply(rnd.pk) is not None  # what the worker runs on the sweep's message

    assert PullRequest.objects.count() == 1  # adopted, not opened again
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and rnd.pr_number == pull.number and rnd.branch == pull.head
    assert rnd.head_sha == pull.head_sha and rnd.gate["paths"] == [DIGEST_PATH]
    cycle = Cycle.objects.get(pk=rnd.cycle_id)
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and not cycle.status


def test_an_apply_retried_after_its_push_but_before_its_pr_pushes_again_and_opens_one(fb):
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    applied = apply_round(rnd)
    fb.forge.close_pull(applied.pull.number, by="test")  # only the branch is left, as after a death before the open
    PullRequest.objects.filter(number=applied.pull.number).delete()
    assert machine.apply(rnd.pk) is not None
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and PullRequest.objects.count() == 1
    assert rnd.branch == applied.branch and fb.branch_sha(rnd.branch) == rnd.head_sha


def test_an_open_pr_of_the_rounds_branch_that_carries_something_else_is_not_adopted(fb):
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    branch = round_branch(rnd)
    fb.push_branch(branch, {DIGEST_PATH: edited_digest("Someone else's words.\n")})
    fb.forge.open_pull(head=branch, base="main", title="not the loop's", body="")
    assert machine.apply(rnd.pk) is not None
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.FAILED
    assert "carries something other than the proposal" in rnd.error
    assert PullRequest.objects.count() == 1


def test_a_revert_whose_worker_died_after_the_open_is_finished_by_the_sweep_with_one_revert_pr(fb, settings):
    cycle, shipped = merged_and_regressed(fb)
    assert cycle.phase == Cycle.Phase.REVERTING and shipped.revert_pr_number is None  # the revert is due
    die_after_the_open("revert", 0, settings)
    reverts = PullRequest.objects.filter(head__startswith="loop/revert-")
    assert reverts.count() <= 1  # the local forge's row may have rolled back with the dead worker's transaction
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.REVERTING and cycle.next_poll_at > timezone.now()  # the dead worker's lease

    with time_machine.travel(cycle.next_poll_at + timedelta(seconds=1), tick=False):
        assert recovery.tick()["poll"] == 1
    shipped.refresh_from_db()
    [revert] = PullRequest.objects.filter(head__startswith="loop/revert-")
    assert shipped.revert_pr_number == revert.number and revert.state == PullRequest.State.OPEN
    assert Cycle.objects.get(pk=cycle.pk).phase == Cycle.Phase.REVERTING


def merged_and_regressed(fb: ForgeBrain) -> tuple[Cycle, Round]:
    """A change applied and merged whose cycle settled regressed with its revert due and not yet opened."""
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    applied = apply_round(rnd)
    merged = fb.forge.merge_pull(applied.pull.number, by="alice")
    Round.objects.filter(pk=rnd.pk).update(
        status=Round.Status.MERGED,
        pr_number=applied.pull.number,
        merge_sha=merged.merge_sha,
        branch=applied.branch,
        head_sha=applied.head_sha,
    )
    now = timezone.now()
    Cycle.objects.filter(pk=rnd.cycle_id).update(
        status=Cycle.Status.REGRESSED,
        phase=Cycle.Phase.REVERTING,
        reason="regressed: quality fell 0.82 -> 0.41",
        claim=fb.digest.pk,
        next_poll_at=now - polling.LEASE,
    )
    return Cycle.objects.get(pk=rnd.cycle_id), Round.objects.get(pk=rnd.pk)


# --- On GitHub: the open PR of the step's branch is asked for (GET /pulls?head=owner:branch&state=open) -----


def test_on_github_an_apply_retried_after_its_pr_opened_adopts_it(tmp_path, settings, github_on):
    from tests.evolution.github_helpers import github_brain

    gb = github_brain(tmp_path, settings, github_on)
    rnd = make_round(gb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    first = apply_round(rnd)  # the PR opened; the worker died before recording it (apply_round records nothing)
    assert machine.apply(rnd.pk) is not None  # the retried apply
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and rnd.pr_number == first.pull.number
    assert sorted(github_on._state.pulls) == [first.pull.number]  # one PR on GitHub
    opens = [r for r in github_on.requests if r.method == "POST" and r.path.endswith("/pulls")]
    assert len(opens) == 1  # the retry asked for the branch's open PR (GET /pulls?head=acme:<branch>) and opened none


def test_on_github_a_revert_retried_after_its_pr_opened_adopts_it(tmp_path, settings, github_on):
    from evolution.loop.revert import open_revert
    from tests.evolution.github_helpers import github_brain

    gb = github_brain(tmp_path, settings, github_on)
    rnd = make_round(gb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    applied = apply_round(rnd)
    merge_sha = github_on.merge(applied.pull.number)
    Round.objects.filter(pk=rnd.pk).update(
        status=Round.Status.MERGED, pr_number=applied.pull.number, merge_sha=merge_sha
    )
    Cycle.objects.filter(pk=rnd.cycle_id).update(
        status=Cycle.Status.REGRESSED, phase=Cycle.Phase.REVERTING, claim=gb.digest.pk, next_poll_at=None
    )
    rnd.refresh_from_db()
    first = open_revert(rnd)  # opened; the worker died before recording it
    assert machine.poll_due() == 1
    rnd.refresh_from_db()
    assert rnd.revert_pr_number == first.number
    assert sorted(github_on._state.pulls) == [applied.pull.number, first.number]  # the change's and one revert


def test_an_apply_that_breaks_after_the_forge_opened_its_pr_closes_it_and_fails_onto_a_retry_card(fb, monkeypatch):
    from evolution.loop import apply as applying

    real = applying.apply_round

    def opened_then_broke(round):
        real(round)
        raise RuntimeError("the database refused the record")

    monkeypatch.setattr(applying, "apply_round", opened_then_broke)
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    machine.apply(rnd.pk)
    [pull] = PullRequest.objects.all()
    assert pull.state == PullRequest.State.CLOSED  # a Retry is a new round on a new branch: none stands for nobody
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.FAILED
    assert rnd.error == (
        f"the apply failed: RuntimeError: the database refused the record; PR #{pull.number}, which it had opened, "
        "was closed"
    )
    assert Cycle.objects.get(pk=rnd.cycle_id).phase == Cycle.Phase.DECIDING


# --- Mid-check: a replay's worker died holding it ------------------------------------------------------


def test_a_replay_whose_worker_died_mid_run_is_run_again_after_its_lease_once_and_the_check_answers(
    embedded, alice, monkeypatch
):
    from evolution.loop import check
    from grading.models import Execution
    from tests.evolution.demo_helpers import drive_until_card, press, tickets, triage
    from tests.evolution.test_check_end_to_end import held_steps

    started = held_steps(monkeypatch)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    runs_before = Execution.objects.filter(loop_launched=True).count()
    dead, *rest = started
    now = timezone.now()
    assert check.take(dead, now) is not None  # a worker took it ... and was killed before it finished
    for replay_id in rest:
        machine.replay(replay_id)
    assert Cycle.objects.get(pk=cycle.pk).phase == Cycle.Phase.CHECKING  # one side never landed

    swept: list[int] = []
    monkeypatch.setitem(machine.STEPS, "replay", swept.append)
    machine.check_tick(now + check.LEASE - timedelta(seconds=1))
    assert swept == []  # its worker may still be at it
    machine.check_tick(now + check.LEASE + timedelta(seconds=1))
    assert swept == [dead]
    with time_machine.travel(now + check.LEASE + timedelta(seconds=2), tick=False):
        machine.replay(dead)
        machine.replay(dead)  # the sweep's message and a late one: it runs once
    assert Execution.objects.filter(loop_launched=True).count() == runs_before  # nothing doubled: its own row ran
    assert Replay.objects.filter(round=rnd, finished_at=None).count() == 0
    assert Cycle.objects.get(pk=cycle.pk).phase == Cycle.Phase.MERGE_WAIT


def test_the_watchs_settle_commits_the_revert_due_before_the_forge_is_asked(fb, monkeypatch):
    from django.db import connection

    from evolution.loop import revert
    from tests.evolution.test_merge_wait import regressed
    from tests.evolution.watch_helpers import pulse

    seen: list[tuple[bool, str, str]] = []
    real = revert.open_revert

    def asked(round):
        row = Cycle.objects.get(pk=round.cycle_id)
        seen.append((connection.in_atomic_block, row.phase, row.status))
        return real(round)

    monkeypatch.setattr(revert, "open_revert", asked)
    cycle, shipped = regressed(fb, pulse())
    # No transaction (and no row lock) is held across the forge's open; what a dead worker leaves is due.
    assert seen == [(False, Cycle.Phase.REVERTING, Cycle.Status.REGRESSED)]
    assert shipped.revert_pr_number is not None
