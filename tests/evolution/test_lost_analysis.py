"""Issue 27: ``decide: auto`` never waits on a person for a lost or broken analysis (R9.14, R7.3).

A worker that claims an analysis stamps a heartbeat and renews it while it
works; a beat older than the lease (two ticks) is a worker that died, and the
tick's sweep fails the round: under decide: auto the cycle closes failed at
once (no card, no lesson, a notice), under a person's a Retry card. Any
exception the brief or the proposer raises fails the round with its type and
message on it. Time travels; the worker's death is a claimed round nobody
answers.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.core import due
from evolution.loop import brief as briefs
from evolution.loop import machine, proposer, recovery
from evolution.loop.proposer import Proposal
from evolution.models import Cycle, Lesson, Round
from evolution.steering import needs_you
from hitl.models import Card, Notice
from tests.evolution.loop_helpers import graded, history, looped

pytestmark = pytest.mark.django_db

BROKEN = "the evidence index is corrupt"


def opened(**loop) -> Cycle:
    entity = looped(loop=loop)
    history(entity, "bggg")
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle


def first(cycle: Cycle) -> Round:
    return cycle.rounds.get(number=1)


def tick_at(when) -> dict:
    with time_machine.travel(when, tick=False):
        return recovery.tick()


def stuck() -> list[dict]:
    return [i for i in needs_you.items() if i["gate"] == "stuck"]


# --- A worker killed mid-analysis ----------------------------------------------------------------


def test_a_killed_analysis_under_decide_auto_fails_unattended_within_two_ticks():
    cycle = opened(autonomy={"decide": "auto"})
    start = timezone.now()
    assert proposer.claim(first(cycle).pk, start) is not None  # a worker took it ... and was killed
    assert tick_at(start + timedelta(seconds=30))["analyse"] == 0  # one tick: its worker may be working
    cycle.refresh_from_db()
    assert not cycle.status and cycle.phase == Cycle.Phase.ANALYSING
    assert tick_at(start + timedelta(seconds=90))["analyse"] == 1  # a beat two ticks old: the worker is gone
    cycle.refresh_from_db()
    rnd = first(cycle)
    assert cycle.status == Cycle.Status.FAILED and cycle.phase == Cycle.Phase.SETTLED
    assert "the analysis was lost: its worker stopped answering" in cycle.reason
    assert "unattended: closed at once" in cycle.reason
    assert rnd.status == Round.Status.FAILED and "its worker stopped answering" in rnd.error
    assert not Card.objects.filter(producer="loop").exists()  # nobody is asked
    assert not Lesson.objects.exists()  # nothing was proposed or measured
    assert cycle.claim is None  # the entity is free for the next failure (R7.3)
    assert Notice.objects.filter(subject=f"cycle {cycle.pk}").exists()  # a notice says what broke
    assert tick_at(start + timedelta(seconds=120))["analyse"] == 0  # once


def test_a_killed_analysis_under_a_persons_decide_fails_onto_a_retry_card_within_two_ticks():
    cycle = opened()
    start = timezone.now()
    proposer.claim(first(cycle).pk, start)
    assert tick_at(start + timedelta(seconds=90))["analyse"] == 1
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.DECIDING and not cycle.status
    card = Card.objects.get(kind=Card.Kind.RETRY, status=Card.Status.PENDING)
    assert "its worker stopped answering" in card.text


def test_a_working_analysis_keeps_its_lease_by_its_heartbeat():
    cycle = opened(autonomy={"decide": "auto"})
    start = timezone.now()
    rnd = first(cycle)
    proposer.claim(rnd.pk, start)
    assert due.beat_analysis(rnd.pk, start + timedelta(seconds=50))  # the worker is alive and beating
    assert tick_at(start + timedelta(seconds=90))["analyse"] == 0
    cycle.refresh_from_db()
    assert not cycle.status
    assert tick_at(start + timedelta(seconds=111))["analyse"] == 1  # it stopped beating after that


def test_a_dead_workers_analysis_is_listed_as_stuck_while_nothing_sweeps_it():
    cycle = opened(autonomy={"decide": "auto"})
    start = timezone.now()
    proposer.claim(first(cycle).pk, start)
    with time_machine.travel(start + timedelta(minutes=2), tick=False):
        assert stuck() == []  # a few ticks may yet come
    with time_machine.travel(start + timedelta(minutes=7), tick=False):
        [item] = stuck()
    assert item["cycleId"] == cycle.pk and "the analysis (its worker stopped answering)" in item["clause"]


@pytest.mark.django_db(transaction=True)  # the heartbeat writes on its own thread's connection
def test_the_heartbeat_renews_the_beat_while_the_worker_works(settings):
    settings.LOOP_ANALYSIS_LEASE_SECS = 0.3  # a beat every 0.1 s
    cycle = opened()
    rnd = first(cycle)
    start = timezone.now()
    proposer.claim(rnd.pk, start)
    with due.analysis_heartbeat(rnd.pk):
        time.sleep(0.5)
    rnd.refresh_from_db()
    assert rnd.analysis_beat_at > start


def test_an_answer_that_comes_after_the_sweep_took_the_analysis_as_lost_is_set_aside(monkeypatch):
    cycle = opened(autonomy={"decide": "auto"})

    def frozen_worker(cycle, rnd, brief, **kwargs):
        machine.sweep_lost(now=timezone.now() + timedelta(minutes=5))  # it froze past the lease
        return Proposal(summary="Add 'invoice'", hypothesis="h", files=[{"path": "x.md", "content": "y\n"}])

    monkeypatch.setattr(proposer, "propose", frozen_worker)
    machine.analyse(first(cycle).pk)
    cycle.refresh_from_db()
    rnd = first(cycle)
    assert cycle.status == Cycle.Status.FAILED and rnd.status == Round.Status.FAILED
    assert not rnd.summary and not Card.objects.filter(producer="loop").exists()


# --- An analysis that breaks --------------------------------------------------------------------


def _broken_brief(monkeypatch, exc: Exception) -> None:
    def build(cycle, rnd):
        raise exc

    monkeypatch.setattr(briefs, "build_brief", build)


def test_a_runtime_error_in_the_brief_under_decide_auto_fails_the_cycle_at_once_naming_it(monkeypatch):
    cycle = opened(autonomy={"decide": "auto"})
    _broken_brief(monkeypatch, RuntimeError(BROKEN))
    machine.analyse(first(cycle).pk)
    cycle.refresh_from_db()
    rnd = first(cycle)
    assert cycle.status == Cycle.Status.FAILED and cycle.phase == Cycle.Phase.SETTLED
    assert f"RuntimeError: {BROKEN}" in cycle.reason and "unattended: closed at once" in cycle.reason
    assert rnd.status == Round.Status.FAILED and rnd.error == f"the analysis failed: RuntimeError: {BROKEN}"
    assert not Card.objects.filter(producer="loop").exists() and not Lesson.objects.exists()
    assert stuck() == []


def test_a_proposer_bug_under_decide_auto_fails_the_cycle_at_once_naming_it(monkeypatch):
    cycle = opened(autonomy={"decide": "auto"})

    def propose(cycle, rnd, brief, **kwargs):
        return {}["summary"]

    monkeypatch.setattr(proposer, "propose", propose)
    machine.analyse(first(cycle).pk)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.FAILED and "KeyError: 'summary'" in cycle.reason


def test_under_a_persons_decide_the_retry_card_carries_the_real_error(monkeypatch):
    cycle = opened()
    _broken_brief(monkeypatch, RuntimeError(BROKEN))
    machine.analyse(first(cycle).pk)
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.DECIDING and not cycle.status
    card = Card.objects.get(kind=Card.Kind.RETRY, status=Card.Status.PENDING)
    assert f"RuntimeError: {BROKEN}" in card.text and "the analysis was lost" not in card.text
    # Nothing is left for the sweep: the round failed at once, not lost.
    assert tick_at(timezone.now() + timedelta(minutes=45))["analyse"] == 0


def test_an_analysis_claimed_before_heartbeats_were_kept_is_failed_after_the_old_half_hour():
    cycle = opened(autonomy={"decide": "auto"})
    start = timezone.now()
    rnd = first(cycle)
    proposer.claim(rnd.pk, start)
    Round.objects.filter(pk=rnd.pk).update(analysis_beat_at=None)  # a row the migration found claimed
    assert tick_at(start + timedelta(minutes=29))["analyse"] == 0
    assert tick_at(start + timedelta(minutes=31))["analyse"] == 1
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.FAILED and "unattended: closed at once" in cycle.reason
