"""The loop never strands a cycle on a stage's surprise, and reads the switch again after waiting (issue 14).

- a proposal whose content cannot be written fails its round onto a Retry card, never stays ``applying``;
- switching the loop off (or a hold) while the proposer works sets its answer aside: no card, no PR;
- the spend ceiling under ``decide: auto`` closes the run at once; under a person it says a retry cannot help;
- a reply on a Retry card is a refinement the cooldown never holds (R7.10).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from evolution.loop import machine, proposer
from evolution.loop.proposer import Proposal
from evolution.models import Cycle, Round
from grading.models import Entity
from hitl.actions import answer_card, run_handler
from hitl.models import Card
from tests.evolution.forge_helpers import DIGEST_PATH, edited_digest, forge_brain, make_round
from tests.evolution.loop_helpers import graded, history, looped

pytestmark = pytest.mark.django_db


def opened(**loop) -> Cycle:
    entity = looped(loop=loop)
    history(entity, "bggg")
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle


def test_a_proposal_that_cannot_be_written_fails_onto_a_retry_card(tmp_path, settings):
    from django.db import connection

    if connection.vendor == "postgresql":
        pytest.skip("Postgres cannot store a lone surrogate in JSON, so such a proposal never reaches the apply there")
    fb = forge_brain(tmp_path, settings)
    rnd = make_round(fb.digest, [{"path": "features/digest/digest.scenario.md", "content": "bad \ud800 surrogate\n"}])
    machine.apply(rnd.pk)
    rnd.refresh_from_db()
    cycle = Cycle.objects.get(pk=rnd.cycle_id)
    assert rnd.status == Round.Status.FAILED and rnd.error.startswith("the apply failed: ")
    assert rnd.card is not None and rnd.card.kind == Card.Kind.RETRY
    assert cycle.phase == Cycle.Phase.DECIDING and cycle.claim is None  # waits on a person, holds nothing


def test_an_error_the_apply_does_not_expect_fails_onto_a_retry_card(tmp_path, settings, monkeypatch):
    from evolution.forges.local import LocalForge

    fb = forge_brain(tmp_path, settings)

    def broken(self, *args, **kwargs):
        raise RuntimeError("the forge's disk is full")

    monkeypatch.setattr(LocalForge, "open_pull", broken)
    rnd = make_round(fb.digest, [{"path": DIGEST_PATH, "content": edited_digest()}])
    machine.apply(rnd.pk)
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.FAILED and "RuntimeError: the forge's disk is full" in rnd.error
    assert Cycle.objects.get(pk=rnd.cycle_id).phase == Cycle.Phase.DECIDING


def _answering(monkeypatch, during) -> None:
    """The proposer's call, during which ``during()`` happens outside (a person flips a switch)."""

    def propose(cycle, rnd, brief, **kwargs):
        during()
        return Proposal(summary="Add 'invoice'", hypothesis="h", files=[{"path": "x.md", "content": "y\n"}])

    monkeypatch.setattr(proposer, "propose", propose)


def test_switching_the_loop_off_during_the_proposer_call_sets_the_answer_aside(monkeypatch):
    cycle = opened()
    _answering(monkeypatch, lambda: Entity.objects.filter(pk=cycle.entity_id).update(loop_enabled=False))
    rnd = machine.analyse(cycle.rounds.get(number=1).pk)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.SKIPPED and "switched off" in cycle.reason
    assert rnd.card is None and not Card.objects.filter(producer="loop").exists()


def test_a_hold_placed_during_the_proposer_call_sets_the_answer_aside(monkeypatch):
    from evolution.steering import supervision

    cycle = opened()
    _answering(monkeypatch, lambda: supervision.hold(cycle.entity, actor="alice", reason="freeze for the audit"))
    machine.analyse(cycle.rounds.get(number=1).pk)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.SKIPPED and "freeze for the audit" in cycle.reason
    assert not Card.objects.filter(producer="loop").exists()


def test_the_spend_ceiling_under_decide_auto_closes_the_run_at_once():
    cycle = opened(budget={"maxUsdPerRun": 1}, autonomy={"decide": "auto"})
    Cycle.objects.filter(pk=cycle.pk).update(spent_usd=Decimal("1.00"))
    machine.analyse(cycle.rounds.get(number=1).pk)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.FAILED and "unattended: closed at once" in cycle.reason
    assert not Card.objects.filter(kind=Card.Kind.RETRY).exists()


def test_a_reply_on_a_retry_card_inside_the_cooldown_is_a_refinement(alice):
    entity = looped()
    now = timezone.now()
    history(entity, "bggg")
    cycle = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle
    rnd = machine.fail(cycle.rounds.get(number=1), "the analysis failed: boom")
    Cycle.objects.create(  # another cycle settled an hour ago: the entity rests
        entity=entity,
        key="rest",
        origin="grade",
        analysed=True,
        status="skipped",
        phase="settled",
        completed_at=now - timedelta(hours=1),
        started_at=now - timedelta(hours=2),
    )
    result = answer_card(
        rnd.card.pk, user=alice, is_agent=False, choice=Card.REFINE, refinement="only billing", via="dashboard"
    )
    assert result.ok, result.detail
    run_handler(rnd.card.pk)
    cycle.refresh_from_db()
    assert not cycle.status, cycle.reason
    assert cycle.rounds.get(number=2).refinement == "only billing"
