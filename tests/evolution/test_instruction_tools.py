"""The loop's prompts as instruction modules (R8.32, R8.33): instruction_list, _get, _write_file and _reset over REST,
and a brain copy with a placeholder the loop does not fill refused at write and at the proposer's brief.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.loop.brief import BriefError, build_brief
from evolution.models import ActionLog, Cycle
from singularity.brain.git import GitError
from tests.evolution.loop_helpers import looped
from tests.evolution.settings_helpers import MANIFEST, client_for, settings_brain, sha
from tests.evolution.test_brief import cycle_of, first_round, run
from tests.grading.grading_helpers import brain_repo

pytestmark = pytest.mark.django_db

WORKFLOW = "constitution/Loop/proposer/workflow.md"
OURS = "# Our brief for {{entity}}\n\n{{runs}}\n\nKeep it under {{maxChangedLines}} lines.\n"


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings)


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


def test_the_list_names_every_engine_prompt_its_readers_and_the_entities_using_it(sb, person):
    response = person.get("/api/loop/instructions/")
    assert response.status_code == 200, response.json()
    rows = {row["path"]: row for row in response.json()["instructions"]}
    assert set(rows) == {
        "loop/proposer/workflow",
        "loop/proposer/pipeline",
        "loop/proposer/heartbeat",
        "loop/proposer/chat",
        "loop/proposer/evolve",
        "loop/proposer/idea",
        "loop/chat-privacy",
    }
    workflow = rows["loop/proposer/workflow"]
    assert workflow["source"] == "engine" and workflow["file"] == WORKFLOW
    assert workflow["loop"]["agents"] == ["proposer"]
    assert workflow["usedBy"] == ["scenario:digest", "scenario:pricing"] and workflow["unread"] is None
    assert rows["loop/proposer/idea"]["usedBy"] == ["scenario:digest", "scenario:pricing"]
    assert rows["loop/proposer/heartbeat"]["usedBy"] == []


def test_a_manifest_that_does_not_load_leaves_used_by_null_with_why_and_the_prompts_still_read(sb, person):
    sb.commit({MANIFEST: "loop:\n  preset: sideways\n"})
    from grading.sync import sync_brain

    sync_brain()
    rows = {row["path"]: row for row in person.get("/api/loop/instructions/").json()["instructions"]}
    assert rows["loop/proposer/workflow"]["usedBy"] is None
    assert "MANIFEST.yaml" in rows["loop/proposer/workflow"]["unread"]
    got = person.get("/api/loop/instructions/get/", {"path": "loop/proposer/workflow"}).json()
    assert "{{entity}}" in got["content"]


def test_the_first_write_forks_the_template_into_the_brain_and_reset_restores_it(sb, person):
    got = person.get("/api/loop/instructions/get/", {"path": "loop/proposer/workflow"}).json()
    assert got["source"] == "engine" and got["sha"] == sha(got["content"])
    body = {"path": "loop/proposer/workflow", "content": OURS, "sha": got["sha"]}
    made = person.post("/api/loop/instructions/write/", body, format="json")
    assert made.status_code == 200, made.json()
    assert made.json()["commit"] == sb.head() and sb.show(WORKFLOW) == OURS
    again = person.get("/api/loop/instructions/get/", {"path": "loop/proposer/workflow"}).json()
    assert again["source"] == "brain" and again["content"] == OURS
    reset = person.post("/api/loop/instructions/reset/", {"path": "loop/proposer/workflow"}, format="json")
    assert reset.status_code == 200 and reset.json()["changed"]
    with pytest.raises(GitError):
        sb.show(WORKFLOW)
    assert person.get("/api/loop/instructions/get/", {"path": "loop/proposer/workflow"}).json()["source"] == "engine"
    assert [row.op for row in ActionLog.objects.order_by("pk")] == ["instruction_write", "instruction_reset"]


def test_a_placeholder_the_loop_does_not_fill_is_refused_naming_it_and_nothing_is_written(sb, person):
    head = sb.head()
    body = {"path": "loop/proposer/workflow", "content": OURS + "\nThe plan: {{plan}}\n"}
    response = person.post("/api/loop/instructions/write/", body, format="json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert response.json()["error"] == "invalid" and "{{plan}}" in detail and WORKFLOW in detail and "line 7" in detail
    assert sb.head() == head


def test_the_idea_placeholder_is_refused_outside_the_idea_brief_and_taken_in_it(sb, person):
    outside = {"path": "loop/proposer/workflow", "content": "{{entity}}: {{idea}}\n", "dryRun": True}
    assert person.post("/api/loop/instructions/write/", outside, format="json").status_code == 400
    inside = {"path": "loop/proposer/idea", "content": "{{entity}}: {{idea}}\n", "dryRun": True}
    assert person.post("/api/loop/instructions/write/", inside, format="json").status_code == 200


def test_a_stale_sha_is_a_conflict_naming_the_current_one(sb, person):
    got = person.get("/api/loop/instructions/get/", {"path": "loop/proposer/workflow"}).json()
    body = {"path": "loop/proposer/workflow", "content": OURS, "sha": sha("what I read last week")}
    response = person.post("/api/loop/instructions/write/", body, format="json")
    assert response.status_code == 409 and got["sha"] in response.json()["detail"]


def test_a_path_the_engine_does_not_ship_is_no_module(sb, person):
    response = person.post("/api/loop/instructions/write/", {"path": "loop/proposer/plan", "content": "x"},
                           format="json")  # fmt: skip
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert "loop/proposer/workflow" in response.json()["detail"]


def test_a_brain_copy_with_an_unfilled_placeholder_never_reaches_the_proposer(tmp_path):
    scenario = "---\nname: Triage\nloop:\n  enabled: true\n---\nLabel the ticket.\n"
    checkout, commit = brain_repo(
        tmp_path / "brain",
        {"features/triage/triage.scenario.md": scenario, WORKFLOW: "Brief for {{entity}}.\nFollow {{plan}}.\n"},
    )
    entity = looped(commit=commit)
    grade = run(entity, 1, bad=True)
    cycle = cycle_of(entity, [grade], origin=Cycle.Origin.REQUEST)
    with pytest.raises(BriefError) as refused:
        build_brief(cycle, first_round(cycle), checkout=checkout)
    assert "{{plan}}" in str(refused.value) and WORKFLOW in str(refused.value)


def test_the_schema_documents_the_four_tools():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    ids = {op["operationId"] for path in schema["paths"].values() for op in path.values() if "operationId" in op}
    assert {"instruction_list", "instruction_get", "instruction_write_file", "instruction_reset"} <= ids


def test_the_brief_fills_every_placeholder_the_modules_allow():
    from evolution.core import prompts
    from evolution.loop import brief as b

    names = sorted(prompts.BRIEF_PLACEHOLDERS | {prompts.IDEA})
    documents = {"proposals.json": [], "lessons.json": [], "window.json": {}, "grade.json": {}, "metrics.json": {}}
    documents.update({"failures.json": [], "refinement.md": "Shorter.", "idea.md": "Lead with numbers."})
    template = "".join("{{" + name + "}}\n" for name in names)
    parts = b._Parts(runs=[], fixed=documents, definition=[], template=template, tail="",
                     entity_label="scenario triage", max_changed_lines=10, editable="a.md")  # fmt: skip
    prompt = b._prompt(parts, b._documents(parts))
    assert "{{" not in prompt and prompt.count("\n") >= len(names) - 1


def test_an_empty_brief_is_refused_but_a_blank_privacy_copy_turns_the_rule_off(sb, person):
    brief = {"path": "loop/proposer/workflow", "content": "\n", "dryRun": True}
    refused = person.post("/api/loop/instructions/write/", brief, format="json")
    assert refused.status_code == 400 and "empty" in refused.json()["detail"]
    privacy = {"path": "loop/chat-privacy", "content": "\n", "dryRun": True}
    assert person.post("/api/loop/instructions/write/", privacy, format="json").json()["changed"]
