"""Lock groups: one live change per group, the Accept as arbiter, confounded watches, the clean base (seed 003).

CONFORMANCE group 19 (R19.4–R19.11, R19.17), R15.10, R15.11, R6.18, R18.18; and
the judge resolved when the cycle opens (R7.19, R24.13).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from evolution.loop import machine, opening
from evolution.models import Cycle, Idea, Round
from evolution.presets import repair
from evolution.steering import groups
from grading.models import Entity
from hitl.models import Notice
from tests.concurrency import each_at_once
from tests.evolution.loop_helpers import graded, history, looped, proposed_round
from tests.evolution.watch_helpers import HOUR, T0, made_grade, pulse, refreshed, shipped

MINUTE = timedelta(minutes=1)

pytestmark = pytest.mark.django_db

AUDIENCE = {"loop": {"groups": {"audience": {}}, "group": ["audience"]}}


def member(slug: str, *, group: dict | None = None, **loop) -> object:
    """A repair workflow in lock group ``audience`` (declared in the manifest with ``group``'s terms)."""
    manifest = {"loop": {"groups": {"audience": group or {}}, "group": ["audience"]}}
    return looped(slug, loop=loop, manifest=manifest)


def holding(entity, phase: str, *, pr: int = 7, merged_at=None) -> Cycle:
    """A cycle of ``entity`` past its Accept in ``phase`` with an open (or merged) PR."""
    now = timezone.now()
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{phase}:{Cycle.objects.count()}",
        claim=entity.pk,
        origin=Cycle.Origin.GRADE,
        phase=phase,
        analysed=True,
        started_at=now - HOUR,
        moved_at=now - HOUR,
        merged_at=merged_at,
    )
    Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.MERGED if merged_at else Round.Status.APPLIED,
        pr_number=pr,
        pr_url=f"http://forge.example/pulls/{pr}/",
        merge_sha="b" * 40 if merged_at else "",
    )
    return cycle


# --- The terms ----------------------------------------------------------------------------------


def test_a_declared_group_locks_and_lets_repair_bypass_by_default():
    layout = member("layout")
    assert groups.declared(layout) == {"audience": {"lock": True, "repair": "bypass"}}
    assert groups.locking(layout) == []  # a repair member bypasses a busy group by default
    assert groups.locking(member("idea", group={"repair": "wait"})) == ["audience"]
    assert groups.locking(member("publish", group={"lock": False, "repair": "wait"})) == []


# --- The lock -----------------------------------------------------------------------------------


def test_a_sibling_watching_refuses_a_members_cycle_naming_the_group_the_holder_and_its_pr():
    layout = member("layout", group={"repair": "wait"})
    publish = member("publish", group={"repair": "wait"})
    holder = holding(publish, Cycle.Phase.WATCHING, pr=7, merged_at=timezone.now() - HOUR)
    history(layout, "bbb")
    result = machine.open_cycle(layout, origin=Cycle.Origin.REQUEST)
    assert not result.opened
    assert result.reason == (
        "lock group audience is held: a change to workflow publish is still watching its merged change "
        f"(PR #7) (cycle {holder.pk})"
    )


@pytest.mark.parametrize(
    "phase",
    [Cycle.Phase.APPLYING, Cycle.Phase.MERGE_WAIT, Cycle.Phase.CHECKING, Cycle.Phase.WATCHING, Cycle.Phase.REVERTING],
)
def test_every_phase_past_the_accept_holds_the_group(phase):
    layout = member("layout", group={"repair": "wait"})
    holding(member("publish", group={"repair": "wait"}), phase)
    assert groups.refusal(layout) is not None


def test_a_regressed_change_whose_revert_is_awaited_holds_the_group():
    layout = member("layout", group={"repair": "wait"})
    cycle = holding(member("publish", group={"repair": "wait"}), Cycle.Phase.REVERTING)
    Cycle.objects.filter(pk=cycle.pk).update(status=Cycle.Status.REGRESSED)
    assert "regressed and waits on its revert" in groups.refusal(layout)


def test_a_proposal_waiting_on_a_person_holds_nothing():
    layout = member("layout", group={"repair": "wait"})
    holding(member("publish", group={"repair": "wait"}), Cycle.Phase.DECIDING)
    assert groups.refusal(layout) is None


def test_repair_bypass_lets_a_repair_member_open_while_the_group_is_busy():
    layout = member("layout")
    holding(member("publish"), Cycle.Phase.WATCHING, merged_at=timezone.now() - HOUR)
    assert opening.refusal(layout, origin=Cycle.Origin.REQUEST, now=timezone.now()) is None


def test_a_group_that_does_not_lock_holds_nothing():
    layout = member("layout", group={"lock": False, "repair": "wait"})
    holding(member("publish", group={"lock": False, "repair": "wait"}), Cycle.Phase.WATCHING)
    assert groups.refusal(layout) is None


def test_an_entity_outside_the_group_is_not_held():
    holding(member("publish", group={"repair": "wait"}), Cycle.Phase.WATCHING)
    assert groups.refusal(looped("loner")) is None


def test_a_queued_idea_waits_while_the_group_is_held():
    from evolution.loop import intake

    layout = member("layout", group={"repair": "wait"})
    holding(member("publish", group={"repair": "wait"}), Cycle.Phase.WATCHING)
    posted = intake.post(layout, "Lead with the strongest frame", author="alice")
    assert not posted.opened and "lock group audience is held" in posted.reason
    posted.idea.refresh_from_db()
    assert posted.idea.status == Idea.Status.QUEUED


# --- The Accept is the arbiter -------------------------------------------------------------------


def _deciding(entity, *, idea: Idea | None = None) -> Round:
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:deciding:{Cycle.objects.count()}",
        origin=Cycle.Origin.IDEA if idea else Cycle.Origin.GRADE,
        phase=Cycle.Phase.DECIDING,
        analysed=True,
        idea=idea,
    )
    return proposed_round(cycle, status=Round.Status.PROPOSED)


def test_an_accept_while_a_sibling_holds_the_group_is_skipped_naming_the_holder_and_its_idea_goes_back():
    layout = member("layout", group={"repair": "wait"})
    holder = holding(member("publish", group={"repair": "wait"}), Cycle.Phase.APPLYING)
    idea = Idea.objects.create(entity=layout, text="Shorter hooks", author="alice", status=Idea.Status.TAKEN)
    rnd = _deciding(layout, idea=idea)
    Idea.objects.filter(pk=idea.pk).update(cycle=rnd.cycle)
    machine.accept(rnd, decided_by="alice", now=timezone.now())
    cycle = refreshed(rnd.cycle)
    assert cycle.status == Cycle.Status.SKIPPED and cycle.claim is None
    assert (
        cycle.reason.startswith("Accepted by alice; set aside: lock group audience is held by")
        and f"cycle {holder.pk}" in cycle.reason
    )
    idea.refresh_from_db()
    assert idea.status == Idea.Status.QUEUED and idea.cycle is None


def test_an_accept_with_the_group_free_takes_the_claim_and_applies():
    layout = member("layout", group={"repair": "wait"})
    member("publish", group={"repair": "wait"})
    rnd = _deciding(layout)
    machine.accept(rnd, decided_by="alice", now=timezone.now())
    cycle = refreshed(rnd.cycle)
    rnd.refresh_from_db()
    # Claimed and applying, still open (the apply itself needs a forge, not run here: its step is queued).
    assert (cycle.phase, cycle.status, cycle.claim) == (Cycle.Phase.APPLYING, "", layout.pk)
    assert rnd.status == Round.Status.ACCEPTED and rnd.decided_by == "alice"


# --- Confounded by a sibling --------------------------------------------------------------------


def _watched(entity, *, judge=None) -> Cycle:
    """``entity``'s change merged at T0 and watched; its baseline window ended an hour before."""
    cycle = shipped(entity, merged_at=T0, judge=judge)
    Cycle.objects.filter(pk=cycle.pk).update(window={"to": (T0 - HOUR).isoformat(), "runIds": []})
    return refreshed(cycle)


def _sibling_merged(entity, at) -> Cycle:
    cycle = holding(entity, Cycle.Phase.SETTLED, pr=9, merged_at=at)
    Cycle.objects.filter(pk=cycle.pk).update(status=Cycle.Status.VALIDATED, claim=None, completed_at=at)
    return cycle


def heartbeat_member(slug: str) -> object:
    return pulse(slug, manifest={"loop": {"groups": {"audience": {}}, "group": ["audience"]}})


def test_a_sibling_merge_during_the_watch_settles_it_unvalidated_confounded_naming_the_other_change():
    pulse_a, pulse_b = heartbeat_member("pulse"), heartbeat_member("beat")
    cycle = _watched(pulse_a)
    other = _sibling_merged(pulse_b, T0 + 10 * MINUTE)
    for i in range(5):
        made_grade(pulse_a, T0 + (20 + i) * MINUTE)
    with time_machine.travel(T0 + HOUR, tick=False):
        assert machine.evaluate(cycle, T0 + HOUR) == Cycle.Status.UNVALIDATED
    cycle = refreshed(cycle)
    assert cycle.confounded_by["cycle"] == other.pk and cycle.confounded_by["entity"] == "heartbeat:beat"
    assert cycle.reason.startswith(f"confounded: heartbeat:beat's change (cycle {other.pk}")
    assert cycle.watch_verdict["verdict"] == "validated"  # the reading is kept, never acted on
    assert refreshed(other).confounded_by is None  # the holder writes its own row only


def test_a_confounded_regressed_reading_is_not_reverted():
    pulse_a, pulse_b = heartbeat_member("pulse"), heartbeat_member("beat")
    cycle = _watched(pulse_a)
    _sibling_merged(pulse_b, T0 + 10 * MINUTE)
    made_grade(pulse_a, T0 + 20 * MINUTE, bad=True)
    made_grade(pulse_a, T0 + 21 * MINUTE, bad=True)
    with time_machine.travel(T0 + HOUR, tick=False):
        machine.evaluate(cycle, T0 + HOUR)
    cycle = refreshed(cycle)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.phase == Cycle.Phase.SETTLED
    assert cycle.watch_verdict["verdict"] == "regressed"
    assert not cycle.rounds.exclude(revert_pr_number=None).exists()


def test_a_sibling_change_before_the_baseline_ended_does_not_confound():
    pulse_a, pulse_b = heartbeat_member("pulse"), heartbeat_member("beat")
    cycle = _watched(pulse_a)
    _sibling_merged(pulse_b, T0 - 2 * HOUR)
    for i in range(5):
        made_grade(pulse_a, T0 + (20 + i) * MINUTE)
    with time_machine.travel(T0 + HOUR, tick=False):
        assert machine.evaluate(cycle, T0 + HOUR) == Cycle.Status.VALIDATED
    assert refreshed(cycle).confounded_by is None


def test_a_confounded_watch_measured_nothing():
    from evolution.core.outcomes import strength
    from evolution.steering import autonomy

    pulse_a, pulse_b = heartbeat_member("pulse"), heartbeat_member("beat")
    Entity.objects.filter(pk=pulse_a.pk).update(terms=_autonomous(pulse_a.terms))
    pulse_a.refresh_from_db()
    cycle = _watched(pulse_a)
    Round.objects.filter(cycle=cycle).update(merge_gate=autonomy.AUTO)  # shipped through an autonomous merge
    Cycle.objects.filter(pk=cycle.pk).update(analysed=True)  # a proposal's cycle (the helper's row is bare)
    _sibling_merged(pulse_b, T0 + 10 * MINUTE)
    for i in range(5):
        made_grade(pulse_a, T0 + (20 + i) * MINUTE)
    with time_machine.travel(T0 + HOUR, tick=False):
        machine.evaluate(cycle, T0 + HOUR)
        cycle = refreshed(cycle)
        assert cycle.watch_verdict["n"] == 5  # the count read five good runs; confounded, they measured nothing
        assert strength(cycle) == "blind"
        # The breaker asks the same question of its settles: an unattended change nothing measured pauses.
        assert (
            f"cycle {cycle.pk} shipped unattended and another change confounded its watch (counted as blind)"
            in autonomy.paused(pulse_a)
        )
        assert autonomy.gates(pulse_a).decide == autonomy.HUMAN


def _autonomous(terms: dict) -> dict:
    """``terms`` with both gates auto (the breaker reads only an entity whose change can ship unattended)."""
    loop = dict(terms.get("loop") or {})
    loop["autonomy"] = {**(loop.get("autonomy") or {}), "decide": "auto", "merge": "auto"}
    return {**terms, "loop": loop}


# --- The clean base -------------------------------------------------------------------------------


def test_a_members_repair_window_counts_only_runs_graded_after_the_group_last_changed():
    layout, publish = member("layout"), member("publish")
    now = timezone.now()
    history(layout, "bbbbb", start=now - 30 * MINUTE)
    changed = now - 10 * MINUTE
    _sibling_merged(publish, changed)
    late = [graded(layout, bad=True, at=now - timedelta(minutes=5 - i)) for i in range(2)]
    assert groups.changed_at(layout) == changed
    window = repair.repair_window(layout, layout.terms, anchor=None, now=now)
    assert window["runIds"] == [str(g.execution_id) for g in late]
    assert "since lock group audience last changed" in window["reason"]


def test_outside_any_group_the_window_is_as_before():
    loner = looped("loner")
    history(loner, "bbbbb")
    assert groups.changed_at(loner) is None
    assert len(repair.repair_window(loner, loner.terms, anchor=None, now=timezone.now())["runIds"]) == 5


# --- The judge at the opening ---------------------------------------------------------------------


def test_a_cycle_pins_the_judge_it_resolves_not_the_opening_grades_copy():
    entity = looped("triage")
    history(entity, "bb")
    made = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
    assert made.opened
    assert made.cycle.judge == {
        "model": "none",
        "method": "none",
        "method_hash": "none",
        "loop_hash": "",
        "role_hash": "none",
    }


def test_an_entity_with_no_graded_run_pins_a_real_judge():
    entity = looped("fresh", evaluation={"method": "default"})
    made = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
    assert made.opened and made.cycle.judge["method"] == "default" and made.cycle.judge["method_hash"]


def test_a_judge_that_cannot_be_resolved_skips_the_cycle_with_a_notice_naming_the_file_and_proposes_nothing():
    entity = looped("renamed", evaluation={"method": "concise"})
    made = machine.open_cycle(entity, origin=Cycle.Origin.REQUEST)
    assert not made.opened
    cycle = made.cycle
    assert cycle.status == Cycle.Status.SKIPPED and cycle.claim is None and not cycle.rounds.exists()
    assert "constitution/Evaluation/Methods/concise.md not found" in cycle.reason
    notice = Notice.objects.get(kind="judge-unresolved")
    assert "concise" in notice.text and f"cycle {cycle.pk}" in notice.title


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_two_members_accepted_at_once_exactly_one_wins(monkeypatch):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("real parallel workers need Postgres")
    monkeypatch.setitem(machine.STEPS, "apply", lambda round_id: None)
    layout = member("layout", group={"repair": "wait"})
    publish = member("publish", group={"repair": "wait"})
    rounds = [_deciding(layout), _deciding(publish)]
    each_at_once([lambda rnd=rnd: machine.accept(rnd, decided_by="alice", now=timezone.now()) for rnd in rounds])
    cycles = [refreshed(rnd.cycle) for rnd in rounds]
    winners = [c for c in cycles if c.phase == Cycle.Phase.APPLYING]
    losers = [c for c in cycles if c.status == Cycle.Status.SKIPPED]
    assert len(winners) == 1 and len(losers) == 1
    assert "lock group audience is held" in losers[0].reason and f"cycle {winners[0].pk}" in losers[0].reason


def test_a_siblings_revert_merge_moves_the_clean_base():
    layout, publish = member("layout"), member("publish")
    now = timezone.now()
    regressed = _sibling_merged(publish, now - HOUR)
    reverted_at = now - 10 * MINUTE
    Round.objects.filter(cycle=regressed).update(revert_pr_number=12, revert_merged_at=reverted_at)
    assert groups.changed_at(layout) == reverted_at


def test_a_sibling_in_its_pre_merge_check_holds_the_group_and_says_so():
    layout = member("layout", group={"repair": "wait"})
    holder = holding(member("publish", group={"repair": "wait"}), Cycle.Phase.CHECKING)
    assert groups.refusal(layout) == (
        "lock group audience is held: a change to workflow publish is in its pre-merge check "
        f"(PR #7) (cycle {holder.pk})"
    )


def test_an_idea_waiting_behind_a_check_is_told_which_pr_is_checked():
    from evolution.steering.ideas import cycle_words

    holder = holding(member("publish"), Cycle.Phase.CHECKING)
    Cycle.objects.filter(pk=holder.pk).update(check_deadline=timezone.now() + HOUR)
    holder.refresh_from_db()
    assert cycle_words(holder).startswith(f"cycle {holder.pk}: the pre-merge check of PR #7, answering by ")
