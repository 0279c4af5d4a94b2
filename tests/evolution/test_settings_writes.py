"""Loop-settings writes on a real git brain: loop_set, loop_widen, loop_join, dry runs, validation over every entity
the write reaches, comments kept, widenings refused and approved, the one lock and conflict, the kill switch.
"""

from __future__ import annotations

import threading

import pytest
import yaml
from django.db import connection

from evolution.models import ActionLog
from evolution.steering import settings as sw
from evolution.steering.settings import write as sw_write
from hitl.actions import answer_card, run_handler
from hitl.models import Card, Notice
from tests.concurrency import each_at_once
from tests.evolution.settings_helpers import (
    DIGEST,
    DIGEST_TEXT,
    MANIFEST,
    MANIFEST_TEXT,
    PRICING,
    PULSE,
    PULSE_TEXT,
    changed_lines,
    settings_brain,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings)


def frontmatter_of(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def approve(card_id: str, user) -> None:
    result = answer_card(card_id, user=user, is_agent=False, choice=sw.APPROVE, via="dashboard")
    assert result.ok, result.detail
    run_handler(card_id)  # the handler runs after commit; here, by hand


# --- Round trip: comments and formatting ------------------------------------------------------


def test_a_manifest_write_keeps_every_other_line_byte_for_byte(sb) -> None:
    answer = sw.loop_set(None, "loop.threshold", value=0.7, actor="alice")
    after = sb.show(MANIFEST)
    lost, added = changed_lines(MANIFEST_TEXT, after)
    assert lost == [] and added == ["  threshold: 0.7\n"]
    # The new key sits with its block, above the blank line and the comment that followed the block.
    assert "  cooldownHours: 6   # between cycles\n  threshold: 0.7\n" in after
    assert answer.commit == sb.head() and answer.changed
    row = ActionLog.objects.get()
    assert (row.actor, row.op, row.subject, row.entity) == ("alice", "loop_set", MANIFEST, None)
    assert row.commit == answer.commit and "+  threshold: 0.7" in row.diff
    # Synced at once: every entity that does not write its own threshold reads the new one.
    assert sb.digest.terms["loop"]["threshold"] == 0.7
    assert sb.digest.provenance["loop.threshold"] == "manifest"
    assert sb.pricing.terms["loop"]["threshold"] == 0.5


def test_changing_a_value_inside_a_flow_map_touches_only_that_line(sb) -> None:
    sw.loop_set(None, "evaluation.sample.maxPerDay", value=40, actor="alice")
    lost, added = changed_lines(MANIFEST_TEXT, sb.show(MANIFEST))
    assert lost == ["  sample: { rate: 1 }     # grade every run\n"]
    assert len(added) == 1 and "maxPerDay: 40" in added[0] and "# grade every run" in added[0]
    assert sb.digest.terms["evaluation"]["sample"] == {"rate": 1, "maxPerDay": 40}


def test_a_frontmatter_write_keeps_comments_formatting_and_the_body(sb) -> None:
    sw.loop_set(sb.digest, "loop.maxChangedLines", value=100, actor="alice")
    after = sb.show(DIGEST)
    lost, added = changed_lines(DIGEST_TEXT, after)
    assert lost == ["  maxChangedLines: 200\n"] and added == ["  maxChangedLines: 100\n"]
    assert after.endswith("---\nWrite the digest.\n---\nKeep it short.\n")
    assert sb.digest.terms["loop"]["maxChangedLines"] == 100
    assert ActionLog.objects.get().entity == sb.digest


def test_remove_drops_the_tiers_own_value_and_keeps_the_comments_around_it(sb) -> None:
    sw.loop_set(None, "loop.cooldownHours", op="remove", actor="alice")
    after = sb.show(MANIFEST)
    lost, added = changed_lines(MANIFEST_TEXT, after)
    assert lost == ["  cooldownHours: 6   # between cycles\n"] and added == []
    assert sb.digest.terms["loop"]["cooldownHours"] is None  # the engine's answer now
    sw.loop_set(sb.pricing, "loop.threshold", op="remove", actor="alice")
    assert "threshold" not in sb.show(PRICING)
    assert sb.pricing.terms["loop"]["threshold"] is None


def test_a_key_of_a_wholesale_block_copies_the_block_the_entity_sees(sb) -> None:
    sw.loop_set(sb.pricing, "loop.trigger.minFailures", value=3, actor="alice")
    written = frontmatter_of(sb.show(PRICING))["loop"]["trigger"]
    assert written == {"windowRuns": 5, "minFailures": 3, "every": None}  # the manifest's 5 kept
    assert sb.pricing.terms["loop"]["trigger"]["windowRuns"] == 5
    assert sb.pricing.provenance["loop.trigger.windowRuns"] == "entity"


def test_a_write_that_changes_nothing_commits_nothing(sb) -> None:
    head = sb.head()
    answer = sw.loop_set(sb.digest, "loop.maxChangedLines", value=200, actor="alice")
    assert not answer.changed and answer.commit is None and sb.head() == head
    assert not ActionLog.objects.exists()


def test_an_entitys_lesson_retention_is_refused(sb) -> None:
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.lessons.retentionDays", value=30, actor="alice")
    assert refused.value.code == "refused" and "read by nothing" in refused.value.detail


# --- Dry run ------------------------------------------------------------------------------------


def test_a_dry_run_answers_the_diff_and_writes_nothing(sb) -> None:
    head = sb.head()
    answer = sw.loop_set(sb.digest, "loop.maxChangedLines", value=100, actor="alice", dry_run=True)
    assert sb.head() == head and sb.show(DIGEST) == DIGEST_TEXT
    assert not ActionLog.objects.exists()
    (entry,) = answer.files
    assert entry["path"] == DIGEST
    assert "-  maxChangedLines: 200\n+  maxChangedLines: 100\n" in entry["diff"]
    assert entry["base"] == sw.digest(DIGEST_TEXT.encode())
    assert answer.dry_run and answer.commit is None


def test_the_confirm_of_a_dry_run_answers_conflict_when_the_file_changed_in_between(sb) -> None:
    preview = sw.loop_set(None, "loop.threshold", value=0.7, actor="alice", dry_run=True)
    expect = {f["path"]: f["base"] for f in preview.files}
    sb.commit({MANIFEST: MANIFEST_TEXT + "# a person's note\n"})
    head = sb.head()
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(None, "loop.threshold", value=0.7, actor="alice", expect=expect)
    assert refused.value.code == "conflict" and MANIFEST in refused.value.detail
    assert sb.head() == head and not ActionLog.objects.exists()


# --- Validation over every entity reached -----------------------------------------------------------


def test_an_entity_write_that_would_break_it_is_refused_naming_it(sb) -> None:
    head = sb.head()
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.trigger.minFailures", value=9, actor="alice")
    assert refused.value.code == "refused"
    assert "scenario:digest" in refused.value.detail and "above windowRuns 5" in refused.value.detail
    assert sb.head() == head and not ActionLog.objects.exists()


def test_a_manifest_write_that_would_break_one_entity_is_refused_naming_it(sb) -> None:
    head = sb.head()
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(None, "loop.preset", value="evolve", actor="alice")  # pricing writes its own threshold
    detail = refused.value.detail
    assert refused.value.code == "refused" and "scenario:pricing" in detail and "preset: evolve" in detail
    assert "scenario:digest" not in detail
    assert sb.head() == head


def test_a_manifest_write_the_manifest_itself_refuses_is_refused(sb) -> None:
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(None, "loop.autonomy.decide", value="sometimes", actor="alice")
    assert refused.value.code == "refused" and "loop.autonomy.decide" in refused.value.detail


def test_a_dry_run_refuses_what_the_write_would(sb) -> None:
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.trigger.minFailures", value=9, actor="alice", dry_run=True)
    assert refused.value.code == "refused"


# --- Oversight: loop_set refuses, loop_widen applies after a person approves -----------------------------


def test_loop_set_refuses_decide_auto_naming_the_widening_and_loop_widen(sb) -> None:
    head = sb.head()
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.autonomy.decide", value="auto", actor="agent-bot")
    assert refused.value.code == "refused" and "loop_widen" in refused.value.detail
    assert refused.value.widened == [
        {"subject": "scenario:digest", "knob": "loop.autonomy.decide", "from": "human", "to": "auto"}
    ]
    assert sb.head() == head


def test_removing_decide_human_under_a_brain_wide_auto_widens_too(sb) -> None:
    widened = sw.loop_widen(None, "loop.autonomy.decide", "set", "auto", actor="alice", is_agent=False)
    # The brain-wide auto reaches pulse and pricing (they write no autonomy), not digest (its own decide: human).
    assert [w["subject"] for w in widened.widened] == ["heartbeat:pulse", "scenario:pricing"]
    assert sb.pricing.terms["loop"]["autonomy"]["decide"] == "auto"
    assert sb.digest.terms["loop"]["autonomy"]["decide"] == "human"
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(sb.digest, "loop.autonomy.decide", op="remove", actor="agent-bot")
    assert refused.value.widened == [
        {"subject": "scenario:digest", "knob": "loop.autonomy.decide", "from": "human", "to": "auto"}
    ]


def test_narrowing_and_neutral_writes_go_through_loop_set(sb) -> None:
    sw.loop_set(sb.digest, "loop.maxChangedLines", value=50, actor="agent-bot")
    sw.loop_set(sb.digest, "loop.editablePaths", value=[], actor="agent-bot")
    sw.loop_set(None, "loop.autonomy.maxConsecutiveRegressions", value=1, actor="agent-bot")
    sw.loop_set(None, "loop.maxAnalysesPerDay", value=None, actor="agent-bot")  # spend is not judged
    assert sb.digest.terms["loop"]["editablePaths"] == []
    assert sb.pricing.terms["loop"]["autonomy"]["maxConsecutiveRegressions"] == 1
    assert ActionLog.objects.filter(op="loop_set").count() == 4


@pytest.mark.parametrize(
    ("target", "key", "value", "knob"),
    [
        ("digest", "loop.autonomy.merge", "auto", "loop.autonomy.merge"),
        ("digest", "loop.autonomy.maxConsecutiveRegressions", None, "loop.autonomy.maxConsecutiveRegressions"),
        ("digest", "loop.autonomy.maxConsecutiveRegressions", 5, "loop.autonomy.maxConsecutiveRegressions"),
        ("digest", "loop.autonomy.onInconclusive", "ship", "loop.autonomy.onInconclusive"),
        ("digest", "loop.autonomy.onUnmeasured", "continue", "loop.autonomy.onUnmeasured"),
        ("digest", "loop.editablePaths", ["features/support/digest/**"], "loop.editablePaths"),
        ("digest", "loop.maxChangedLines", 900, "loop.maxChangedLines"),
        (None, "loop.watch.onInconclusive", "keep", None),  # the engine's keep already: no change, no widening
        (None, "loop.protectedPaths", ["tools/**"], None),  # protecting more narrows
    ],
)
def test_which_writes_widen(sb, target, key, value, knob) -> None:
    entity = sb.digest if target else None
    if knob is None:
        answer = sw.loop_set(entity, key, "set", value, actor="agent-bot", dry_run=True)
        assert answer.widened == []
        return
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(entity, key, "set", value, actor="agent-bot", dry_run=True)
    assert [w["knob"] for w in refused.value.widened] == [knob]


def test_calibration_and_watch_revert_widen_only_one_way(sb) -> None:
    sw.loop_widen(None, "loop.autonomy.requireCalibration", "set", True, actor="alice", is_agent=False)
    sw.loop_set(None, "loop.watch", "set", {"onInconclusive": "revert"}, actor="alice")
    # digest writes its own autonomy block (requireCalibration from the engine: false), not its own watch.
    reached = {
        "loop.autonomy.requireCalibration": ({"heartbeat:pulse", "scenario:pricing"}, False),
        "loop.watch.onInconclusive": ({"heartbeat:pulse", "scenario:pricing", "scenario:digest"}, "keep"),
    }
    for key, (subjects, value) in reached.items():
        with pytest.raises(sw.SettingsRefusal) as refused:
            sw.loop_set(None, key, "set", value, actor="agent-bot")
        assert {w["subject"] for w in refused.value.widened} == subjects
        assert {w["knob"] for w in refused.value.widened} == {key}


def test_an_agents_loop_widen_opens_a_card_and_a_persons_approval_makes_the_write(sb, bob) -> None:
    head = sb.head()
    answer = sw.loop_widen(sb.digest, "loop.autonomy.decide", "set", "auto", actor="agent-bot", is_agent=True)
    assert answer.pending and answer.card_id and answer.commit is None
    assert sb.head() == head and not ActionLog.objects.exists()
    card = Card.objects.get(pk=answer.card_id)
    assert (card.producer, card.kind, card.status) == ("loop-settings", "widen", "pending")
    assert "loop.autonomy.decide" in card.text and '"human" → "auto"' in card.text and "+  autonomy:" in card.text
    # The same request again finds the same card.
    again = sw.loop_widen(sb.digest, "loop.autonomy.decide", "set", "auto", actor="agent-bot", is_agent=True)
    assert again.card_id == answer.card_id
    # An agent cannot answer it.
    refused = answer_card(card.pk, user=bob, is_agent=True, choice=sw.APPROVE, via="api")
    assert refused.code == "unauthorized_responder"
    approve(card.pk, bob)
    card.refresh_from_db()
    assert card.handler_error == ""
    assert frontmatter_of(sb.show(DIGEST))["loop"]["autonomy"] == {"decide": "auto"}
    assert sb.digest.terms["loop"]["autonomy"]["decide"] == "auto"
    row = ActionLog.objects.get()
    assert (row.op, row.actor, row.subject) == ("loop_widen", "agent-bot (approved by bob)", "scenario:digest")


def test_a_declined_widen_card_writes_nothing(sb, bob) -> None:
    answer = sw.loop_widen(sb.digest, "loop.autonomy.decide", "set", "auto", actor="agent-bot", is_agent=True)
    head = sb.head()
    result = answer_card(answer.card_id, user=bob, is_agent=False, choice=sw.DECLINE, via="dashboard")
    assert result.ok
    run_handler(answer.card_id)
    assert sb.head() == head and not ActionLog.objects.exists()


def test_an_approval_over_a_file_that_changed_since_the_card_writes_nothing_and_says_so(sb, bob) -> None:
    answer = sw.loop_widen(sb.digest, "loop.autonomy.decide", "set", "auto", actor="agent-bot", is_agent=True)
    sb.commit({DIGEST: DIGEST_TEXT.replace("Keep it short.", "Keep it very short.")})
    head = sb.head()
    approve(answer.card_id, bob)
    assert sb.head() == head and not ActionLog.objects.exists()
    notice = Notice.objects.get(producer="loop-settings")
    assert "conflict" in notice.text and DIGEST in notice.text


def test_an_agents_loop_widen_that_widens_nothing_is_made_at_once(sb) -> None:
    answer = sw.loop_widen(sb.digest, "loop.maxChangedLines", "set", 150, actor="agent-bot", is_agent=True)
    assert not answer.pending and answer.commit == sb.head()
    assert not Card.objects.exists()


def test_a_persons_loop_widen_is_the_approval(sb) -> None:
    answer = sw.loop_widen(sb.digest, "loop.autonomy.decide", "set", "auto", actor="alice", is_agent=False)
    assert answer.widened == [
        {"subject": "scenario:digest", "knob": "loop.autonomy.decide", "from": "human", "to": "auto"}
    ]
    assert answer.commit == sb.head() and not Card.objects.exists()
    assert ActionLog.objects.get().op == "loop_widen"


# --- The kill switch -------------------------------------------------------------------------------------


def test_the_brain_wide_switch_is_pulled_by_loop_set_and_turned_back_on_only_by_loop_widen(sb) -> None:
    sw.loop_set(None, "loop.enabled", "set", False, actor="agent-bot")
    assert not sb.digest.loop_enabled and not sb.pricing.loop_enabled
    assert sb.digest.provenance["loop.enabled"] == "manifest"
    assert not Card.objects.exists()
    for op, value in (("set", True), ("remove", None)):
        with pytest.raises(sw.SettingsRefusal) as refused:
            sw.loop_set(None, "loop.enabled", op, value, actor="agent-bot")
        assert refused.value.widened == [{"subject": MANIFEST, "knob": "loop.enabled", "from": False, "to": True}]
    pending = sw.loop_widen(None, "loop.enabled", "remove", actor="agent-bot", is_agent=True)
    assert pending.pending and not sb.digest.loop_enabled
    sw.loop_widen(None, "loop.enabled", "remove", actor="alice", is_agent=False)
    assert sb.digest.loop_enabled and sb.pricing.loop_enabled
    assert "enabled" not in yaml.safe_load(sb.show(MANIFEST))["loop"]


def test_an_entitys_own_switch_is_pulled_by_loop_set(sb) -> None:
    sw.loop_set(sb.digest, "loop.enabled", "set", False, actor="agent-bot")
    assert not sb.digest.loop_enabled and sb.pricing.loop_enabled
    assert ActionLog.objects.get().subject == "scenario:digest"


# --- loop_join ------------------------------------------------------------------------------------------


def test_joining_an_unattended_entity_with_no_cap_needs_daily_cap(sb) -> None:
    head = sb.head()
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_join(sb.pulse, actor="agent-bot")
    assert refused.value.code == "precondition" and "dailyCap" in refused.value.detail
    assert sb.head() == head


def test_joining_a_paused_heartbeat_with_a_cap_resumes_it(sb) -> None:
    answer = sw.loop_join(sb.pulse, actor="agent-bot", daily_cap=10)
    assert answer.resumed is True and answer.commit == sb.head()
    written = frontmatter_of(sb.show(PULSE))
    assert written["enabled"] is True
    assert written["evaluation"] == {"method": "none", "sample": {"maxPerDay": 10}, "enabled": True}
    assert written["loop"] == {"enabled": True}
    lost, added = changed_lines(PULSE_TEXT, sb.show(PULSE))
    assert lost == ["enabled: false   # paused\n"]
    assert added[0].startswith("enabled: true") and added[0].endswith("# paused\n")
    pulse = sb.pulse
    assert pulse.evaluation_enabled and pulse.loop_enabled
    assert ActionLog.objects.get().op == "loop_join"


def test_joining_twice_changes_nothing_the_second_time(sb) -> None:
    first = sw.loop_join(sb.pulse, actor="alice", daily_cap=10)
    second = sw.loop_join(sb.pulse, actor="alice")
    assert first.changed and not second.changed and second.resumed is False
    assert ActionLog.objects.count() == 1


def test_join_refuses_a_brain_whose_loop_switch_is_off(sb) -> None:
    sw.loop_set(None, "loop.enabled", "set", False, actor="alice")
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_join(sb.pulse, actor="alice", daily_cap=10)
    assert refused.value.code == "precondition" and "loop switch is off" in refused.value.detail


def test_join_refuses_an_entity_whose_feature_is_switched_off(sb) -> None:
    sb.commit({MANIFEST: MANIFEST_TEXT + "features:\n  ops: { enabled: false }\n"})
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_join(sb.pulse, actor="alice", daily_cap=10)
    assert refused.value.code == "precondition" and "feature ops is switched off" in refused.value.detail


def test_join_refuses_an_entity_whose_settings_do_not_load(sb) -> None:
    sb.commit({PULSE: PULSE_TEXT.replace("method: none", "method: none\n  sample: { rate: 7 }")})
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_join(sb.pulse, actor="alice", daily_cap=10)
    assert refused.value.code == "refused" and "sample.rate" in refused.value.detail


# --- The one lock, conflicts --------------------------------------------------------------------------------


def test_a_file_that_changes_while_the_write_is_made_answers_conflict(sb, monkeypatch) -> None:
    real_push = sw_write._push

    def racing_push(clone, branch):
        sb.commit({MANIFEST: MANIFEST_TEXT.replace("grade every run", "grade them all")})
        real_push(clone, branch)

    monkeypatch.setattr(sw_write, "_push", racing_push)
    with pytest.raises(sw.SettingsRefusal) as refused:
        sw.loop_set(None, "loop.threshold", value=0.7, actor="alice")
    assert refused.value.code == "conflict"
    assert "threshold" not in sb.show(MANIFEST) and "grade them all" in sb.show(MANIFEST)
    assert not ActionLog.objects.exists()


def test_a_branch_that_moved_elsewhere_gets_the_write_made_again_on_its_tip(sb, monkeypatch) -> None:
    real_push = sw_write._push
    raced = []

    def racing_push(clone, branch):
        if not raced:
            raced.append(sb.commit({"features/support/digest/notes.md": "Other notes.\n"}))
        real_push(clone, branch)

    monkeypatch.setattr(sw_write, "_push", racing_push)
    answer = sw.loop_set(None, "loop.threshold", value=0.7, actor="alice")
    assert "threshold: 0.7" in sb.show(MANIFEST) and sb.show("features/support/digest/notes.md") == "Other notes.\n"
    assert answer.commit == sb.head()


@pytest.mark.django_db(transaction=True)
def test_a_lock_held_too_long_answers_conflict(tmp_path, settings) -> None:
    sb = settings_brain(tmp_path, settings)
    settings.LOOP_SETTINGS_LOCK_SECS = 0.3
    digest = sb.digest
    held, done = threading.Event(), threading.Event()

    def hold():
        try:
            with sw.settings_lock():
                held.set()
                done.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(sw.SettingsRefusal) as refused:
            sw.loop_set(digest, "loop.maxChangedLines", value=100, actor="alice")
        assert refused.value.code == "conflict" and "held the lock" in refused.value.detail
    finally:
        done.set()
        holder.join()
    assert "maxChangedLines: 200" in sb.show(DIGEST)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_writers_at_once_take_turns_and_the_second_validates_afresh(tmp_path, settings) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("real parallel writers need Postgres")
    sb = settings_brain(tmp_path, settings)

    def write(name, key, value):
        try:
            return name, sw.loop_set(None, key, "set", value, actor=name)
        except sw.SettingsRefusal as refusal:
            return name, refusal

    answers = dict(
        each_at_once([lambda: write("alice", "loop.threshold", 0.7), lambda: write("bob", "loop.maxChangedLines", 300)])
    )
    ok = [name for name, answer in answers.items() if isinstance(answer, sw.Answer)]
    refused = [a for a in answers.values() if isinstance(a, sw.SettingsRefusal)]
    assert ok and all(r.code == "conflict" for r in refused)
    final = sb.show(MANIFEST)
    assert ("threshold: 0.7" in final) == ("alice" in ok)
    assert ("maxChangedLines: 300" in final) == ("bob" in ok)
    assert ActionLog.objects.count() == len(ok)
    lost, _ = changed_lines(MANIFEST_TEXT, final)
    assert lost == []  # neither write lost the other's bytes or a comment


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_writers_of_conflicting_values_never_both_land_unvalidated(tmp_path, settings) -> None:
    """Each writer's write is valid alone; together (windowRuns 2 under a minFailures 3) they break pricing: the
    second, validated afresh on the first's commit, is refused."""
    if connection.vendor != "postgresql":
        pytest.skip("real parallel writers need Postgres")
    sb = settings_brain(tmp_path, settings)
    sw.loop_set(sb.pricing, "loop.trigger.windowRuns", value=4, actor="setup")
    pricing = sb.pricing

    def write(name, key, value):
        try:
            return name, sw.loop_set(pricing, key, "set", value, actor=name)
        except sw.SettingsRefusal as refusal:
            return name, refusal

    answers = dict(
        each_at_once(
            [lambda: write("alice", "loop.trigger.windowRuns", 2), lambda: write("bob", "loop.trigger.minFailures", 3)]
        )
    )
    outcomes = sorted(type(a).__name__ for a in answers.values())
    assert outcomes == ["Answer", "SettingsRefusal"]
    (refusal,) = [a for a in answers.values() if isinstance(a, sw.SettingsRefusal)]
    assert refusal.code == "refused" and "scenario:pricing" in refusal.detail
    trigger = frontmatter_of(sb.show(PRICING))["loop"]["trigger"]
    assert trigger["minFailures"] <= trigger["windowRuns"]
