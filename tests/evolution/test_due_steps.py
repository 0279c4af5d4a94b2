"""The due-step sweep (issue 14): an accepted round whose apply message was lost, or whose worker died, is applied.

The step is due in the database (the round accepted, the cycle applying);
the tick's sweep hands it to a worker again two ticks after the Accept, then
every five minutes while nobody takes it; the worker's claim makes a second
delivery do nothing, and a claim older than the lease is taken again. The
needs-you list names a step due for longer than a few ticks. Time travels;
the apply is the real one against the local forge.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.core import due
from evolution.forges.local import LocalForge
from evolution.loop import recovery
from evolution.models import Cycle, Round
from evolution.steering import needs_you
from tests.evolution.forge_helpers import DIGEST_PATH, edited_digest, forge_brain, make_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def accepted(tmp_path, settings):
    fb = forge_brain(tmp_path, settings)
    return make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])


def sent(callbacks) -> int:
    """How many hand-overs the sweep asked for (the machine starts each after commit)."""
    return len(callbacks)


def sweep_at(when, django_capture_on_commit_callbacks) -> int:
    with time_machine.travel(when, tick=False), django_capture_on_commit_callbacks() as callbacks:
        handed = recovery.sweep()
    assert handed == sent(callbacks)
    return handed


def test_a_lost_apply_is_handed_over_two_ticks_after_the_accept_then_every_five_minutes(
    accepted, django_capture_on_commit_callbacks
):
    start = accepted.cycle.moved_at
    assert (
        sweep_at(start + timedelta(seconds=30), django_capture_on_commit_callbacks) == 0
    )  # its message may be on its way
    assert sweep_at(start + timedelta(seconds=61), django_capture_on_commit_callbacks) == 1
    assert sweep_at(start + timedelta(seconds=91), django_capture_on_commit_callbacks) == 0  # not again at once
    assert sweep_at(start + timedelta(minutes=7), django_capture_on_commit_callbacks) == 1


def test_the_worker_applies_what_the_sweep_handed_over_once_however_often_it_is_delivered(accepted):
    assert recovery.run_apply(accepted.pk) is not None
    assert recovery.run_apply(accepted.pk) is None  # a second delivery: the round is applied, nothing to do
    accepted.refresh_from_db()
    assert accepted.status == Round.Status.APPLIED and accepted.pr_number
    assert len(LocalForge().list_pulls()) == 1
    assert Cycle.objects.get(pk=accepted.cycle_id).phase != Cycle.Phase.APPLYING


def test_an_apply_a_live_worker_holds_is_left_to_it_and_taken_again_after_the_lease(
    accepted, settings, django_capture_on_commit_callbacks
):
    settings.LOOP_APPLY_LEASE_SECS = 600
    start = accepted.cycle.moved_at
    with time_machine.travel(start + timedelta(seconds=5), tick=False):
        assert due.claim_apply(accepted.pk, timezone.now())  # a worker took it ... and died
        assert not due.claim_apply(accepted.pk, timezone.now())  # a second delivery: held
    assert sweep_at(start + timedelta(minutes=5), django_capture_on_commit_callbacks) == 0
    assert sweep_at(start + timedelta(minutes=11), django_capture_on_commit_callbacks) == 1
    with time_machine.travel(start + timedelta(minutes=11), tick=False):
        assert recovery.run_apply(accepted.pk) is not None
    accepted.refresh_from_db()
    assert accepted.status == Round.Status.APPLIED


def test_nothing_applied_or_ended_is_ever_handed_over(accepted, django_capture_on_commit_callbacks):
    Cycle.objects.filter(pk=accepted.cycle_id).update(status=Cycle.Status.SKIPPED, phase=Cycle.Phase.SETTLED)
    assert sweep_at(timezone.now() + timedelta(hours=1), django_capture_on_commit_callbacks) == 0
    assert recovery.run_apply(accepted.pk) is None


def test_an_apply_due_for_longer_than_a_few_ticks_needs_a_person_and_says_why(accepted):
    start = accepted.cycle.moved_at
    with time_machine.travel(start + timedelta(minutes=4), tick=False):
        assert [i for i in needs_you.items() if i["gate"] == "stuck"] == []
    with time_machine.travel(start + timedelta(minutes=6), tick=False):
        [item] = [i for i in needs_you.items() if i["gate"] == "stuck"]
    assert item["cycleId"] == accepted.cycle_id and item["round"] == 1 and item["targetId"] == "digest"
    assert item["since"] == start
    assert f"the accepted change of cycle {accepted.cycle_id} · r1 has waited 6 min for a worker" == item["clause"]
    assert "worker and its message broker are running" in item["next"]
    with time_machine.travel(start + timedelta(minutes=6), tick=False):
        due.claim_apply(accepted.pk, timezone.now())  # a worker has it now: not stuck
        assert [i for i in needs_you.items() if i["gate"] == "stuck"] == []


# --- One table: every phase has a sweep ------------------------------------------------------------


def test_every_phase_a_live_cycle_can_be_in_has_a_sweep_that_picks_up_its_due_step():
    from singularity.schedule import BEAT_SCHEDULE

    live = {phase for phase in Cycle.Phase.values if phase != Cycle.Phase.SETTLED}
    assert set(recovery.BY_PHASE) == live  # a new phase without a sweep fails here
    for phase, sweeps in recovery.BY_PHASE.items():
        assert sweeps, phase
        for name in sweeps:
            assert name in recovery.SWEEPS or name in recovery.ELSEWHERE, (phase, name)
    assert all(entry in BEAT_SCHEDULE for entry in recovery.ELSEWHERE.values())
    assert BEAT_SCHEDULE["loop-tick"]["task"] == "evolution.tasks.tick"


def test_the_tick_runs_every_sweep_and_one_that_breaks_stops_none_of_the_others(monkeypatch, caplog):
    ran: list[str] = []

    def broken(now):
        raise RuntimeError("a bug in one sweep")

    sweeps = {name: (lambda now, name=name: ran.append(name) or 0) for name in recovery.SWEEPS}
    sweeps["check"] = broken
    monkeypatch.setattr(recovery, "SWEEPS", sweeps)
    done = recovery.tick()
    assert ran == [name for name in sweeps if name != "check"]
    assert done["check"] is None and "the check sweep failed" in caplog.text


def test_a_poll_a_check_a_watch_or_a_revert_due_for_longer_than_a_few_ticks_is_listed_as_stuck(accepted):
    from evolution.core.due import stuck_step

    now = timezone.now()
    cycle = accepted.cycle
    accepted.status, accepted.pr_number = Round.Status.APPLIED, 7
    cycle.phase, cycle.next_poll_at = Cycle.Phase.MERGE_WAIT, now - timedelta(minutes=6)
    assert stuck_step(cycle, accepted, now) == ("the merge wait of PR #7", now - timedelta(minutes=6))
    cycle.next_poll_at = now + timedelta(minutes=9)  # a worker holds the poll's lease
    assert stuck_step(cycle, accepted, now) is None
    cycle.phase, cycle.check_deadline = Cycle.Phase.CHECKING, now - timedelta(minutes=8)
    assert stuck_step(cycle, accepted, now) == ("the pre-merge check of PR #7", now - timedelta(minutes=8))
    accepted.merge_sha = "m" * 40
    cycle.phase, cycle.watch_deadline = Cycle.Phase.WATCHING, now - timedelta(minutes=2)
    assert stuck_step(cycle, accepted, now) is None  # only two minutes: a tick may yet come
    cycle.watch_deadline = now - timedelta(hours=1)
    assert stuck_step(cycle, accepted, now) == ("the watch's closing read", now - timedelta(hours=1))
    cycle.status, cycle.phase, cycle.next_poll_at = Cycle.Status.REGRESSED, Cycle.Phase.REVERTING, None
    cycle.moved_at = now - timedelta(minutes=20)
    assert stuck_step(cycle, accepted, now) == ("the revert", now - timedelta(minutes=20))  # due, never opened
    accepted.revert_outcome = "merged"
    assert stuck_step(cycle, accepted, now) is None


# --- The analysis: lost, or its worker dead ---------------------------------------------------------


@pytest.fixture
def analysing(tmp_path, settings):
    fb = forge_brain(tmp_path, settings)
    rnd = make_round(fb.digest, [])
    Round.objects.filter(pk=rnd.pk).update(status=Round.Status.ANALYSING)
    Cycle.objects.filter(pk=rnd.cycle_id).update(phase=Cycle.Phase.ANALYSING)
    rnd.refresh_from_db()
    return rnd


def test_an_analysis_whose_message_was_lost_is_sent_again_after_half_an_hour(
    analysing, django_capture_on_commit_callbacks
):
    from evolution.loop import machine

    start = analysing.cycle.moved_at
    for minutes, handed in ((29, 0), (31, 1)):
        with time_machine.travel(start + timedelta(minutes=minutes), tick=False):
            with django_capture_on_commit_callbacks() as callbacks:
                assert machine.sweep_lost() == 0  # nothing failed: it was never started
            assert len(callbacks) == handed
    analysing.refresh_from_db()
    assert analysing.status == Round.Status.ANALYSING


def test_an_analysis_whose_worker_died_fails_onto_a_retry_card(analysing):
    from evolution.loop import machine, proposer
    from hitl.models import Card

    start = analysing.cycle.moved_at
    assert proposer.claim(analysing.pk, start) is not None  # a worker took it ... and died
    with time_machine.travel(start + timedelta(seconds=50), tick=False):
        assert machine.sweep_lost() == 0  # its heartbeat is not two ticks old yet
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        assert machine.sweep_lost() == 1  # issue 27: two ticks, not half an hour
    analysing.refresh_from_db()
    assert analysing.status == Round.Status.FAILED and "its worker stopped answering" in analysing.error
    cycle = Cycle.objects.get(pk=analysing.cycle_id)
    assert cycle.phase == Cycle.Phase.DECIDING and not cycle.status
    assert Card.objects.filter(kind=Card.Kind.RETRY, status=Card.Status.PENDING).count() == 1
