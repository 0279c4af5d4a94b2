"""Who answers the gates: decide/merge auto, the breaker, calibration, grants, onUnmeasured, onInconclusive (R12, R16)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.loop import machine
from evolution.models import AutoAcceptGrant, Cycle, Round, Supervision
from evolution.steering import autonomy
from hitl.models import Card, Notice
from tests.evolution.loop_helpers import JUDGE, graded, history, looped

pytestmark = pytest.mark.django_db

AUTO = {"autonomy": {"decide": "auto", "merge": "auto"}}


def shipped(entity, status: str, *, minutes_ago: int, merge_gate: str = "human") -> Cycle:
    """A change merged through ``merge_gate`` and settled at ``status`` by the real watch, ``minutes_ago``.

    The watch opens at the merge, two minutes before the settle, and reads what landed since: five good runs
    validate, two bad ones regress (its revert is then due: no forge here, so none opens); an unvalidated change
    shipped under ``watch.mode: none`` (settled at the merge, no verdict record, as the engine writes it).
    """
    at = timezone.now() - timedelta(minutes=minutes_ago)
    merged = at if status == Cycle.Status.UNVALIDATED else at - timedelta(minutes=2)
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"shipped:{entity.pk}:{at.isoformat()}",
        origin=Cycle.Origin.GRADE,
        phase=Cycle.Phase.MERGE_WAIT,
        analysed=True,
        judge=JUDGE,
        terms=entity.terms,
        started_at=merged - timedelta(minutes=5),
        moved_at=merged,
        merged_at=merged,
    )
    Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED, merge_sha="a" * 40, merge_gate=merge_gate)
    cycle = Cycle.objects.select_related("entity").get(pk=cycle.pk)
    if status == Cycle.Status.UNVALIDATED:
        loop = cycle.entity.terms["loop"]
        cycle.entity.terms = {
            **cycle.entity.terms,
            "loop": {**loop, "watch": {**loop.get("watch", {}), "mode": "none"}},
        }
    with time_machine.travel(merged, tick=False):
        machine.open_watch(cycle, merged)
    marks = {Cycle.Status.VALIDATED: "ggggg", Cycle.Status.REGRESSED: "bb"}.get(status, "")
    for i, mark in enumerate(marks):
        graded(entity, bad=mark == "b", at=merged + timedelta(seconds=10 * (i + 1)))
    if marks:
        with time_machine.travel(at, tick=False):
            machine.evaluate(cycle, at)
    cycle.refresh_from_db()
    assert cycle.status == status and cycle.completed_at == at, (cycle.status, cycle.reason)
    return cycle


def opened(entity) -> Cycle:
    history(entity, "bggg")
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle


def propose(cycle: Cycle) -> Round:
    rnd = cycle.rounds.get(number=1)
    rnd.summary, rnd.hypothesis, rnd.status = "Add a keyword", "Keywords help.", Round.Status.PROPOSED
    rnd.files = [{"path": "features/triage/triage.scenario.md", "content": "x\n"}]
    rnd.save()
    return machine.decide_gate(rnd, now=timezone.now())


def test_the_defaults_are_human_at_both_gates():
    gates = autonomy.gates(looped())
    assert (gates.decide, gates.merge, gates.note) == ("human", "human", "")


def test_a_partial_block_fills_from_the_engine_not_the_manifest():
    entity = looped(loop={"autonomy": {"merge": "auto"}}, manifest={"loop": {"autonomy": {"decide": "auto"}}})
    assert (autonomy.gates(entity).decide, autonomy.gates(entity).merge) == ("human", "auto")


def test_decide_auto_accepts_without_a_card_with_a_notice():
    entity = looped(loop=AUTO)
    rnd = propose(opened(entity))
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.ACCEPTED and rnd.card is None
    assert rnd.acceptance == "auto" and rnd.decided_by == rnd.cycle.actor
    assert Notice.objects.filter(kind="accepted", text__startswith="accepted under decide: auto").exists()


def test_a_broken_unattended_analysis_closes_the_cycle_failed_at_once_without_a_card_or_lesson(fake_gateway, settings):
    """The real analysis under decide: auto, its proposer's gateway answering 500."""
    from tests.fakes.gateway import Reply

    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    fake_gateway.script(Reply(status=500, error_message="the model is down"))
    entity = looped(loop=AUTO)
    cycle = opened(entity)
    rnd = machine.analyse(cycle.rounds.get(number=1).pk)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert len(fake_gateway.requests) == 1
    assert rnd.status == Round.Status.FAILED and "the gateway failed" in rnd.error
    assert cycle.status == Cycle.Status.FAILED and cycle.claim is None and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.reason.endswith("(unattended: closed at once)")
    assert not Card.objects.filter(producer="loop").exists() and not cycle.lessons.exists()


def test_two_regressed_settles_in_a_row_pause_both_gates_until_a_rearm():
    entity = looped(loop=AUTO)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=30)
    assert autonomy.paused(entity) is None
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=10)
    why = autonomy.paused(entity)
    assert why and "2 regressed settles in a row" in why
    gates = autonomy.gates(entity)
    assert (gates.decide, gates.merge) == ("human", "human") and gates.note == why
    Supervision.objects.create(kind=Supervision.Kind.REARM, entity=entity, actor="alice", reason="fixed the judge")
    assert autonomy.paused(entity) is None and autonomy.gates(entity).decide == "auto"


def test_validated_resets_the_streak_and_a_human_merged_unvalidated_neither_counts_nor_resets():
    entity = looped(loop=AUTO)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=50)
    shipped(entity, Cycle.Status.VALIDATED, minutes_ago=40)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=30)
    shipped(entity, Cycle.Status.UNVALIDATED, minutes_ago=20)
    assert autonomy.streak(entity) == 1 and autonomy.paused(entity) is None
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=10)
    assert autonomy.streak(entity) == 2 and autonomy.paused(entity)


def test_the_pause_is_announced_once_at_the_crossing_settle():
    entity = looped(loop=AUTO)
    first = shipped(entity, Cycle.Status.REGRESSED, minutes_ago=30)
    assert not Notice.objects.filter(kind="paused").exists()
    crossing = shipped(entity, Cycle.Status.REGRESSED, minutes_ago=10)  # the settle itself announces the crossing
    [notice] = Notice.objects.filter(kind="paused")
    assert notice.text.startswith(
        f"paused by the breaker: 2 regressed settles in a row (cycles {first.pk}, {crossing.pk})"
    )
    later = shipped(entity, Cycle.Status.REGRESSED, minutes_ago=1)
    assert autonomy.announce_if_crossed(later) is False and autonomy.announce_if_crossed(crossing) is False
    assert Notice.objects.filter(kind="paused").count() == 1


def test_a_paused_entitys_next_proposal_is_carded_with_the_reminder():
    entity = looped(loop=AUTO)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=3000)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=2900)  # past the 24 h rest
    rnd = propose(opened(entity))
    assert rnd.card is not None and rnd.card.kind == Card.Kind.DECIDE
    assert rnd.card.text.startswith("paused by the breaker") and "this round is yours to answer" in rnd.card.text


def test_one_unattended_change_nothing_measured_pauses_whatever_the_ceiling():
    entity = looped(loop={"autonomy": {"decide": "auto", "merge": "auto", "maxConsecutiveRegressions": None}})
    shipped(entity, Cycle.Status.UNVALIDATED, minutes_ago=5, merge_gate="auto")
    assert "shipped unattended and nothing measured it" in autonomy.paused(entity)


def test_on_unmeasured_continue_keeps_autonomy_after_a_blind_ship():
    entity = looped(loop={"autonomy": {"decide": "auto", "merge": "auto", "onUnmeasured": "continue"}})
    shipped(entity, Cycle.Status.UNVALIDATED, minutes_ago=5, merge_gate="auto")
    assert autonomy.paused(entity) is None


def test_a_human_merged_blind_change_pauses_nothing():
    entity = looped(loop=AUTO)
    shipped(entity, Cycle.Status.UNVALIDATED, minutes_ago=5, merge_gate="human")
    assert autonomy.paused(entity) is None


def test_an_auto_accept_grant_accepts_once_then_a_person_is_asked():
    entity = looped()
    AutoAcceptGrant.objects.create(
        entity=entity, issued_by="alice", max_calls=1, expires_at=timezone.now() + timedelta(hours=1)
    )
    first = propose(opened(entity))
    first.refresh_from_db()
    assert first.acceptance == "grant" and first.card is None and first.decided_by == first.cycle.actor
    machine.settle(first.cycle, Cycle.Status.SKIPPED, reason="test")
    Cycle.objects.filter(pk=first.cycle.pk).update(completed_at=timezone.now() - timedelta(hours=7))
    second = propose(opened(entity))
    assert second.card is not None


def test_the_breaker_vetoes_a_grant_and_a_chat_role_never_uses_one():
    entity = looped()
    AutoAcceptGrant.objects.create(
        entity=entity, issued_by="alice", max_calls=5, expires_at=timezone.now() + timedelta(hours=1)
    )
    entity.terms["loop"]["autonomy"]["decide"] = "human"
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=30)
    shipped(entity, Cycle.Status.REGRESSED, minutes_ago=10)
    assert autonomy.gates(entity).grant is None
    role = looped("helpdesk", kind="role", evaluation={"method": "none", "sample": {"maxPerDay": 5}})
    AutoAcceptGrant.objects.create(
        entity=role, issued_by="alice", max_calls=5, expires_at=timezone.now() + timedelta(hours=1)
    )
    assert autonomy.active_grant(role) is None


def test_require_calibration_holds_both_gates_while_a_human_metric_is_uncalibrated():
    entity = looped(
        loop={"autonomy": {"decide": "auto", "merge": "auto", "requireCalibration": True}},
        evaluation={
            "metrics": {
                "tone": {
                    "kind": "judged",
                    "direction": "max",
                    "unit": "score",
                    "human": True,
                    "role": "guard",
                    "criterion": "Kind",
                }
            }
        },
    )
    gates = autonomy.gates(entity)
    assert (gates.decide, gates.merge) == ("human", "human")
    assert gates.note.startswith("⏸ Autonomy waits on calibration: tone")


def test_require_calibration_without_a_human_metric_holds_nothing():
    entity = looped(loop={"autonomy": {"decide": "auto", "merge": "auto", "requireCalibration": True}})
    assert autonomy.gates(entity).decide == "auto"
