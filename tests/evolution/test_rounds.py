"""The decide gate and the retry card: a person's Accept, Skip with a note, refinement, expiry (R9.*)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from evolution.loop import machine
from evolution.models import Cycle, Round
from hitl.actions import answer_card, expire_due_cards, run_handler
from hitl.models import Card
from tests.evolution.loop_helpers import graded, history, looped

pytestmark = pytest.mark.django_db


@pytest.fixture
def opened():
    entity = looped()
    history(entity, "bggg")
    landed = graded(entity, bad=True)
    return machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution).cycle


def propose(cycle: Cycle, **fields) -> Round:
    rnd = cycle.rounds.get(number=1)
    for name, value in {
        "summary": "Add 'invoice' to the billing rule",
        "hypothesis": "Invoices are billing questions.",
        "files": [{"path": "features/triage/triage.scenario.md", "content": "new\n"}],
        "author": "pipeline:fixer",
        "status": Round.Status.PROPOSED,
        **fields,
    }.items():
        setattr(rnd, name, value)
    rnd.save()
    return machine.ask_decide(rnd, now=timezone.now())


def answer(card: Card, user, choice: str, **kwargs) -> None:
    result = answer_card(card.pk, user=user, is_agent=False, choice=choice, via="dashboard", **kwargs)
    assert result.ok, result.detail
    run_handler(card.pk)  # the handler runs after commit; here, by hand


def test_a_proposal_waits_on_a_decide_card_and_holds_no_claim(opened):
    rnd = propose(opened)
    opened.refresh_from_db()
    assert opened.phase == Cycle.Phase.DECIDING and opened.claim is None
    card = rnd.card
    assert card.kind == Card.Kind.DECIDE and card.producer == "loop"
    assert [o["value"] for o in card.buttons] == ["accept", "skip"]
    hours = (
        card.expires_at - rnd.proposed_at if rnd.proposed_at else card.expires_at - card.created_at
    ).total_seconds()
    assert abs(hours / 3600 - 72) < 0.01  # reviewDeadlineHours, the engine's 72


def test_skip_with_a_note_settles_skipped_and_keeps_who_and_why(opened, alice):
    rnd = propose(opened)
    answer(rnd.card, alice, "skip", note="off-brand")
    rnd.refresh_from_db()
    opened.refresh_from_db()
    assert rnd.status == Round.Status.SKIPPED and rnd.rejection == Round.Rejection.HUMAN
    assert rnd.decided_by == "alice" and rnd.decision_note == "off-brand"
    assert opened.status == Cycle.Status.SKIPPED and "off-brand" in opened.reason
    assert opened.claim is None


def test_a_reply_refines_into_a_child_round_and_the_old_card_reaches_nothing(opened, alice):
    rnd = propose(opened)
    answer(rnd.card, alice, Card.REFINE, refinement="only the billing rule")
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.REFINED and rnd.decided_by == "alice"
    child = opened.rounds.get(number=2)
    assert child.parent_id == rnd.pk and child.refinement == "only the billing rule"
    assert child.status == Round.Status.ANALYSING
    opened.refresh_from_db()
    assert opened.phase == Cycle.Phase.ANALYSING
    machine.on_card(rnd.card)  # heard again: nothing moves
    child.refresh_from_db()
    assert child.status == Round.Status.ANALYSING


def test_nobody_answering_by_the_deadline_skips_it_as_a_timeout(opened):
    rnd = propose(opened)
    with time_machine.travel(timezone.now() + timedelta(hours=73)):
        assert expire_due_cards() == 1
    run_handler(rnd.card.pk)
    rnd.refresh_from_db()
    opened.refresh_from_db()
    assert rnd.rejection == Round.Rejection.TIMEOUT and rnd.decided_by == opened.actor
    assert opened.status == Cycle.Status.SKIPPED and opened.reason.startswith("skipped: nobody answered by")


def test_accept_takes_the_claim_and_moves_to_apply(opened, alice):
    rnd = propose(opened)
    answer(rnd.card, alice, "accept")
    rnd.refresh_from_db()
    opened.refresh_from_db()
    assert rnd.status == Round.Status.ACCEPTED and rnd.decided_by == "alice"
    assert opened.phase == Cycle.Phase.APPLYING and opened.claim == opened.entity_id


def test_accepting_a_proposal_with_nothing_to_apply_skips(opened, alice):
    rnd = propose(opened, files=[])
    answer(rnd.card, alice, "accept")
    opened.refresh_from_db()
    assert opened.status == Cycle.Status.SKIPPED and opened.reason == "the proposal has nothing to apply"


def test_accepting_while_another_cycle_holds_the_entity_skips(opened, alice):
    rnd = propose(opened)
    rival = machine.open_cycle(opened.entity, origin=Cycle.Origin.REQUEST).cycle
    assert rival.claim == opened.entity_id
    answer(rnd.card, alice, "accept")
    opened.refresh_from_db()
    assert opened.status == Cycle.Status.SKIPPED
    assert opened.reason == f"Accepted by alice; set aside: cycle {rival.pk} is live (Analysing)"


def test_a_failed_round_asks_retry_or_skip(opened, alice):
    rnd = opened.rounds.get(number=1)
    machine.fail(rnd, "the apply failed: features/x.loop.py is closed to the loop", paths=["features/x.loop.py"])
    rnd.refresh_from_db()
    assert rnd.status == Round.Status.FAILED and rnd.card.kind == Card.Kind.RETRY
    assert [o["value"] for o in rnd.card.buttons] == ["retry", "skip"]
    assert rnd.gate["refused"] == ["features/x.loop.py"]
    answer(rnd.card, alice, "skip")
    opened.refresh_from_db()
    assert opened.status == Cycle.Status.FAILED and "skipped the retry" in opened.reason


def test_a_retry_inside_the_cooldown_is_refused_and_settles_skipped(alice):
    entity = looped()
    now = timezone.now()
    history(entity, "bggg")
    first = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle
    machine.settle(first, Cycle.Status.VALIDATED, reason="kept", now=now - timedelta(hours=7))
    second = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle
    rnd = machine.fail(second.rounds.get(number=1), "the analysis failed: boom")
    # Another cycle settled an hour ago: the entity rests; a Retry is spent from the same budget.
    other = Cycle.objects.create(
        entity=entity,
        key="x",
        origin="grade",
        analysed=True,
        status="skipped",
        phase="settled",
        completed_at=now - timedelta(hours=1),
        started_at=now - timedelta(hours=2),
    )
    assert other.pk
    answer(rnd.card, alice, "retry")
    second.refresh_from_db()
    assert second.status == Cycle.Status.SKIPPED and "refused: cooldown" in second.reason


def test_a_retry_opens_a_new_analysis_round(opened, alice):
    rnd = machine.fail(opened.rounds.get(number=1), "the analysis failed: boom")
    answer(rnd.card, alice, "retry")
    assert opened.rounds.get(number=2).status == Round.Status.ANALYSING


def test_a_spent_budget_fails_the_round_before_any_agent(opened):
    Cycle.objects.filter(pk=opened.pk).update(spent_usd=Decimal("1.00"))
    opened.entity.terms["loop"]["budget"] = {"maxUsdPerRun": 1}
    opened.entity.save()
    rnd = machine.analyse(opened.rounds.get(number=1).pk)
    assert rnd.status == Round.Status.FAILED
    assert rnd.error.startswith("budget: spent $1.00 of $1.00 (budget.maxUsdPerRun)")
    assert "a retry would spend from the same budget" in rnd.error


def test_the_kill_switch_during_an_analysis_ends_the_cycle_without_a_card_or_lesson(
    opened, fake_gateway, settings, monkeypatch
):
    """The proposer answers a real proposal through the gateway; the switch goes off while it works."""
    import json

    from evolution.loop import proposer
    from grading.models import Entity
    from tests.fakes.gateway import Reply

    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    answer = {"summary": "Route 'invoice' to billing.", "hypothesis": "Invoices fell through.", "citedLessons": [],
              "files": [{"path": "features/triage/triage.scenario.md", "content": "---\nname: t\n---\nNew.\n"}]}  # fmt: skip
    fake_gateway.script(Reply(content=json.dumps(answer)))
    real = proposer.propose

    def switched_off_meanwhile(*args, **kwargs):
        proposal = real(*args, **kwargs)  # the real proposer, answered by the gateway
        Entity.objects.filter(pk=opened.entity_id).update(loop_enabled=False)  # a person flips the switch meanwhile
        return proposal

    monkeypatch.setattr(proposer, "propose", switched_off_meanwhile)
    rnd = machine.analyse(opened.rounds.get(number=1).pk)
    opened.refresh_from_db()
    assert len(fake_gateway.requests) == 1  # the proposer was asked and answered a proposal
    assert rnd.status == Round.Status.SKIPPED and rnd.card is None and not rnd.files
    assert opened.status == Cycle.Status.SKIPPED and opened.reason == "the loop was switched off during the analysis"
    assert not Card.objects.filter(producer="loop").exists() and not opened.lessons.exists()


def test_an_agent_cannot_answer_the_decide_card(opened, alice):
    rnd = propose(opened)
    result = answer_card(rnd.card.pk, user=alice, is_agent=True, choice="accept", via="api")
    assert not result.ok and result.code == "unauthorized_responder"
    rnd.card.refresh_from_db()
    assert rnd.card.is_pending


def test_an_llm_proposer_behind_a_loopback_gateway_produces_a_priced_round(fake_gateway, settings):
    from decimal import Decimal as D

    from tests.fakes.gateway import Reply

    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.BRAMA_MODEL = "engine-model"
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = D("2")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = D("10")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = D("0")
    import json

    fake_gateway.script(
        Reply(
            content=json.dumps(
                {
                    "summary": "Route 'invoice' to billing.",
                    "hypothesis": "Invoice tickets fell through to general.",
                    "files": [{"path": "features/triage/triage.scenario.md", "content": "---\nname: t\n---\nNew.\n"}],
                    "citedLessons": [],
                }
            ),
            usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
        )
    )
    entity = looped()
    history(entity, "bggg")
    cycle = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=graded(entity, bad=True).execution).cycle
    rnd = machine.analyse(cycle.rounds.get(number=1).pk)
    cycle.refresh_from_db()
    assert rnd.status == Round.Status.PROPOSED and rnd.author == "agent:engine-model"
    assert rnd.cost_usd == D("0.004") and cycle.spent_usd == D("0.004")
    assert rnd.card.kind == Card.Kind.DECIDE and "Route 'invoice' to billing." in rnd.card.text
    assert "runs.json" in rnd.brief and cycle.phase == Cycle.Phase.DECIDING
    assert "$0.00" in rnd.card.text or "0.004" in rnd.card.text  # the spend so far is on the card


def test_review_deadline_hours_is_read_once_as_the_round_opens_for_all_its_waits(opened):
    # R9.6: the round opened under 72 h; an edit to 1 h while its decide card waits reaches neither that card nor
    # the Retry card the same round opens later — only the next round.
    entity = opened.entity
    rnd = propose(opened)
    entity.terms["loop"]["reviewDeadlineHours"] = 1
    entity.save(update_fields=["terms"])
    rnd.refresh_from_db()
    now = timezone.now()
    machine.fail(rnd, "the apply failed: the forge is gone", now=now)
    rnd.refresh_from_db()
    assert rnd.card.kind == Card.Kind.RETRY
    assert abs((rnd.card.expires_at - now).total_seconds() / 3600 - 72) < 0.01
    from evolution.loop.decide import new_round

    nxt = new_round(rnd.cycle, now=now)
    assert nxt.review_hours == 1
