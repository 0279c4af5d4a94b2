"""Windows that wait: the record, its clock, the stall, awaitingPerson (seed 003 "A window that waits"; R21.4-R21.10).

Windows are the dicts an entity's own window() answers; the records, cycles
and holds are real rows; time moves with time_machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from evolution.loop import trigger
from evolution.models import Cycle, Supervision, WaitingWindow
from evolution.presets import base
from evolution.reads import fleet
from evolution.steering import cadence, needs_you
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
PERSON = {"what": "score PR #16", "url": "https://github.com/acme/site/pull/16"}


def not_ready(have: int = 2, need: int = 3, **extra) -> dict:
    """A window that waits on scored series PRs (an entity's own window(), not ready)."""
    return {
        "from": None, "to": START.isoformat(), "runIds": [], "metrics": [], "ready": False,
        "reason": f"{have} of {need} series PRs scored",
        "progress": {"have": have, "need": need, "unit": "scored series PRs"},
        **extra,
    }  # fmt: skip


def ready() -> dict:
    return {"from": None, "to": START.isoformat(), "runIds": [], "metrics": [], "ready": True, "reason": "full",
            "progress": {"have": 3, "need": 3, "unit": "scored series PRs"}}  # fmt: skip


def gates(entity=None, now=None) -> list[tuple[str, str]]:
    return [(i["gate"], i["clause"]) for i in needs_you.items(now, entity=entity)]


# --- The record ---------------------------------------------------------------------


def test_a_not_ready_window_is_recorded_with_what_it_waits_on() -> None:
    entity = looped()
    row = cadence.record_window(entity, not_ready(awaitingPerson=PERSON), START)
    row = WaitingWindow.objects.get(pk=row.pk)
    assert (row.have, row.need, row.unit) == (2, 3, "scored series PRs")
    assert row.reason == "2 of 3 series PRs scored" and row.awaiting_person == PERSON
    assert row.moved_at == row.sampled_at == START and row.ended_at is None


def test_the_count_clock_moves_only_when_have_changes() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(2), START)
    cadence.record_window(entity, not_ready(2), START + timedelta(hours=5))
    row = WaitingWindow.objects.get(entity=entity)
    assert row.moved_at == START and row.sampled_at == START + timedelta(hours=5)
    cadence.record_window(entity, not_ready(1), START + timedelta(hours=6))
    assert WaitingWindow.objects.get(entity=entity).moved_at == START + timedelta(hours=6)


def test_a_ready_answer_ends_the_wait_and_the_next_wait_starts_its_own_clock() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(2), START)
    cadence.record_window(entity, ready(), START + timedelta(hours=1))
    row = WaitingWindow.objects.get(entity=entity)
    assert row.ended_at == START + timedelta(hours=1)
    assert gates() == []
    cadence.record_window(entity, not_ready(2), START + timedelta(hours=2))
    row = WaitingWindow.objects.get(entity=entity)
    assert row.ended_at is None and row.moved_at == START + timedelta(hours=2)  # same count, a new wait


def test_a_cycle_started_during_a_wait_restarts_its_clock() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(2), START)
    Cycle.objects.create(entity=entity, key="test:request", origin=Cycle.Origin.REQUEST, analysed=True,
                         phase=Cycle.Phase.SETTLED, status=Cycle.Status.SKIPPED,
                         started_at=START + timedelta(hours=3), completed_at=START + timedelta(hours=4))  # fmt: skip
    cadence.record_window(entity, not_ready(2), START + timedelta(hours=5))
    assert WaitingWindow.objects.get(entity=entity).moved_at == START + timedelta(hours=5)


def test_an_older_sample_never_undoes_a_newer_one() -> None:
    entity = looped()
    cadence.record_window(entity, ready(), START + timedelta(hours=2))
    cadence.record_window(entity, not_ready(2), START + timedelta(hours=1))  # a slow look lands late
    row = WaitingWindow.objects.get(entity=entity)
    assert row.ended_at == START + timedelta(hours=2) and row.sampled_at == START + timedelta(hours=2)


# --- Load errors ------------------------------------------------------------------------


def test_a_ready_window_carrying_awaiting_person_is_a_load_error() -> None:
    entity = looped()
    with pytest.raises(base.RuleError) as refused:
        cadence.record_window(entity, {**ready(), "awaitingPerson": PERSON}, START)
    assert "window() answered ready with awaitingPerson" in str(refused.value) and str(entity) in str(refused.value)
    assert not WaitingWindow.objects.exists()


@pytest.mark.parametrize(
    ("awaiting", "words"),
    [
        ({"what": "x" * 201}, "201 characters"),
        ({"url": "https://example.org"}, "awaitingPerson must be {what, url?}"),
        ("score it", "awaitingPerson must be {what, url?}"),
        ({"what": "score it", "url": 16}, "awaitingPerson.url must be a string"),
    ],
)
def test_an_awaiting_person_of_the_wrong_shape_is_refused(awaiting, words) -> None:
    with pytest.raises(base.RuleError, match="window\\(\\)") as refused:
        cadence.record_window(looped(), not_ready(awaitingPerson=awaiting), START)
    assert words in str(refused.value)


def test_progress_must_count_in_whole_numbers() -> None:
    with pytest.raises(base.RuleError, match="progress.have"):
        cadence.record_window(looped(), {**not_ready(), "progress": {"have": "two", "need": 3}}, START)


# --- Window and stall items -----------------------------------------------------------


def test_awaiting_person_is_a_window_item_with_the_persons_url() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(awaitingPerson=PERSON), START)
    [item] = needs_you.items(START + timedelta(days=30))  # never timed out
    assert item["gate"] == "window" and item["clause"] == "waiting on you: score PR #16"
    assert item["url"] == PERSON["url"] and item["next"].startswith(f"a person does it at {PERSON['url']}")
    assert item["until"] is None and item["targetId"] == entity.slug


def test_a_window_that_stops_moving_becomes_a_stall_after_two_weeks() -> None:
    entity = looped()
    with time_machine.travel(START, tick=False):
        cadence.record_window(entity, not_ready(2))
    with time_machine.travel(START + timedelta(hours=335), tick=False):
        cadence.record_window(entity, not_ready(2))  # sampled again, the count did not move
        assert gates() == []
    with time_machine.travel(START + timedelta(hours=361), tick=False):
        [(gate, clause)] = gates()
    assert gate == "stall"
    assert clause == (
        "the next cycle's window has not moved in 15 days (2 of 3 scored series PRs): 2 of 3 series PRs scored"
    )


def test_windowStalledAfterHours_is_read_from_the_nearest_tier_and_0_never_stalls() -> None:  # noqa: N802
    daily = looped("daily", loop={"windowStalledAfterHours": 24})
    never = looped("never", loop={"windowStalledAfterHours": 0})
    brainwide = looped("brainwide", manifest={"loop": {"windowStalledAfterHours": 48}})
    for entity in (daily, never, brainwide):
        cadence.record_window(entity, not_ready(1), START)
    found = {i["targetId"]: i["gate"] for i in needs_you.items(START + timedelta(hours=25))}
    assert found == {"daily": "stall"}
    found = {i["targetId"]: i["gate"] for i in needs_you.items(START + timedelta(days=400))}
    assert found == {"daily": "stall", "brainwide": "stall"}


def test_a_window_naming_a_person_is_never_also_a_stall() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(awaitingPerson=PERSON), START)
    assert [g for g, _ in gates(now=START + timedelta(days=60))] == ["window"]
    assert cadence.stalled(entity, WaitingWindow.objects.get(entity=entity), START + timedelta(days=60)) is False


def test_a_window_with_no_progress_never_stalls() -> None:
    entity = looped()
    cadence.record_window(entity, {"ready": False, "reason": "no analyses before 06:00 UTC", "runIds": []}, START)
    assert gates(now=START + timedelta(days=60)) == []


def test_window_items_are_left_out_while_off_held_or_owned_by_a_cycle() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(awaitingPerson=PERSON), START)
    assert len(gates(now=START)) == 1
    owner = Cycle.objects.create(entity=entity, key="test:owner", claim=entity.pk, origin=Cycle.Origin.GRADE,
                                 analysed=True, phase=Cycle.Phase.WATCHING, started_at=START)  # fmt: skip
    assert gates(now=START) == []
    Cycle.objects.filter(pk=owner.pk).update(claim=None, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED)
    Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="alice", reason="quiet week")
    assert gates(now=START) == []
    Supervision.objects.create(kind=Supervision.Kind.RELEASE, entity=entity, actor="alice", reason="back")
    assert len(gates(now=START)) == 1
    type(entity).objects.filter(pk=entity.pk).update(loop_enabled=False)
    assert gates(now=START) == []


# --- The sweep keeps the records ----------------------------------------------------------


def test_the_sweep_drops_the_records_of_entities_out_of_the_loop_or_gone() -> None:
    off, gone, kept = looped("off"), looped("gone"), looped("kept")
    for entity in (off, gone, kept):
        cadence.record_window(entity, not_ready(), START)
    type(off).objects.filter(pk=off.pk).update(loop_enabled=False)
    type(gone).objects.filter(pk=gone.pk).update(present=False)
    trigger.sweep(START + timedelta(hours=1))
    assert list(WaitingWindow.objects.values_list("entity__slug", flat=True)) == ["kept"]


def test_the_sweep_ends_the_wait_of_a_held_entity_so_a_pause_never_counts_toward_a_stall() -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(2), START)
    Supervision.objects.create(kind=Supervision.Kind.HOLD, entity=entity, actor="alice", reason="quiet week",
                               created_at=START + timedelta(days=1))  # fmt: skip
    trigger.sweep(START + timedelta(days=1, hours=1))
    assert WaitingWindow.objects.get(entity=entity).ended_at == START + timedelta(days=1, hours=1)
    Supervision.objects.create(kind=Supervision.Kind.RELEASE, entity=entity, actor="alice", reason="back",
                               created_at=START + timedelta(days=20))  # fmt: skip
    cadence.record_window(entity, not_ready(2), START + timedelta(days=20, hours=1))
    assert gates(now=START + timedelta(days=21)) == []  # a new wait: 2 of 3 since the release, not since START
    assert WaitingWindow.objects.get(entity=entity).moved_at == START + timedelta(days=20, hours=1)


def _own_window(tmp_path, settings, body: str, **loop):
    """An entity in the loop whose brain module declares ``window(ctx)`` with ``body`` (run by the real sandbox)."""
    from tests.grading.grading_helpers import brain_repo

    source = "def window(ctx):\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())
    checkout, commit = brain_repo(tmp_path / "brain", {"features/triage/triage.loop.py": source})
    settings.BRAIN_CHECKOUT = str(checkout.path)
    return looped(loop=loop, loop_module_path="features/triage/triage.loop.py", commit=commit)


#: The brain's window(): two of three scored PRs and a person asked for the third on March 2nd, three later.
WAITS_ON_A_PERSON = f"""
first = ctx.now.day == 2
w = {{'from': None, 'to': ctx.now.isoformat(), 'runIds': [], 'metrics': [], 'ready': False,
     'reason': 'series PRs scored', 'progress': {{'have': 2 if first else 3, 'need': 3, 'unit': 'scored series PRs'}}}}
if first:
    w['awaitingPerson'] = {PERSON!r}
return w
"""


def test_a_scheduled_look_records_the_window_an_entitys_own_window_answers(tmp_path, settings) -> None:
    entity = _own_window(tmp_path, settings, WAITS_ON_A_PERSON, trigger={"every": 24})
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0  # not ready: the look opens nothing
    row = WaitingWindow.objects.get(entity=entity)
    assert row.awaiting_person == PERSON and row.have == 2 and Cycle.objects.count() == 0
    with time_machine.travel(START + timedelta(hours=24), tick=False):
        trigger.sweep()
    row.refresh_from_db()
    assert row.awaiting_person is None and row.have == 3 and row.moved_at == START + timedelta(hours=24)


def test_a_window_that_throws_leaves_the_record_as_it_was(tmp_path, settings, caplog) -> None:
    entity = _own_window(tmp_path, settings, "raise RuntimeError('the sampler broke')", trigger={"every": 1})
    cadence.record_window(entity, not_ready(2), START - timedelta(hours=2))
    with time_machine.travel(START, tick=False):
        trigger.sweep()
    assert "the scheduled look was withheld" in caplog.text and "the sampler broke" in caplog.text
    row = WaitingWindow.objects.get(entity=entity)
    assert row.moved_at == START - timedelta(hours=2) and row.sampled_at == START - timedelta(hours=2)


def test_a_scheduled_look_refuses_a_ready_window_naming_a_person(tmp_path, settings, caplog) -> None:
    body = f"return {{**ctx.preset.window(ctx), 'ready': True, 'awaitingPerson': {PERSON!r}}}"
    _own_window(tmp_path, settings, body, trigger={"every": 1})
    with time_machine.travel(START, tick=False):
        assert trigger.sweep() == 0
    assert "window() answered ready with awaitingPerson" in caplog.text
    assert not WaitingWindow.objects.exists() and Cycle.objects.count() == 0


# --- loop_status reads the record, never the brain ---------------------------------------


def test_loop_status_says_what_the_window_waits_on_without_running_window(monkeypatch) -> None:
    entity = looped()
    cadence.record_window(entity, not_ready(2, awaitingPerson=PERSON), START)

    def never(*args, **kwargs):
        raise AssertionError("the fleet read ran the brain's window()")

    monkeypatch.setattr(trigger, "request_window", never)
    monkeypatch.setattr(trigger, "repair_window", never)
    (row,) = fleet.loop_status(entity, now=START)["entities"]
    assert row["state"] == "window"
    assert row["next"] == "2 of 3 scored series PRs · waiting on you: score PR #16."
    assert row["waits"]["awaitingPerson"] == PERSON and row["waits"]["progress"]["have"] == 2
    assert [i["gate"] for i in row["needsYou"]] == ["window"]
    (fleet_row,) = fleet.fleet(now=START)
    assert fleet_row["needsYou"][0]["clause"] == "waiting on you: score PR #16"
