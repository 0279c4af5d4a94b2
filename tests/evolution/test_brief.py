"""The proposer's brief: which runs, in which order, the documents, the ceiling's cuts, the prompt and its instructions."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from evolution.loop.brief import BRAIN_HEADING, ENTITY_HEADING, build_brief, estimate_tokens
from evolution.models import Cycle, Idea, Lesson, Recall, Round
from grading.models import Entity, Grade
from tests.evolution.loop_helpers import JUDGE, looped
from tests.grading.grading_helpers import brain_repo, make_entity, make_run

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(hours=2)


def run(
    entity: Entity,
    minute: int,
    *,
    bad: bool,
    text: str = "",
    trace: list[dict[str, Any]] | None = None,
    metrics: dict[str, Any] | None = None,
    category: str = "",
    loop_launched: bool = False,
    graded_at: datetime | None = None,
) -> Grade:
    """A graded run of ``entity`` ending ``minute`` minutes after START."""
    at = START + timedelta(minutes=minute)
    execution = make_run(
        entity,
        completed_at=at,
        input={"text": text or f"ticket {minute}", "_expected": "billing"},
        output={"result": "general" if bad else "billing"},
        trace=trace,
        loop_launched=loop_launched,
    )
    return Grade.objects.create(
        execution=execution,
        entity=entity,
        status=Grade.Status.GRADED,
        reason="sampled",
        day=at.date(),
        booked_at=at,
        due_at=at,
        graded_at=graded_at or at,
        passed=not bad,
        failure_category=category if bad else "",
        criteria=[{"criterion": "labels the ticket", "scope": "run", "passed": not bad, "score": 0 if bad else 1}],
        metrics=metrics or {},
        judge=JUDGE,
    )


def cycle_of(
    entity: Entity, window: list[Grade], *, anchor: Grade | None = None, origin: str = Cycle.Origin.GRADE, **fields: Any
) -> Cycle:
    """A live cycle whose window is ``window`` (oldest first), opened on ``anchor``."""
    return Cycle.objects.create(
        entity=entity,
        key=f"test:{uuid.uuid4()}",
        origin=origin,
        anchor=anchor.execution if anchor else None,
        window={
            "from": None,
            "to": timezone.now().isoformat(),
            "runIds": [str(g.execution_id) for g in window],
            "reason": f"the last {len(window)} graded runs",
            "ready": True,
            "progress": {"have": len(window), "need": len(window), "unit": "graded runs"},
            "metrics": [],
        },
        **fields,
    )


def first_round(cycle: Cycle, **fields: Any) -> Round:
    return Round.objects.create(cycle=cycle, number=fields.pop("number", 1), **fields)


def doc(brief: Any, name: str) -> Any:
    return json.loads(brief.documents[name])


def settled_lesson(entity: Entity, *, rejection: str = "", outcome: str = "skipped", age_days: int = 1) -> Lesson:
    at = timezone.now() - timedelta(days=age_days)
    cycle = Cycle.objects.create(
        entity=entity, key=f"old:{uuid.uuid4()}", origin="grade", phase="settled", status=outcome, completed_at=at
    )
    rnd = Round.objects.create(
        cycle=cycle, number=1, status="skipped", summary=f"idea {age_days}", rejection=rejection, decided_by="alice"
    )
    return Lesson.objects.create(
        entity=entity, cycle=cycle, round=rnd, outcome=outcome, summary=rnd.summary, rejection=rejection, created_at=at
    )


# --- runs.json -----------------------------------------------------------------------------


def test_runs_are_the_newest_through_the_window_bad_ones_first_and_never_the_loops_replays():
    entity = looped(loop={"evidence": {"runs": 4}})
    grades = [run(entity, minute, bad=minute in (1, 3)) for minute in range(6)]
    replay = run(entity, 7, bad=True, loop_launched=True)
    later = run(entity, 9, bad=True)  # after the window's newest run: not evidence of this cycle
    cycle = cycle_of(entity, grades[1:5], anchor=grades[4])
    brief = build_brief(cycle, first_round(cycle))
    runs = doc(brief, "runs.json")
    ids = [r["id"] for r in runs]
    # The four newest through minute 4 (4, 3, 2, 1), bad ones (3, 1) first, each group newest first.
    expected = [grades[3], grades[1], grades[4], grades[2]]
    assert ids == [str(g.execution_id) for g in expected]
    assert [r["bad"] for r in runs] == [True, True, False, False]
    assert str(replay.execution_id) not in ids and str(later.execution_id) not in ids
    assert brief.evidence_run_ids == ids
    first = runs[0]
    assert first["input"] == {"text": "ticket 3", "_expected": "billing"}
    assert first["output"] == {"result": "general"}
    assert first["criteria"][0]["criterion"] == "labels the ticket" and first["passed"] is False
    assert "trace" not in first


def test_tool_calls_ride_only_under_include_trace_and_a_lost_trace_is_empty():
    entity = looped(loop={"evidence": {"runs": 10, "includeTrace": True}})
    with_trace = run(entity, 1, bad=True, trace=[{"tool": "crm__lookup", "status": "ok"}, {"log": "a note"}])
    purged = run(entity, 2, bad=True, trace=[])
    cycle = cycle_of(entity, [with_trace, purged], anchor=purged)
    runs = {r["id"]: r for r in doc(build_brief(cycle, first_round(cycle)), "runs.json")}
    assert runs[str(with_trace.execution_id)]["trace"] == [{"tool": "crm__lookup", "status": "ok"}]
    assert runs[str(purged.execution_id)]["trace"] == []


def test_under_evolve_runs_are_the_windows_best_and_worst_by_the_objective():
    entity = make_entity(
        "pricing",
        kind="pipeline",
        evaluation={
            "method": "none",
            "metrics": {"revenue": {"kind": "computed", "direction": "max", "role": "objective"}},
        },
        loop={"enabled": True, "preset": "evolve", "evidence": {"runs": 5}},
    )
    values = [50, 10, 90, 30, 70, 20, 60, 80]
    grades = [run(entity, i, bad=False, metrics={"revenue": v}) for i, v in enumerate(values)]
    cycle = cycle_of(entity, grades, origin=Cycle.Origin.CADENCE)
    runs = doc(build_brief(cycle, first_round(cycle)), "runs.json")
    # 5 of 8: the 3 best (90, 80, 70), then the 2 worst (20, 10).
    assert [r["metrics"]["revenue"] for r in runs] == [90, 80, 70, 20, 10]


# --- The other documents -------------------------------------------------------------------


def test_proposals_are_the_ten_newest_rounds_across_cycles_with_what_became_of_each():
    entity = looped()
    now = timezone.now()
    for index in range(12):
        old = Cycle.objects.create(
            entity=entity, key=f"old:{index}", origin="grade", phase="settled", status="regressed", completed_at=now
        )
        Round.objects.create(
            cycle=old,
            number=1,
            status="merged",
            summary=f"proposal {index}",
            pr_number=100 + index,
            created_at=now - timedelta(days=12 - index),
            check_verdict={"perMetric": [{"metric": "accuracy", "delta": -0.2}]},
        )
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    parent = first_round(cycle, status="refined", summary="this cycle's first try")
    child = Round.objects.create(cycle=cycle, number=2, parent=parent, refinement="Try the invoice word instead.")
    proposals = doc(build_brief(cycle, child), "proposals.json")
    assert len(proposals) == 10
    assert proposals[0]["summary"] == "this cycle's first try" and proposals[0]["status"] == "refined"
    assert proposals[0]["ended"] == "live (analysing)"
    assert [p["summary"] for p in proposals[1:]] == [f"proposal {i}" for i in range(11, 2, -1)]
    assert proposals[1]["pr"]["number"] == 111 and proposals[1]["ended"] == "regressed"
    assert proposals[1]["deltas"] == [{"metric": "accuracy", "delta": -0.2}]
    assert all(p["cycle"] != cycle.pk or p["number"] != 2 for p in proposals)


def test_lessons_are_recalled_a_persons_no_first_within_max_recalled_and_remembered_as_recalls():
    entity = looped(loop={"lessons": {"maxRecalled": 2}})
    skip = settled_lesson(entity, rejection="human", age_days=30)
    settled_lesson(entity, outcome="validated", age_days=3)
    newest = settled_lesson(entity, rejection="timeout", age_days=1)
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    rnd = first_round(cycle)
    brief = build_brief(cycle, rnd)
    lessons = doc(brief, "lessons.json")
    assert [lesson["id"] for lesson in lessons] == [skip.pk, newest.pk]
    assert lessons[0]["rejection"] == {"kind": "human", "by": "alice", "note": ""}
    assert lessons[1]["rejection"]["kind"] == "timeout"
    assert brief.recalled == [skip.pk, newest.pk]
    assert set(Recall.objects.filter(round=rnd).values_list("lesson_id", flat=True)) == {skip.pk, newest.pk}
    assert brief.data["lessons"][0]["rejection"]["kind"] == "human"
    build_brief(cycle, rnd)  # a second brief of the same round recalls once
    assert Recall.objects.filter(round=rnd).count() == 2


def test_max_recalled_zero_reads_no_lesson():
    entity = looped(loop={"lessons": {"maxRecalled": 0}})
    settled_lesson(entity, rejection="human")
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    brief = build_brief(cycle, first_round(cycle))
    assert doc(brief, "lessons.json") == [] and brief.recalled == []
    assert not Recall.objects.exists()


def test_the_window_carries_its_vector_median_or_mean_and_its_runs_ranked_bad_first():
    entity = looped(
        evaluation={
            "method": "none",
            "metrics": {
                "accuracy": {"kind": "computed", "direction": "max", "role": "objective", "aggregate": "mean"},
                "latency": {"kind": "computed", "direction": "min", "role": "observe"},
            },
        }
    )
    grades = [
        run(entity, 1, bad=False, metrics={"accuracy": 1.0, "latency": 100}),
        run(entity, 2, bad=True, metrics={"accuracy": 0.0, "latency": 900}),
        run(entity, 3, bad=True, metrics={"accuracy": 0.0, "latency": 200}),
    ]
    cycle = cycle_of(entity, grades, anchor=grades[2])
    window = doc(build_brief(cycle, first_round(cycle)), "window.json")
    assert window["vector"]["accuracy"] == pytest.approx(1 / 3)  # mean
    assert window["vector"]["latency"] == 200  # median
    assert window["runIds"] == [str(g.execution_id) for g in grades]
    assert [r["runId"] for r in window["ranked"]] == [
        str(grades[1].execution_id),
        str(grades[2].execution_id),
        str(grades[0].execution_id),
    ]
    assert [r["bad"] for r in window["ranked"]] == [True, True, False]


def test_a_grade_opened_cycle_carries_its_grade_whole():
    entity = looped()
    grade = run(entity, 1, bad=True, category="wrong label")
    cycle = cycle_of(entity, [grade], anchor=grade)
    brief = build_brief(cycle, first_round(cycle))
    document = doc(brief, "grade.json")
    assert document["runId"] == str(grade.execution_id)
    assert document["failureCategory"] == "wrong label" and document["passed"] is False
    assert document["criteria"][0]["criterion"] == "labels the ticket"
    assert "grade.json" in brief.prompt
    assert brief.data["grade"]["runId"] == str(grade.execution_id)


def test_a_request_has_no_grade_document_and_the_prompt_drops_its_line():
    entity = looped()
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], origin=Cycle.Origin.REQUEST)
    brief = build_brief(cycle, first_round(cycle))
    assert "grade.json" not in brief.documents
    assert "grade.json" not in brief.prompt and "{{grade}}" not in brief.prompt
    assert brief.data["grade"] is None
    assert "runs.json" in brief.prompt and "window.json" in brief.prompt


def test_metrics_refinement_and_failures_appear_when_they_exist():
    entity = looped(
        evaluation={
            "method": "none",
            "metrics": {"accuracy": {"kind": "computed", "direction": "max", "role": "objective", "floor": 0.5}},
        }
    )
    other = looped("billing")
    run(other, 1, bad=True, category="wrong label", graded_at=timezone.now())
    grade = run(entity, 2, bad=True, category="wrong label")
    cycle = cycle_of(entity, [grade], anchor=grade)
    parent = first_round(cycle, status="refined")
    child = Round.objects.create(cycle=cycle, number=2, parent=parent, refinement="Only touch the billing rule.")
    brief = build_brief(cycle, child)
    assert doc(brief, "metrics.json")["accuracy"]["floor"] == 0.5
    assert brief.documents["refinement.md"] == "Only touch the billing rule."
    assert "Only touch the billing rule." in brief.prompt
    failures = doc(brief, "failures.json")
    assert failures == [
        {
            "entity": str(other),
            "kind": "workflow",
            "category": "wrong label",
            "failures": 1,
            "lastAt": failures[0]["lastAt"],
        }
    ]
    assert brief.data["round"] == {"number": 2, "refines": 1}


def test_without_declared_metrics_refinement_or_fellow_failures_those_documents_are_absent():
    entity = looped()
    grade = run(entity, 1, bad=True, category="wrong label")
    cycle = cycle_of(entity, [grade], anchor=grade)
    brief = build_brief(cycle, first_round(cycle))
    assert {"metrics.json", "refinement.md", "failures.json", "idea.md"}.isdisjoint(brief.documents)
    assert "metrics.json" not in brief.prompt and "refinement.md" not in brief.prompt


def test_an_idea_cycle_reads_the_idea_prompt_with_the_idea_whatever_the_kind():
    entity = looped(kind="pipeline")
    grade = run(entity, 1, bad=False)
    idea = Idea.objects.create(entity=entity, text="Ask for the order number first.", author="alice")
    cycle = cycle_of(entity, [grade], origin=Cycle.Origin.IDEA, idea=idea)
    brief = build_brief(cycle, first_round(cycle))
    assert brief.template == "engine:proposer/idea.md"
    assert "Ask for the order number first." in brief.documents["idea.md"] and "alice" in brief.documents["idea.md"]
    assert "Ask for the order number first." in brief.prompt
    assert brief.data["idea"]["author"] == "alice"


# --- The ceiling ---------------------------------------------------------------------------------


def _trimming_entity(max_tokens: int, slug: str = "triage", include_trace: bool = True) -> tuple[Cycle, list[Grade]]:
    entity = looped(slug, loop={"evidence": {"runs": 10, "maxTokens": max_tokens, "includeTrace": include_trace}})
    trace = [{"tool": "crm__lookup", "arguments": {"q": "x" * 400}, "status": "ok"}]
    grades = [run(entity, minute, bad=minute % 2 == 0, text="word " * 60, trace=trace) for minute in range(6)]
    return cycle_of(entity, grades, anchor=grades[-1]), grades


def test_over_the_ceiling_every_trace_goes_first():
    plain, _ = _trimming_entity(10**6, "plain", include_trace=False)
    without_traces = build_brief(plain, first_round(plain)).tokens
    cycle, _ = _trimming_entity(without_traces + 50)
    brief = build_brief(cycle, first_round(cycle))
    runs = doc(brief, "runs.json")
    assert len(runs) == 6
    assert all("trace" not in r for r in runs)
    assert brief.trimmed == {"traces": True, "runs": []}
    assert brief.tokens <= without_traces + 50


def test_then_the_oldest_runs_go_one_at_a_time_and_the_window_and_grade_stay():
    cycle, grades = _trimming_entity(10**6)
    untrimmed = build_brief(cycle, first_round(cycle))
    one_run = estimate_tokens(json.dumps(doc(untrimmed, "runs.json")[0], indent=2))
    cycle.entity.terms["loop"]["evidence"]["maxTokens"] = untrimmed.tokens - 3 * one_run
    cycle.entity.save()
    cycle.refresh_from_db()
    brief = build_brief(cycle, Round.objects.create(cycle=cycle, number=2))
    kept = [r["id"] for r in doc(brief, "runs.json")]
    dropped = brief.trimmed["runs"]
    assert brief.trimmed["traces"] is True and dropped
    # The dropped runs are the oldest ones, oldest first.
    assert dropped == [str(g.execution_id) for g in grades[: len(dropped)]]
    assert set(kept) == {str(g.execution_id) for g in grades[len(dropped) :]}
    assert brief.evidence_run_ids == kept
    assert brief.tokens <= cycle.entity.terms["loop"]["evidence"]["maxTokens"]
    assert {"window.json", "grade.json", "definition.md"} <= set(brief.documents)


def test_a_ceiling_too_small_for_anything_keeps_the_definition_window_and_grade():
    cycle, _ = _trimming_entity(1)
    brief = build_brief(cycle, first_round(cycle))
    assert doc(brief, "runs.json") == []
    assert doc(brief, "window.json")["runIds"] and doc(brief, "grade.json")["runId"]
    assert "Write the triage." in brief.documents["definition.md"]


# --- The prompt ---------------------------------------------------------------------------------


def test_instructions_are_appended_in_two_sections_a_section_with_no_lines_left_out():
    manifest = {"loop": {"proposer": {"instructions": ["Our voice is plain; never propose superlatives."]}}}
    both = make_entity(
        "refunds",
        evaluation={"method": "none"},
        manifest=manifest,
        loop={"enabled": True, "proposer": {"instructions": ["Look at refunds first."]}},
    )
    brain_only = make_entity("digest", evaluation={"method": "none"}, manifest=manifest, loop={"enabled": True})
    briefs = {}
    for entity in (both, brain_only):
        grade = run(entity, 1, bad=True)
        cycle = cycle_of(entity, [grade], anchor=grade)
        briefs[entity.slug] = build_brief(cycle, first_round(cycle))
    prompt = briefs["refunds"].prompt
    assert prompt.rstrip().endswith(
        f"{BRAIN_HEADING}\n\n- Our voice is plain; never propose superlatives.\n\n{ENTITY_HEADING}\n\n- Look at refunds first."
    )
    assert BRAIN_HEADING in briefs["digest"].prompt and ENTITY_HEADING not in briefs["digest"].prompt
    assert briefs["refunds"].data["instructions"] == {
        "brain": ["Our voice is plain; never propose superlatives."],
        "entity": ["Look at refunds first."],
    }


def test_the_prompt_carries_the_evidence_and_the_rules_of_the_answer():
    entity = looped()
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    brief = build_brief(cycle, first_round(cycle))
    prompt = brief.prompt
    assert brief.template == "engine:proposer/workflow.md"
    assert "{{" not in prompt
    assert "## Prior Proposals" in prompt
    assert '"citedLessons"' in prompt and "WHOLE new content" in prompt
    assert "criterion, a target or a tolerance is itself wrong" in prompt
    assert "evaluation: and loop: blocks" in prompt
    assert str(grade.execution_id) in prompt
    assert "at most 600 changed lines" in prompt
    assert brief.tokens == estimate_tokens(prompt)


@pytest.mark.parametrize(
    ("kind", "loop", "template"),
    [
        ("pipeline", {}, "pipeline"),
        ("heartbeat", {}, "heartbeat"),
        ("workflow", {"preset": "evolve"}, "evolve"),
        ("heartbeat", {"preset": "evolve"}, "evolve"),
    ],
)
def test_the_brief_is_the_kinds_or_the_presets(kind, loop, template):
    entity = make_entity(
        "subject", kind=kind, evaluation={"method": "none"}, loop={"enabled": True, **loop}, schedule="*/5 * * * *"
    )
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    assert build_brief(cycle, first_round(cycle)).template == f"engine:proposer/{template}.md"


def test_a_chat_roles_brief_carries_the_privacy_rule_before_its_instructions():
    entity = make_entity(
        "helpdesk",
        kind="role",
        evaluation={"method": "none"},
        loop={"enabled": True, "proposer": {"instructions": ["Be brief."]}},
    )
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], anchor=grade)
    brief = build_brief(cycle, first_round(cycle))
    assert brief.template == "engine:proposer/chat.md"
    assert brief.prompt.index("## Privacy") < brief.prompt.index(ENTITY_HEADING)


def test_the_brains_copy_of_a_brief_replaces_the_engines_and_the_definition_is_read_at_the_commit(tmp_path):
    scenario = "---\nname: Triage\nloop:\n  enabled: true\n---\nLabel the ticket.\n"
    checkout, commit = brain_repo(
        tmp_path / "brain",
        {
            "features/triage/triage.scenario.md": scenario,
            "constitution/Loop/proposer/workflow.md": "Our own brief for {{entity}}.\n{{runs}}\nGrade: {{grade}}\n",
        },
    )
    entity = looped(commit=commit)
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], origin=Cycle.Origin.REQUEST)
    brief = build_brief(cycle, first_round(cycle), checkout=checkout)
    assert brief.template == "constitution/Loop/proposer/workflow.md"
    assert brief.prompt.startswith("Our own brief for scenario triage")
    assert "Grade:" not in brief.prompt  # no grade: its line is dropped from the brain's copy too
    assert scenario.strip() in brief.documents["definition.md"]
    assert brief.data["definition"] == {
        "path": "features/triage/triage.scenario.md",
        "content": scenario,
        "files": [{"path": "features/triage/triage.scenario.md", "content": scenario}],
    }


def test_the_pipeline_brief_is_the_same_evidence_as_json_values():
    entity = looped()
    grades = [run(entity, 1, bad=False), run(entity, 2, bad=True)]
    cycle = cycle_of(entity, grades, anchor=grades[1])
    brief = build_brief(cycle, first_round(cycle))
    data = brief.data
    assert data["runs"] == doc(brief, "runs.json")
    assert data["window"]["ranked"][0] == {
        **data["window"]["ranked"][0],
        "bad": True,
        "runId": str(grades[1].execution_id),
    }
    assert data["proposals"] == [] and data["lessons"] == []
    assert data["entity"]["id"] == "triage" and data["entity"]["path"] == entity.path
    assert data["definition"]["content"].endswith("Write the triage.")
    assert data["maxChangedLines"] == 600
    json.dumps(data)  # plain JSON all through
