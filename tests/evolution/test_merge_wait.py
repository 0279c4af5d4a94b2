"""The merge wait and the revert follow over the real local forge (seed 003 "How the engine notices the PR landed").

R12.3, R12.8, R12.12, R15.5–R15.7: the poll starts at two minutes and backs
off to six hours, never past the deadline; a merge opens the watch counted
from the merge; a PR closed unmerged or left past watch.deadlineHours settles
unvalidated; an event reads the PR at once; a regressed change's revert PR is
followed until it merges, closes or runs out of time, and each ends the hold.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection

from evolution.core import cycles, polling
from evolution.core import outcomes as verdicts
from evolution.loop import machine
from evolution.models import Cycle, PullRequest, Round
from hitl.models import Notice
from tests.concurrency import at_once
from tests.evolution.forge_helpers import forge_brain
from tests.evolution.watch_helpers import HOUR, T0, cycle_in, open_pull, pulse, refreshed, ticks

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


@pytest.fixture
def forge(tmp_path, settings):
    return forge_brain(tmp_path, settings)


def waiting(entity, pull, *, at=T0) -> tuple[Cycle, Round]:
    """A cycle whose round 1 opened ``pull``, its merge wait armed at ``at``."""
    cycle = cycle_in(entity, Cycle.Phase.APPLYING, at=at)
    round = Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.APPLIED,
        pr_number=pull.number,
        pr_url=pull.url,
        head_sha=pull.head_sha,
        branch=pull.head,
    )
    machine.arm_wait(cycle, round, at)
    return refreshed(cycle), round


# --- Arming and backing off -----------------------------------------------------------


def test_arming_opens_the_wait_with_its_deadline_and_a_first_poll_two_minutes_out(forge):
    cycle, _ = waiting(pulse(watch_block={"deadlineHours": 48}), open_pull(forge))
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    assert cycle.merge_deadline == T0 + 48 * HOUR
    assert cycle.next_poll_at == T0 + 2 * MINUTE and cycle.poll_interval_s == 120


def test_the_poll_doubles_from_two_minutes_up_to_six_hours(forge):
    cycle, _ = waiting(pulse(), open_pull(forge))
    assert machine.poll_due(T0 + MINUTE) == 0  # not due yet
    intervals = []
    for _ in range(10):
        due = refreshed(cycle).next_poll_at
        with time_machine.travel(due, tick=False):
            assert machine.poll_due() == 1
        cycle = refreshed(cycle)
        intervals.append(cycle.poll_interval_s)
        assert cycle.next_poll_at == due + timedelta(seconds=cycle.poll_interval_s)
    assert intervals == [240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600, 21600]
    assert cycle.phase == Cycle.Phase.MERGE_WAIT


def test_the_next_poll_never_lands_past_the_deadline(forge):
    cycle, _ = waiting(pulse(watch_block={"deadlineHours": 1}), open_pull(forge))
    polled = []
    for _ in range(4):
        polled.append(refreshed(cycle).next_poll_at)
        machine.poll_due(polled[-1])
    assert [due - T0 for due in polled] == [timedelta(minutes=m) for m in (2, 6, 14, 30)]
    assert refreshed(cycle).next_poll_at == T0 + HOUR  # 62 minutes out would pass the deadline: it polls at it


def test_a_cycle_taken_by_one_worker_is_not_polled_by_another(forge):
    cycle, _ = waiting(pulse(), open_pull(forge))
    stale = refreshed(cycle)
    assert polling.take(stale, T0 + 2 * MINUTE) is True
    assert polling.take(stale, T0 + 2 * MINUTE) is False  # the other worker read the same row: it backs off
    assert machine.poll_due(T0 + 3 * MINUTE) == 0  # leased for ten minutes


# --- Merged, closed, expired ------------------------------------------------------------


def test_a_merge_opens_the_watch_counted_from_the_merge(forge):
    entity = pulse(watch_block={"deadlineHours": 24})
    pull = open_pull(forge)
    cycle, round = waiting(entity, pull)
    with time_machine.travel(T0 + 30 * MINUTE, tick=False):
        merged = forge.forge.merge_pull(pull.number, by="alice")
    with time_machine.travel(T0 + HOUR, tick=False):
        assert machine.poll_due() == 1
    cycle, round = refreshed(cycle), Round.objects.get(pk=round.pk)
    assert round.status == Round.Status.MERGED and round.merge_sha == merged.merge_sha
    assert cycle.phase == Cycle.Phase.WATCHING and cycle.merged_at == T0 + 30 * MINUTE
    assert cycle.watch_opened_at == T0 + 30 * MINUTE and cycle.watch_deadline == T0 + 24 * HOUR + 30 * MINUTE
    assert cycle.next_poll_at is None and cycle.claim == entity.pk


def test_a_pull_event_reads_the_pr_at_once(forge):
    pull = open_pull(forge)
    cycle, _ = waiting(pulse(), pull)
    forge.forge.merge_pull(pull.number, by="alice")
    assert machine.on_pull_event(pull.number).phase == Cycle.Phase.WATCHING  # no waiting for the next poll
    assert machine.on_pull_event(9999) is None


def test_a_pull_event_for_an_open_pr_only_reads_it(forge):
    pull = open_pull(forge)
    cycle, _ = waiting(pulse(), pull)
    with time_machine.travel(T0 + MINUTE, tick=False):
        assert machine.on_pull_event(pull.number).phase == Cycle.Phase.MERGE_WAIT


def test_a_pr_closed_unmerged_settles_unvalidated_and_frees_the_entity(forge):
    pull = open_pull(forge)
    cycle, round = waiting(pulse(), pull)
    forge.forge.close_pull(pull.number, by="bob")
    assert machine.poll_due(T0 + 2 * MINUTE) == 1
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason == f"PR #{pull.number} was closed unmerged"
    assert cycle.claim is None and cycle.watch_verdict is None
    assert Round.objects.get(pk=round.pk).status == Round.Status.CLOSED
    assert verdicts.strength(cycle) is None and verdicts.grade(cycle) is None
    assert verdicts.status_label(cycle) == "Not merged"


def test_a_pr_left_open_past_the_deadline_is_closed_and_settles_unvalidated(forge):
    entity = pulse(watch_block={"deadlineHours": 2})
    pull = open_pull(forge)
    cycle, _ = waiting(entity, pull)
    assert machine.poll_due(T0 + HOUR) == 1
    assert refreshed(cycle).phase == Cycle.Phase.MERGE_WAIT
    with time_machine.travel(T0 + 2 * HOUR, tick=False):
        assert machine.poll_due() == 1
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.claim is None
    assert cycle.reason.startswith(f"PR #{pull.number} was not merged by ")
    assert cycle.reason.endswith("; the loop closed it")
    row = PullRequest.objects.get(number=pull.number)
    assert row.state == PullRequest.State.CLOSED and row.closed_by == cycle.actor


# --- Following the revert -----------------------------------------------------------------


def regressed(forge, entity, **watch_block):
    """A change merged through the wait whose watch regressed: the cycle follows its revert PR."""
    pull = open_pull(forge)
    cycle, _ = waiting(entity, pull)
    with time_machine.travel(T0 + MINUTE, tick=False):
        forge.forge.merge_pull(pull.number, by="alice")
        machine.on_pull_event(pull.number)
    ticks(entity, "bb", start=T0 + 10 * MINUTE)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.phase == Cycle.Phase.REVERTING
    return cycle, cycle.rounds.get(number=1)


def test_a_merged_revert_ends_the_hold(forge):
    entity = pulse()
    cycle, shipped = regressed(forge, entity)
    assert cycles.live_refusal(entity).startswith(f"waiting on the revert of cycle {cycle.pk}")
    assert machine.poll_due(T0 + HOUR) == 1
    assert refreshed(cycle).phase == Cycle.Phase.REVERTING  # still open: backed off
    with time_machine.travel(T0 + 2 * HOUR, tick=False):
        merged = forge.forge.merge_pull(shipped.revert_pr_number, by="alice")
        assert machine.on_pull_event(shipped.revert_pr_number).phase == Cycle.Phase.SETTLED
    cycle, shipped = refreshed(cycle), Round.objects.get(pk=shipped.pk)
    assert shipped.revert_outcome == "merged" and shipped.revert_merged_at == merged.merged_at
    assert cycle.claim is None and cycle.status == Cycle.Status.REGRESSED
    assert cycles.live_refusal(entity) is None
    assert verdicts.status_label(cycle) == "Reverted"


def test_a_revert_closed_unmerged_ends_the_hold_and_the_change_stays(forge):
    entity = pulse()
    cycle, shipped = regressed(forge, entity)
    forge.forge.close_pull(shipped.revert_pr_number, by="bob")
    assert machine.poll_due(T0 + HOUR) == 1
    cycle, shipped = refreshed(cycle), Round.objects.get(pk=shipped.pk)
    assert shipped.revert_outcome == "closed" and shipped.revert_merged_at is None
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None
    assert verdicts.status_label(cycle) == "Regressed, revert closed"


def test_a_revert_left_open_past_its_deadline_expires_and_ends_the_hold(forge):
    entity = pulse(watch_block={"deadlineHours": 3})
    cycle, shipped = regressed(forge, entity)
    opened = shipped.revert_opened_at
    assert shipped.revert_deadline == opened + 3 * HOUR
    machine.poll_due(opened + 2 * HOUR)
    assert refreshed(cycle).phase == Cycle.Phase.REVERTING
    with time_machine.travel(opened + 3 * HOUR, tick=False):
        assert machine.poll_due() == 1
    cycle, shipped = refreshed(cycle), Round.objects.get(pk=shipped.pk)
    assert shipped.revert_outcome == "expired" and cycle.claim is None
    assert PullRequest.objects.get(number=shipped.revert_pr_number).state == PullRequest.State.OPEN


# --- Two workers -------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_polling_at_once_act_on_a_cycle_once(tmp_path, settings):
    if connection.vendor != "postgresql":
        pytest.skip("real parallel workers need Postgres")
    forge = forge_brain(tmp_path, settings)
    pull = open_pull(forge)
    cycle, _ = waiting(pulse(), pull)
    forge.forge.close_pull(pull.number, by="bob")
    polled = at_once(lambda: machine.poll_due(T0 + 2 * MINUTE))
    assert sorted(polled) == [0, 1]
    assert refreshed(cycle).status == Cycle.Status.UNVALIDATED
    assert Notice.objects.filter(subject=f"cycle {cycle.pk}", kind="settled").count() == 1
