"""What a cycle freezes for its pre-merge check (seed 003 "What a cycle freezes"; CONFORMANCE R11.1–R11.13)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.loop import freeze as F
from evolution.models import Cycle
from grading.models import Grade
from tests.evolution.loop_helpers import JUDGE, looped
from tests.grading.grading_helpers import make_run

pytestmark = pytest.mark.django_db

OTHER_JUDGE = {**JUDGE, "loop_hash": "another-module"}


def graded_input(entity, text: str, *, bad: bool, at, judge=None, loop_launched: bool = False, metrics=None):
    run = make_run(entity, completed_at=at, input={"text": text}, loop_launched=loop_launched)
    return Grade.objects.create(
        execution=run,
        entity=entity,
        status=Grade.Status.GRADED,
        reason="sampled",
        day=at.date(),
        booked_at=at,
        due_at=at,
        graded_at=at,
        passed=not bad,
        metrics={"accuracy": 0.0 if bad else 1.0} if metrics is None else metrics,
        judge=JUDGE if judge is None else judge,
    )


def frozen_for(entity, anchor, *, window=None):
    cycle = Cycle(entity=entity, anchor=anchor, window=window or {}, judge=JUDGE)
    return F.freeze(cycle, now=timezone.now())


def runs(entity, texts: str, *, start=None):
    """One graded run per letter, one minute apart, oldest first; upper case is bad."""
    start = start or timezone.now() - timedelta(hours=1)
    return [
        graded_input(entity, f"ticket {c.lower()}", bad=c.isupper(), at=start + timedelta(minutes=i))
        for i, c in enumerate(texts)
    ]


def test_the_check_block_defaults_and_the_derived_mode():
    # R11.1 / R11.2: inputs 5, trials 1, deadline 24 h, incumbent frozen; a workflow derives replay.
    entity = looped()
    terms = F.check_terms(entity)
    assert {k: terms[k] for k in ("inputs", "trials", "deadlineHours", "incumbent")} == {
        "inputs": 5,
        "trials": 1,
        "deadlineHours": 24,
        "incumbent": "frozen",
    }
    assert F.check_mode(entity) == "replay"
    assert F.check_mode(looped("quiet", loop={"check": {"mode": "none"}})) == "none"


def test_a_heartbeat_and_a_pipeline_freeze_nothing_even_when_they_declare_replay():
    # R11.3 / R11.4: nothing can re-run them, so the frozen column stays empty.
    beat = looped("pulse", kind="heartbeat", schedule="*/5 * * * *", loop={"check": {"mode": "replay"}})
    assert F.check_mode(beat) == "none"
    assert frozen_for(beat, None) is None


def test_history_slots_are_distinct_inputs_through_the_anchor_the_anchors_first():
    # R11.6: 8 graded runs with 6 distinct inputs, inputs 5 → 5 distinct, the anchor's first.
    entity = looped(loop={"evidence": {"runs": 0}})
    grades = runs(entity, "abcabdeF")
    later = graded_input(entity, "ticket z", bad=True, at=timezone.now())  # after the anchor: never frozen
    anchor = grades[-1].execution
    frozen = frozen_for(entity, anchor)
    labels = [s["label"] for s in frozen["slots"]]
    assert labels[0] == "ticket f" and frozen["slots"][0]["anchor"]
    assert len(labels) == 5 and len(set(labels)) == 5
    assert "ticket z" not in labels and later.pk


def test_the_anchor_never_keeps_its_score_and_other_judges_lose_theirs():
    # R11.7 / R11.9 / R24.8
    entity = looped(loop={"evidence": {"runs": 0}})
    start = timezone.now() - timedelta(hours=1)
    graded_input(entity, "ticket old", bad=False, at=start, judge=OTHER_JUDGE)
    graded_input(entity, "ticket empty", bad=False, at=start + timedelta(minutes=1), metrics={})
    graded_input(entity, "ticket good", bad=False, at=start + timedelta(minutes=2))
    anchor = graded_input(entity, "ticket anchor", bad=True, at=start + timedelta(minutes=3)).execution
    slots = {s["label"]: s for s in frozen_for(entity, anchor)["slots"]}
    assert slots["ticket anchor"]["score"] is None
    assert slots["ticket old"]["score"] is None  # graded by another judge: the incumbent is re-run
    assert slots["ticket empty"]["score"] is None  # its grade measured nothing
    assert slots["ticket good"]["score"]["passed"] is True


def test_under_incumbent_replay_no_slot_keeps_a_score():
    # R11.8
    entity = looped(loop={"check": {"incumbent": "replay"}})
    grades = runs(entity, "abcD")
    assert all(s["score"] is None for s in frozen_for(entity, grades[-1].execution)["slots"])


def test_the_loops_own_replays_are_never_history():
    # R11.10 / R23.12
    entity = looped()
    start = timezone.now() - timedelta(hours=1)
    graded_input(entity, "ticket replayed", bad=False, at=start, loop_launched=True)
    anchor = graded_input(entity, "ticket anchor", bad=True, at=start + timedelta(minutes=1)).execution
    assert [s["label"] for s in frozen_for(entity, anchor)["slots"]] == ["ticket anchor"]


def test_held_out_inputs_come_before_inputs_the_proposer_saw():
    # R11.13: the anchor first, then inputs no evidence run ran on (heldOut), then the seen ones.
    entity = looped(loop={"evidence": {"runs": 2}, "check": {"inputs": 4}})
    grades = runs(entity, "abcdE")  # evidence: the newest two (d, E)
    frozen = frozen_for(entity, grades[-1].execution)
    slots = frozen["slots"]
    assert [s["label"] for s in slots] == ["ticket e", "ticket c", "ticket b", "ticket a"]
    assert [s["heldOut"] for s in slots] == [False, True, True, True]
    assert frozen["evidenceRunIds"] == [str(grades[-1].execution_id), str(grades[-2].execution_id)]
    assert F.held_out_text(frozen) == "held-out 3 of 4"


def test_when_the_evidence_covers_every_input_nothing_is_held_out():
    entity = looped(loop={"evidence": {"runs": 10}, "check": {"inputs": 3}})
    grades = runs(entity, "abC")
    assert F.held_out_text(frozen_for(entity, grades[-1].execution)) == "held-out 0 of 3"


def test_a_window_naming_no_runs_freezes_golden_cases_only(monkeypatch):
    entity = looped()
    monkeypatch.setattr(F, "_cases", lambda entity: [{"id": "gold", "input": {"text": "ticket gold"}}])
    frozen = frozen_for(entity, None, window={"runIds": []})
    assert [(s["kind"], s["caseId"], s["heldOut"], s["score"]) for s in frozen["slots"]] == [
        ("case", "gold", False, None)
    ]
    assert frozen["heldOut"] == {"k": 0, "n": 0}


def test_a_golden_case_whose_input_a_history_run_covers_is_dropped(monkeypatch):
    # R11.11
    entity = looped()
    grades = runs(entity, "aB")
    monkeypatch.setattr(
        F,
        "_cases",
        lambda entity: [{"id": "dup", "input": {"text": "ticket a"}}, {"id": "new", "input": {"text": "ticket new"}}],
    )
    slots = frozen_for(entity, grades[-1].execution)["slots"]
    assert [s["caseId"] for s in slots if s["kind"] == "case"] == ["new"]


def test_the_freeze_reads_the_same_number_of_queries_whatever_the_history_holds():
    entity = looped()
    few = runs(entity, "abcdE")
    with CaptureQueriesContext(connection) as small:
        frozen_for(entity, few[-1].execution)
    other = looped("busy")
    many = runs(other, "abcdefghij" * 8 + "K")
    with CaptureQueriesContext(connection) as large:
        frozen_for(other, many[-1].execution)
    assert len(large.captured_queries) == len(small.captured_queries)


def test_a_history_of_repeated_inputs_is_scanned_by_input_text_and_keeps_each_inputs_newest_grade():
    # Issue 18: an entity whose inputs repeat is scanned to its bound (few distinct inputs); the scan reads ids
    # and inputs only, each repeated input decoded once, and the slots' scores are read after it in one query.
    entity = looped(loop={"evidence": {"runs": 0}, "check": {"inputs": 3}})
    start = timezone.now() - timedelta(hours=10)
    for i in range(450):
        graded_input(entity, f"ticket {'abc'[i % 3]}", bad=False, at=start + timedelta(minutes=i),
                     metrics={"accuracy": i / 1000})  # fmt: skip
    anchor = graded_input(entity, "ticket a", bad=True, at=start + timedelta(minutes=450)).execution
    with CaptureQueriesContext(connection) as read:
        slots = frozen_for(entity, anchor)["slots"]
    scans = [q["sql"] for q in read.captured_queries if "grading_execution" in q["sql"] and "LIMIT" in q["sql"]]
    # The newest chunk of 200, then the rest of the bound in one statement (each input's newest run only): no
    # held-out input is ever enough, so the scan reads to the end.
    assert len(scans) == 2
    assert not any('"metrics"' in sql for sql in scans)
    assert [s["input"]["text"] for s in slots] == ["ticket a", "ticket c", "ticket b"]
    assert [s["score"]["vector"]["accuracy"] if s["score"] else None for s in slots] == [None, 0.449, 0.448]


def test_runs_that_started_at_the_same_instant_across_a_chunks_edge_are_all_scanned():
    # The scan's chunks follow one another by started_at (no offset): runs sharing the instant where a chunk
    # ends are read again by the next chunk and skipped, none lost and none twice.
    entity = looped(loop={"evidence": {"runs": 0}, "check": {"inputs": 400}})
    start = timezone.now() - timedelta(hours=10)
    for i in range(260):
        at = start + timedelta(minutes=min(i, 65) if 55 <= i <= 65 else i)  # runs 55-65 (199-205 newest first) tie
        graded_input(entity, f"ticket {i}", bad=False, at=at)
    anchor = graded_input(entity, "ticket anchor", bad=True, at=start + timedelta(minutes=300)).execution
    slots = frozen_for(entity, anchor)["slots"]
    texts = [s["input"]["text"] for s in slots]
    assert len(texts) == len(set(texts)) == 261 and texts[0] == "ticket anchor"


def test_a_deep_history_of_repeated_inputs_costs_the_same_statements_however_deep():
    # Issue 18: past its newest chunk the scan reads the rest of its bound in one statement, so an opening at a
    # thousand runs of history costs what one at three hundred does (it read a chunk of 200 at a time before).
    def statements(name: str, depth: int) -> int:
        entity = looped(name)
        start = timezone.now() - timedelta(days=2)
        for i in range(depth):
            graded_input(entity, "old ticket", bad=i % 5 < 2, at=start + timedelta(minutes=i))
        anchor = graded_input(entity, "new ticket", bad=True, at=start + timedelta(minutes=depth)).execution
        with CaptureQueriesContext(connection) as read:
            slots = frozen_for(entity, anchor)["slots"]
        assert [s["input"]["text"] for s in slots] == ["new ticket", "old ticket"]
        return len(read.captured_queries)

    assert statements("shallow", 300) == statements("deep", 1000)


def test_the_scan_stops_at_its_bound_past_the_newest_chunk(monkeypatch):
    # An input first seen past SCAN_LIMIT runs is never a slot; one at the bound's last run is, with its newest run.
    monkeypatch.setattr(F, "SCAN_CHUNK", 4)
    monkeypatch.setattr(F, "SCAN_LIMIT", 10)
    entity = looped(loop={"evidence": {"runs": 2}, "check": {"inputs": 5}})
    start = timezone.now() - timedelta(hours=10)
    texts = ["too old", "last in bound", "last in bound"] + ["repeated"] * 7
    made = [graded_input(entity, t, bad=False, at=start + timedelta(minutes=i)) for i, t in enumerate(texts)]
    anchor = graded_input(entity, "anchor", bad=True, at=start + timedelta(minutes=len(texts))).execution
    frozen = frozen_for(entity, anchor)
    slots = frozen["slots"]
    assert [s["input"]["text"] for s in slots] == ["anchor", "last in bound", "repeated"]
    assert slots[1]["runId"] == str(made[2].execution_id)  # the newest run of that input
    assert [s["heldOut"] for s in slots] == [False, True, False]  # the evidence (2 newest runs) saw "repeated"
    assert frozen["evidenceRunIds"] == [str(anchor.pk), str(made[-1].execution_id)]


def test_the_landed_run_handed_over_without_its_input_is_not_read_again():
    # The trigger hands over its landed run with the input deferred: the scan's newest chunk has read it.
    from grading.models import Execution

    entity = looped()
    grades = runs(entity, "abcdE")
    anchor = Execution.objects.defer("input", "output", "trace").get(pk=grades[-1].execution_id)
    with CaptureQueriesContext(connection) as read:
        slots = frozen_for(entity, anchor)["slots"]
    assert slots[0]["input"] == {"text": "ticket e"} and slots[0]["anchor"]
    assert len(read.captured_queries) == 2  # the scan and the slots' grades: the anchor's input is not read again
