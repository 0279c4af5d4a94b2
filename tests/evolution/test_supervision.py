"""Supervision: holds, releases, re-arms and dismissed failures (seed 003 "Supervision"; CONFORMANCE R16.4, R16.11,
R19.8, R20.2, R20.3, R20.18–R20.21, R20.25).

A hold refuses a new cycle with its reason and stands until a release; it
never stops a cycle already running, its watch or its revert. A group hold
stands on every member the group has when the loop asks. An agent holds at
once; its release, re-arm or dismissal waits on a person's approval card.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.loop import machine
from evolution.models import ActionLog, Cycle, Supervision
from evolution.steering import autonomy, supervision
from grading.models import Entity
from hitl.actions import answer_card, run_handler
from hitl.models import Card, Notice
from tests.evolution.forge_helpers import forge_brain
from tests.evolution.loop_helpers import looped, settled_cycle
from tests.evolution.test_merge_wait import regressed
from tests.evolution.watch_helpers import HOUR, T0, pulse, refreshed

pytestmark = pytest.mark.django_db

GROUPS = {"loop": {"groups": {"audience": {}, "ops": {"lock": False}}}}


def member(slug: str, groups: list[str], *, manifest: dict | None = None) -> Entity:
    """A workflow in the loop that joins ``groups`` (declared in the manifest)."""
    return looped(slug, loop={"group": groups}, manifest=manifest or GROUPS)


def refused(call, code: str) -> str:
    """Run ``call``; assert it raised Refusal with ``code``; return the detail."""
    with pytest.raises(supervision.Refusal) as raised:
        call()
    assert raised.value.code == code, raised.value.detail
    return raised.value.detail


# --- A hold stops new cycles ------------------------------------------------------------


def test_a_hold_refuses_a_new_cycle_with_its_reason_and_a_release_lets_it_open():
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="the billing team is migrating")
    answer = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
    assert answer.opened is False
    assert answer.reason == "held by alice: the billing team is migrating"
    assert answer.cycle.status == Cycle.Status.SKIPPED and answer.cycle.reason == answer.reason
    assert supervision.hold_refusal(entity) == answer.reason
    supervision.release(entity, actor="bob", reason="migration done")
    assert supervision.hold_refusal(entity) is None
    opened = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
    assert opened.opened is True and opened.cycle.claim == entity.pk


def test_every_producer_is_refused_while_held_the_trigger_too():
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="looking into it")
    for origin in (Cycle.Origin.GRADE, Cycle.Origin.CADENCE, Cycle.Origin.REQUEST):
        assert machine.open_cycle(entity, origin=origin).reason == "held by alice: looking into it"
    assert not Cycle.objects.filter(entity=entity, analysed=True).exists()


def test_a_hold_stands_while_the_newest_hold_or_release_row_is_a_hold():
    entity = looped("triage")
    with time_machine.travel(T0, tick=False):
        supervision.hold(entity, actor="alice", reason="first")
    with time_machine.travel(T0 + HOUR, tick=False):
        supervision.hold(entity, actor="bob", reason="still down this week")
    assert supervision.hold_refusal(entity) == "held by bob: still down this week"
    with time_machine.travel(T0 + 2 * HOUR, tick=False):
        supervision.release(entity, actor="carol", reason="recovered")
    assert supervision.hold_refusal(entity) is None
    # One release lifts it; a second finds nothing to release.
    detail = refused(lambda: supervision.release(entity, actor="carol", reason="again"), "precondition")
    assert detail == "nothing to release: no hold stands on scenario:triage"
    with time_machine.travel(T0 + 3 * HOUR, tick=False):
        supervision.hold(entity, actor="dave", reason="down again")
    assert supervision.hold_refusal(entity) == "held by dave: down again"
    # A re-arm or a dismissal is not a release.
    supervision.rearm(entity, actor="erin", reason="ack")
    assert supervision.hold_refusal(entity) == "held by dave: down again"


def test_a_hold_needs_a_reason_and_nothing_is_written_without_one():
    entity = looped("triage")
    for reason in ("", "   "):
        detail = refused(lambda r=reason: supervision.hold(entity, actor="alice", reason=r), "precondition")
        assert detail == "a hold needs a reason: say why the loop should stop for scenario:triage"
    assert not Supervision.objects.exists() and not ActionLog.objects.exists()
    assert supervision.hold_refusal(entity) is None


def test_releasing_an_entity_held_only_through_its_group_names_the_group():
    entity = member("layout", ["audience"])
    supervision.hold({"group": "audience"}, actor="kpi", reason="meetings 1.2/100 sends last week")
    detail = refused(lambda: supervision.release(entity, actor="bob", reason="x"), "precondition")
    assert detail.startswith("nothing to release: no hold stands on scenario:layout itself")
    assert "lock group audience" in detail and "release the group" in detail


# --- A hold never stops what is already running ------------------------------------------


@pytest.fixture
def forge(tmp_path, settings):
    return forge_brain(tmp_path, settings)


def test_a_hold_lets_a_watch_settle_and_its_revert_land(forge):
    entity = pulse()
    supervision.hold(entity, actor="alice", reason="stop while we look")
    # The helper merges a change, watches it regress under the hold, and the revert PR opens.
    cycle, shipped = regressed(forge, entity)
    assert shipped.revert_pr_number is not None
    with time_machine.travel(T0 + 2 * HOUR, tick=False):
        forge.forge.merge_pull(shipped.revert_pr_number, by="bob")
        assert machine.on_pull_event(shipped.revert_pr_number).phase == Cycle.Phase.SETTLED
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.claim is None
    assert cycle.rounds.get(number=1).revert_outcome == "merged"
    # With the revert landed the entity is free of its live cycle, and the hold is what refuses now.
    with time_machine.travel(T0 + 3 * HOUR, tick=False):
        assert machine.open_cycle(entity, origin=Cycle.Origin.REQUEST).reason == "held by alice: stop while we look"


def test_a_hold_taken_while_a_change_waits_to_merge_does_not_stop_the_wait(forge):
    from tests.evolution.test_merge_wait import waiting
    from tests.evolution.watch_helpers import open_pull

    entity = pulse()
    pull = open_pull(forge)
    cycle, _ = waiting(entity, pull)
    supervision.hold(entity, actor="alice", reason="hold everything")
    with time_machine.travel(T0 + 30 * timedelta(minutes=1), tick=False):
        forge.forge.merge_pull(pull.number, by="bob")
        assert machine.on_pull_event(pull.number).phase == Cycle.Phase.WATCHING


# --- Lock groups --------------------------------------------------------------------------


def test_a_group_hold_stands_on_every_member_and_only_on_members():
    layout, publish = member("layout", ["audience"]), member("publish", ["audience", "ops"])
    outsider = member("billing", ["ops"])
    supervision.hold({"group": "audience"}, actor="kpi", reason="meetings 1.2/100 sends")
    for entity in (layout, publish):
        answer = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
        assert answer.reason == "held by kpi (lock group audience): meetings 1.2/100 sends"
    assert machine.open_cycle(outsider, origin=Cycle.Origin.REQUEST).opened is True
    supervision.release({"group": "audience"}, actor="kpi", reason="meetings recovered")
    assert supervision.holds_many([layout, publish, outsider]) == {}


def test_a_group_hold_reads_membership_when_asked():
    layout = member("layout", ["audience"])
    later = member("idea", [])
    supervision.hold({"group": "audience"}, actor="alice", reason="one variable at a time")
    assert supervision.hold_refusal(later) is None
    # The brain sync puts ``idea`` into the group and takes ``layout`` out: the hold follows.
    joined = member("scratch", ["audience"])
    Entity.objects.filter(pk=later.pk).update(terms=joined.terms)
    Entity.objects.filter(pk=layout.pk).update(terms=member("scratch2", []).terms)
    later.refresh_from_db()
    layout.refresh_from_db()
    assert supervision.hold_refusal(later) == "held by alice (lock group audience): one variable at a time"
    assert supervision.hold_refusal(layout) is None


def test_a_name_the_manifest_does_not_declare_joins_no_group():
    entity = member("layout", ["ghost"])  # the entity lists it, the manifest does not declare it
    assert supervision.groups_of(entity) == []


def test_a_hold_on_a_group_the_manifest_does_not_declare_is_refused_naming_it():
    member("layout", ["audience"])
    detail = refused(lambda: supervision.hold({"group": "ghost"}, actor="alice", reason="x"), "refused")
    assert detail == (
        "lock group 'ghost' is not declared under loop.groups in constitution/MANIFEST.yaml (declared: audience, ops)"
    )
    refused(lambda: supervision.release({"group": "ghost"}, actor="alice", reason="x"), "refused")
    assert not Supervision.objects.exists()


def test_an_entity_hold_and_a_group_hold_are_released_separately():
    entity = member("layout", ["audience"])
    supervision.hold(entity, actor="alice", reason="mine")
    supervision.hold({"group": "audience"}, actor="kpi", reason="the group's")
    assert supervision.hold_refusal(entity) == "held by alice: mine"
    supervision.release(entity, actor="alice", reason="done")
    assert supervision.hold_refusal(entity) == "held by kpi (lock group audience): the group's"
    supervision.release({"group": "audience"}, actor="kpi", reason="done")
    assert supervision.hold_refusal(entity) is None


def test_holds_many_answers_the_fleet_in_a_fixed_number_of_queries():
    def fleet(count: int) -> list[Entity]:
        made = [member(f"m{count}-{i}", ["audience", "ops"]) for i in range(count)]
        for entity in made[::2]:
            supervision.hold(entity, actor="alice", reason=f"hold {entity.slug}")
        return made

    small, large = fleet(2), fleet(12)
    supervision.hold({"group": "ops"}, actor="kpi", reason="ops down")
    counts = []
    for entities in (small, large):
        with CaptureQueriesContext(connection) as queries:
            answer = supervision.holds_many(entities)
        counts.append(len(queries))
        for index, entity in enumerate(entities):
            expected = (
                f"held by alice: hold {entity.slug}" if index % 2 == 0 else "held by kpi (lock group ops): ops down"
            )
            assert answer[entity.pk] == expected
    assert counts[0] == counts[1] == 2
    # Nothing held, no group joined: one query.
    plain = looped("plain")
    with CaptureQueriesContext(connection) as queries:
        assert supervision.holds_many([plain]) == {}
    assert len(queries) == 1


# --- The action log -------------------------------------------------------------------------


def test_each_move_writes_an_action_log_row_against_what_it_steers():
    entity = member("layout", ["audience"])
    supervision.hold(entity, actor="alice", reason="why not")
    supervision.release(entity, actor="bob", reason="because")
    supervision.hold({"group": "audience"}, actor="kpi", reason="numbers down")
    supervision.rearm(entity, actor="carol", reason="seen the regressions")
    failed = settled_cycle(entity, Cycle.Status.FAILED, at=timezone.now())
    supervision.dismiss(failed, actor="dave", reason="a flaky gateway")
    rows = list(ActionLog.objects.order_by("created_at", "id").values_list("op", "subject", "actor", "summary"))
    assert rows == [
        ("hold", "scenario:layout", "alice", "hold scenario:layout: why not"),
        ("release", "scenario:layout", "bob", "release scenario:layout: because"),
        ("hold", "constitution/MANIFEST.yaml", "kpi", "hold lock group audience: numbers down"),
        ("rearm", "scenario:layout", "carol", "re-arm scenario:layout: seen the regressions"),
        ("dismiss", "scenario:layout", "dave", f"dismiss the failure of cycle {failed.pk} of scenario:layout: a flaky gateway"),
    ]  # fmt: skip
    group_row = ActionLog.objects.get(subject="constitution/MANIFEST.yaml")
    assert group_row.entity is None
    assert ActionLog.objects.filter(op="hold", subject="scenario:layout").get().entity == entity


# --- Re-arm and the breaker -------------------------------------------------------------------


def test_last_rearm_is_the_newest_rearm():
    entity = looped("triage")
    assert supervision.last_rearm(entity) is None
    with time_machine.travel(T0, tick=False):
        supervision.rearm(entity, actor="alice", reason="first")
    with time_machine.travel(T0 + HOUR, tick=False):
        supervision.rearm(entity, actor="bob", reason="second")
        supervision.hold(entity, actor="bob", reason="not a re-arm")
    assert supervision.last_rearm(entity) == T0 + HOUR


def test_a_rearm_is_what_lifts_the_breakers_pause():
    entity = looped("triage", loop={"autonomy": {"decide": "auto", "merge": "auto"}})
    for minutes in (10, 20):
        cycle = settled_cycle(entity, Cycle.Status.REGRESSED, at=T0 + timedelta(minutes=minutes))
        Cycle.objects.filter(pk=cycle.pk).update(merged_at=cycle.completed_at - timedelta(minutes=1))
    assert autonomy.paused(entity)
    with time_machine.travel(T0 + 30 * timedelta(days=1), tick=False):
        assert autonomy.paused(entity)  # no timer lifts it
        supervision.rearm(entity, actor="alice", reason="read both regressions")
    assert autonomy.paused(entity) is None
    assert supervision.last_rearm(entity) == T0 + 30 * timedelta(days=1)


# --- Failures ---------------------------------------------------------------------------------


def test_a_dismissed_failure_leaves_the_unread_failures_and_only_a_failure_is_dismissed():
    entity, other = looped("triage"), looped("billing")
    first = settled_cycle(entity, Cycle.Status.FAILED, at=T0)
    second = settled_cycle(entity, Cycle.Status.FAILED, at=T0 + HOUR)
    elsewhere = settled_cycle(other, Cycle.Status.FAILED, at=T0)
    kept = settled_cycle(entity, Cycle.Status.VALIDATED, at=T0 + 2 * HOUR)
    assert list(supervision.failures_unread(entity)) == [second, first]
    supervision.dismiss(first, actor="alice", reason="gateway outage")
    assert list(supervision.failures_unread(entity)) == [second]
    assert set(supervision.failures_unread()) == {second, elsewhere}
    row = Supervision.objects.get(kind=Supervision.Kind.DISMISS)
    assert (row.cycle, row.entity, row.actor, row.reason) == (first, entity, "alice", "gateway outage")
    again = refused(lambda: supervision.dismiss(first, actor="bob", reason=""), "precondition")
    assert again == f"nothing to dismiss: alice dismissed cycle {first.pk}'s failure already"
    not_failed = refused(lambda: supervision.dismiss(kept, actor="bob", reason=""), "precondition")
    assert not_failed == f"nothing to dismiss: cycle {kept.pk} did not fail (validated)"


# --- Agents -------------------------------------------------------------------------------------


def approve(card: Card, user, choice: str = supervision.APPROVE) -> None:
    """A person answers the approval card; its handler runs (after commit in production, here by hand)."""
    result = answer_card(card.pk, user=user, is_agent=False, choice=choice, via="dashboard")
    assert result.ok, result.detail
    run_handler(card.pk)


def test_an_agent_holds_at_once(alice):
    entity = looped("triage")
    asked = supervision.move("hold", entity, actor="agent:watcher of alice", reason="error rate spiking", agent=True)
    assert asked.applied and asked.card is None
    assert supervision.hold_refusal(entity) == "held by agent:watcher of alice: error rate spiking"
    assert not Card.objects.exists()


@pytest.mark.parametrize("op", ["release", "rearm"])
def test_an_agents_release_or_rearm_waits_on_a_persons_approval_and_applies_on_it(op, bob):
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="looking")
    asked = supervision.move(op, entity, actor="agent:kpi of alice", reason="numbers recovered", agent=True)
    assert not asked.applied
    card = asked.card
    assert (card.kind, card.producer, card.status) == (Card.Kind.GRANT, "loop-supervise", Card.Status.PENDING)
    assert [o["value"] for o in card.options] == ["approve", "decline"]
    assert "agent:kpi of alice asks to" in card.text and "numbers recovered" in card.text
    assert card.subject == "scenario:triage"
    assert not Supervision.objects.filter(kind=op).exists()  # nothing applied yet
    assert supervision.hold_refusal(entity) == "held by alice: looking"
    approve(card, bob)
    row = Supervision.objects.get(kind=op)
    assert row.actor == "agent:kpi of alice (approved by bob)" and row.reason == "numbers recovered"
    if op == "release":
        assert supervision.hold_refusal(entity) is None
    else:
        assert supervision.last_rearm(entity) == row.created_at


def test_each_agent_request_has_its_own_card():
    entity = looped("triage")
    first = supervision.move("rearm", entity, actor="agent:a", reason="one", agent=True).card
    second = supervision.move("rearm", entity, actor="agent:a", reason="one", agent=True).card
    assert first.pk != second.pk and first.key != second.key


def test_an_agents_dismissal_waits_on_approval_too(bob):
    entity = looped("triage")
    failed = settled_cycle(entity, Cycle.Status.FAILED, at=T0)
    asked = supervision.move("dismiss", entity, actor="agent:a", reason="known outage", agent=True, cycle=failed)
    assert not asked.applied and list(supervision.failures_unread(entity)) == [failed]
    approve(asked.card, bob)
    assert list(supervision.failures_unread(entity)) == []


def test_a_declined_or_expired_card_applies_nothing(bob):
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="looking")
    declined = supervision.move("release", entity, actor="agent:a", reason="please", agent=True).card
    approve(declined, bob, choice=supervision.DECLINE)
    expired = supervision.move("release", entity, actor="agent:a", reason="please", agent=True).card
    from hitl.actions import expire_card

    expire_card(expired.pk, now=expired.expires_at)
    run_handler(expired.pk)
    assert supervision.hold_refusal(entity) == "held by alice: looking"
    assert not Supervision.objects.filter(kind="release").exists()


def test_an_agent_asking_for_what_cannot_be_done_gets_no_card():
    entity = looped("triage")
    refused(lambda: supervision.move("release", entity, actor="agent:a", reason="", agent=True), "precondition")
    kept = settled_cycle(entity, Cycle.Status.VALIDATED, at=T0)
    refused(
        lambda: supervision.move("dismiss", entity, actor="agent:a", reason="", agent=True, cycle=kept), "precondition"
    )
    assert not Card.objects.exists()


def test_an_approval_that_can_no_longer_apply_says_so_in_a_notice(bob):
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="looking")
    card = supervision.move("release", entity, actor="agent:a", reason="please", agent=True).card
    supervision.release(entity, actor="alice", reason="I released it myself")
    approve(card, bob)
    assert Supervision.objects.filter(kind="release").count() == 1
    notice = Notice.objects.get(producer="loop-supervise")
    assert notice.title.startswith("Not applied: Approve: release scenario:triage")
    assert "nothing to release: no hold stands on scenario:triage" in notice.text
    assert Card.objects.get(pk=card.pk).handler_error == ""


def test_an_agent_cannot_approve_its_own_request(alice):
    entity = looped("triage")
    supervision.hold(entity, actor="alice", reason="looking")
    card = supervision.move("release", entity, actor="agent:a", reason="please", agent=True).card
    result = answer_card(card.pk, user=alice, is_agent=True, choice="approve", via="api")
    assert result.code == "unauthorized_responder"
    assert supervision.hold_refusal(entity) == "held by alice: looking"
