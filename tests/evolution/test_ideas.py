"""Ideas: posted through one entry point, refused with nothing written, queued FIFO one per cycle, delivered by
the sweep, withdrawn idempotently, an agent's approved by a person, the author told how its cycle settled (R18.*).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from evolution.core import cycles
from evolution.loop import intake, machine, opening, trigger
from evolution.models import Cycle, Idea, Lesson, Round, Supervision
from evolution.steering import ideas
from hitl.actions import answer_card, expire_due_cards
from hitl.models import Card, Notice
from tests.concurrency import each_at_once
from tests.evolution.loop_helpers import graded, looped, settled_cycle

pytestmark = pytest.mark.django_db


def busy(entity) -> Cycle:
    """A cycle opened on a bad grade: it holds the entity's live claim (its analysis never runs in these tests)."""
    landed = graded(entity, bad=True)
    opened = machine.open_cycle(entity, origin=Cycle.Origin.GRADE, anchor=landed.execution, window={"runIds": []})
    assert opened.opened
    return opened.cycle


def counts() -> tuple[int, int, int]:
    return Idea.objects.count(), Cycle.objects.count(), Card.objects.count()


# --- Refusals -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "text", "reason"),
    [
        (lambda: looped(loop={"enabled": False}), "idea", "the loop is off for scenario:triage"),
        (lambda: looped(evaluation={"enabled": False}), "idea", "grading is off for scenario:triage"),
        (lambda: looped(present=False), "idea", "scenario:triage does not load: it is gone from the brain"),
        (lambda: looped(load_error="bad yaml"), "idea", "scenario:triage does not load: bad yaml"),
        (looped, "", "the idea is empty"),
        (looped, "   \n ", "the idea is empty"),
        (looped, "x" * 4001, "the idea is 4001 characters long; at most 4000"),
    ],
)
def test_a_refused_post_writes_nothing(make, text, reason):
    entity = make()
    before = counts()
    with pytest.raises(ideas.IdeaRefused) as refused:
        intake.post(entity, text, author="alice")
    assert refused.value.code == "precondition" and refused.value.reason.startswith(reason)
    assert counts() == before


def test_no_entity_is_not_found():
    with pytest.raises(ideas.IdeaRefused) as refused:
        intake.post(None, "idea", author="alice")
    assert refused.value.code == "not_found" and not Idea.objects.exists()


def test_four_thousand_characters_are_accepted_after_trimming():
    posted = intake.post(looped(), "  " + "x" * 4000 + "\n", author="alice")
    assert posted.idea.text == "x" * 4000


# --- Posting and the queue ------------------------------------------------------------


def test_a_post_opens_its_cycle_at_once_when_the_entity_is_free():
    entity = looped()
    posted = intake.post(entity, "  Lead with the numbers.  ", author="alice")
    idea, cycle = posted.idea, posted.cycle
    assert posted.opened and posted.reason == f"cycle {cycle.pk} opened on it"
    assert idea.text == "Lead with the numbers." and idea.status == Idea.Status.TAKEN and idea.cycle_id == cycle.pk
    assert cycle.origin == Cycle.Origin.IDEA and cycle.idea_id == idea.pk and cycle.claim == entity.pk
    assert cycle.key.startswith(f"scenario:triage:idea:{idea.pk}:")
    assert ideas.state_of(idea) == "live" and ideas.place(idea) == ""


def test_a_post_behind_a_live_cycle_queues_with_the_reason_and_leaves_no_refusal_rows():
    entity = looped()
    live = busy(entity)
    first = intake.post(entity, "Stop opening with a question.", author="alice")
    second = intake.post(entity, "Shorter subject lines.", author="bob")
    assert not first.opened and first.reason == f"cycle {live.pk} is live (Analysing)"
    assert (
        not second.opened
        and second.reason == f"#2 in queue, behind an earlier idea; cycle {live.pk} is live (Analysing)"
    )
    assert (ideas.place(first.idea), ideas.place(second.idea)) == ("next", "#2 in queue")
    assert list(Cycle.objects.filter(entity=entity)) == [live], "waiting is not a refusal"
    assert intake.waits_on(entity) == f"Idea {first.idea.pk} waits on cycle {live.pk}, analysing."


def test_queued_ideas_run_one_per_cycle_first_in_first_out_delivered_by_the_sweep():
    entity = looped()
    live = busy(entity)
    first = intake.post(entity, "A", author="alice").idea
    second = intake.post(entity, "B", author="alice").idea
    assert intake.deliver_queued() == 0, "the live cycle holds the entity"
    machine.settle(live, Cycle.Status.SKIPPED, reason="done")
    assert intake.waits_on(entity) == f"Idea {first.pk} is next: picked up within the hour."
    assert intake.deliver_queued() == 1
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == Idea.Status.TAKEN and second.status == Idea.Status.QUEUED
    assert ideas.place(second) == "next"
    assert intake.deliver_queued() == 0, "one idea per cycle: the second waits for the first's cycle"
    machine.settle(first.cycle, Cycle.Status.SKIPPED, reason="the proposer declined")
    assert intake.deliver_queued() == 1
    second.refresh_from_db()
    assert second.status == Idea.Status.TAKEN and second.cycle_id != first.cycle_id


def test_an_unanswered_proposal_holds_the_idea_line():
    entity = looped()
    deciding = busy(entity)
    cycles.advance(deciding, Cycle.Phase.DECIDING, claim=None)
    posted = intake.post(entity, "A", author="alice")
    assert not posted.opened and posted.reason == f"cycle {deciding.pk} is live (Deciding)"


def test_an_idea_steps_past_the_cooldown_and_the_daily_ceiling():
    entity = looped(loop={"maxAnalysesPerDay": 1})
    settled_cycle(entity, Cycle.Status.REGRESSED, at=timezone.now() - timedelta(minutes=5))
    assert trigger.analyze_now(entity).opened is True  # a request is exempt too; settle it
    machine.settle(Cycle.objects.get(claim=entity.pk), Cycle.Status.SKIPPED, reason="done")
    assert cycles.ceiling_refusal(entity, now=timezone.now()).startswith("cooldown")
    assert intake.post(entity, "A", author="alice").opened


def test_an_idea_never_steps_past_a_hold():
    entity = looped()
    Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="bob", reason="quarter close")
    posted = intake.post(entity, "A", author="alice")
    assert not posted.opened and posted.reason == "held by bob: quarter close"
    assert intake.deliver_queued() == 0 and not Cycle.objects.exists()
    assert intake.waits_on(entity) == f"Idea {posted.idea.pk} waits: held by bob: quarter close."


def test_an_idea_waits_on_a_followed_revert():
    entity = looped()
    live = busy(entity)
    cycles.advance(live, Cycle.Phase.REVERTING)
    Round.objects.filter(cycle=live).update(revert_pr_number=7)
    posted = intake.post(entity, "A", author="alice")
    assert not posted.opened and posted.reason == f"waiting on the revert of cycle {live.pk} (PR #7)"


def test_a_landing_grade_opens_the_queued_ideas_cycle_even_a_good_one():
    entity = looped()
    live = busy(entity)
    idea = intake.post(entity, "A", author="alice").idea
    machine.settle(live, Cycle.Status.SKIPPED, reason="done")
    good = graded(entity, bad=False)
    assert trigger.on_landed([good.pk]) == 1
    idea.refresh_from_db()
    assert idea.status == Idea.Status.TAKEN
    assert idea.cycle.anchor_id == good.execution_id and idea.cycle.origin == Cycle.Origin.IDEA


def test_analyze_now_opens_on_the_queued_idea():
    entity = looped()
    Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="bob", reason="wait")
    idea = intake.post(entity, "A", author="alice").idea
    Supervision.objects.create(kind=Supervision.Kind.RELEASE, entity=entity, actor="bob", reason="go")
    opened = trigger.analyze_now(entity)
    assert opened.opened and opened.cycle.idea_id == idea.pk


# --- Withdrawing ----------------------------------------------------------------------


def test_withdraw_is_idempotent_and_a_taken_idea_stays():
    entity = looped()
    live = busy(entity)
    queued = intake.post(entity, "A", author="alice").idea
    once = ideas.withdraw(queued, "alice")
    twice = ideas.withdraw(queued, "alice")
    assert (
        once.withdrawn
        and twice.withdrawn
        and once.reason == twice.reason == f"idea {queued.pk} is withdrawn: no cycle will take it"
    )
    assert queued.withdrawn_at is not None and ideas.state_of(queued) == "withdrawn"
    machine.settle(live, Cycle.Status.SKIPPED, reason="done")
    assert intake.deliver_queued() == 0, "a withdrawn idea opens nothing"
    taken = intake.post(entity, "B", author="alice")
    assert taken.opened
    refused = ideas.withdraw(taken.idea, "alice")
    assert not refused.withdrawn and refused.reason.startswith(
        f"idea {taken.idea.pk} was already taken by cycle {taken.cycle.pk}"
    )
    taken.idea.refresh_from_db()
    assert taken.idea.status == Idea.Status.TAKEN


def test_a_withdrawn_idea_is_never_taken():
    entity = looped()
    idea = Idea.objects.create(entity=entity, text="A", author="alice")
    ideas.withdraw(idea, "alice")
    assert not opening._take_idea(idea, busy(entity))
    idea.refresh_from_db()
    assert idea.status == Idea.Status.WITHDRAWN and idea.cycle_id is None


# --- An agent's post --------------------------------------------------------------------


def approval(idea) -> Card:
    idea.refresh_from_db()
    return idea.card


def test_an_agents_post_waits_on_a_persons_approval_then_opens(alice, django_capture_on_commit_callbacks):
    entity = looped()
    posted = intake.post(entity, "Try a table.", author="alice (agent token bot)", is_agent=True)
    assert not posted.opened and posted.reason == "waiting on a person's approval" and posted.cycle is None
    card = approval(posted.idea)
    assert (card.kind, card.producer, card.key) == ("grant", "loop-idea", f"loop:idea:{posted.idea.pk}")
    assert [o["value"] for o in card.options] == ["approve", "decline"]
    assert "“Try a table.”" in card.text
    assert abs((card.expires_at - timezone.now()) - timedelta(hours=72)) < timedelta(minutes=1)
    assert ideas.next_idea(entity) is None and ideas.place(posted.idea) == "waiting on a person's approval"
    assert intake.deliver_queued() == 0 and not Cycle.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(card.pk, user=alice, is_agent=False, choice="approve", via="dashboard")
    posted.idea.refresh_from_db()
    assert posted.idea.approved and posted.idea.status == Idea.Status.TAKEN
    assert Cycle.objects.get().idea_id == posted.idea.pk


def test_a_declined_or_expired_approval_withdraws_the_idea(alice, django_capture_on_commit_callbacks):
    entity = looped(loop={"reviewDeadlineHours": 1})
    declined = intake.post(entity, "A", author="agent", is_agent=True).idea
    expired = intake.post(entity, "B", author="agent", is_agent=True).idea
    with django_capture_on_commit_callbacks(execute=True):
        answer_card(approval(declined).pk, user=alice, is_agent=False, choice="decline", via="dashboard")
        assert expire_due_cards(now=timezone.now() + timedelta(hours=2)) == 1
    for idea in (declined, expired):
        idea.refresh_from_db()
        assert idea.status == Idea.Status.WITHDRAWN and not idea.approved
    assert not Cycle.objects.exists()


def test_a_person_withdrawing_an_agents_idea_cancels_its_card(alice):
    idea = intake.post(looped(), "A", author="agent", is_agent=True).idea
    ideas.withdraw(idea, "alice", user=alice)
    assert approval(idea).status == Card.Status.CANCELLED


# --- Hearing back -----------------------------------------------------------------------


def shipped(cycle: Cycle) -> None:
    Round.objects.filter(cycle=cycle, number=1).update(
        status=Round.Status.MERGED,
        summary="Lead with the revenue figure",
        files=[{"path": "features/triage/triage.scenario.md", "content": "new\n"}],
        merge_sha="a" * 40,
    )


def test_the_author_hears_back_with_the_measured_deltas():
    entity = looped()
    posted = intake.post(entity, "Lead with the numbers.", author="alice")
    shipped(posted.cycle)
    record = {"verdict": "validated", "perMetric": [{"metric": "accuracy", "baseline": 0.6, "observed": 0.9}]}
    machine.settle(posted.cycle, Cycle.Status.VALIDATED, reason="better", watch_verdict=record)
    assert Lesson.objects.filter(cycle=posted.cycle).exists()
    notice = Notice.objects.get(producer="loop-idea")
    assert notice.title == "Your idea for Triage: validated: the change is kept"
    assert f"Idea {posted.idea.pk}, “Lead with the numbers.”, ran as cycle {posted.cycle.pk}" in notice.text
    assert "Measured: accuracy 0.6 → 0.9." in notice.text
    assert ideas.state_of(Idea.objects.get()) == "validated"


def test_a_declined_idea_is_answered_with_the_proposals_summary():
    entity = looped()
    posted = intake.post(entity, "Change the grading.", author="alice")
    Round.objects.filter(cycle=posted.cycle).update(
        status=Round.Status.SKIPPED, summary="Declined: the idea changes what the entity is measured by"
    )
    machine.settle(posted.cycle, Cycle.Status.SKIPPED, reason="the proposer had nothing to propose")
    notice = Notice.objects.get(producer="loop-idea")
    assert "skipped" in notice.title
    assert "The proposal: Declined: the idea changes what the entity is measured by" in notice.text


def test_a_failed_idea_cycle_is_answered_with_the_error():
    posted = intake.post(looped(), "A", author="alice")
    Round.objects.filter(cycle=posted.cycle).update(status=Round.Status.FAILED, error="the analysis failed: timeout")
    machine.settle(posted.cycle, Cycle.Status.FAILED, reason="the analysis failed: timeout; alice skipped the retry")
    assert "The error: the analysis failed: timeout" in Notice.objects.get(producer="loop-idea").text


def test_the_kill_switch_settle_tells_nobody_and_an_ordinary_cycle_tells_nobody():
    entity = looped()
    posted = intake.post(entity, "A", author="alice")
    machine.settle(
        posted.cycle, Cycle.Status.SKIPPED, reason="the loop was switched off during the analysis", lesson=False
    )
    machine.settle(busy(looped("other")), Cycle.Status.SKIPPED, reason="done")
    assert not Notice.objects.filter(producer="loop-idea").exists()


def test_a_broken_announcement_never_fails_the_settle(monkeypatch):
    posted = intake.post(looped(), "A", author="alice")

    def broken(cycle):
        raise RuntimeError("the lesson store is down")

    monkeypatch.setattr(ideas, "hear_back_text", broken)
    settled = machine.settle(posted.cycle, Cycle.Status.SKIPPED, reason="done")
    assert settled.status == Cycle.Status.SKIPPED and settled.phase == Cycle.Phase.SETTLED


# --- The race ---------------------------------------------------------------------------


def test_post_sweep_and_landing_grade_in_turn_make_one_cycle():
    entity = looped()
    live = busy(entity)
    first = intake.post(entity, "A", author="alice").idea
    machine.settle(live, Cycle.Status.SKIPPED, reason="done")
    second = intake.post(entity, "B", author="alice")
    assert intake.deliver_queued() == 0
    assert trigger.on_landed([graded(entity, bad=True).pk]) == 0
    first.refresh_from_db()
    assert not second.opened and first.status == Idea.Status.TAKEN
    assert Cycle.objects.filter(entity=entity, analysed=True).exclude(pk=live.pk).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_post_sweep_and_landing_grade_racing_make_one_cycle():
    if connection.vendor != "postgresql":
        pytest.skip("real parallel workers need Postgres")
    entity = looped()
    live = busy(entity)
    first = intake.post(entity, "A", author="alice").idea
    machine.settle(live, Cycle.Status.SKIPPED, reason="done")
    grade = graded(entity, bad=True)
    each_at_once(  # a step's error is raised here
        [
            lambda: intake.post(entity, "B", author="bob"),
            lambda: intake.deliver_queued(),
            lambda: trigger.on_landed([grade.pk]),
        ]
    )
    opened = Cycle.objects.filter(entity=entity, analysed=True).exclude(pk=live.pk)
    assert opened.count() == 1 and Cycle.objects.filter(claim=entity.pk).count() == 1
    first.refresh_from_db()
    assert first.status == Idea.Status.TAKEN and opened.get().idea_id == first.pk
    assert Idea.objects.filter(status=Idea.Status.QUEUED).count() == 1
