"""The judge's method files as tools (R2.28, R2.29): eval_list_methods, eval_get_method, eval_write_method over REST.

A write goes through the brain's git like every brain write: a commit on the default branch, then a sync. A
dry run validates and changes nothing; a stale sha is a conflict naming the current one; a bad file is refused
naming what is wrong and where.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from evolution.models import ActionLog
from singularity.brain.git import GitError
from tests.evolution.settings_helpers import client_for, settings_brain, sha

pytestmark = pytest.mark.django_db

METHODS = "constitution/Evaluation/Methods"
TERSE = "---\nname: terse\ndescription: 'Judge: briefly'\n---\n# Run Evaluation\n\nOne line per criterion.\n"
RUBRIC = "# Run Evaluation\n\nScore against the rubric.\n"


@pytest.fixture
def sb(tmp_path, settings):
    return settings_brain(tmp_path, settings, {f"{METHODS}/rubric.md": RUBRIC})


@pytest.fixture
def person(alice) -> APIClient:
    return client_for(alice)


def test_the_list_names_engine_customised_and_brain_methods_with_the_entities_using_each(sb, person):
    sb.commit({"features/pricing/pricing.scenario.md": sb.show("features/pricing/pricing.scenario.md").replace(
        "method: none", "method: rubric")})  # fmt: skip
    from grading.sync import sync_brain

    sync_brain()
    response = person.get("/api/eval/methods/")
    assert response.status_code == 200, response.json()
    rows = {row["name"]: row for row in response.json()["methods"]}
    assert rows["default"]["source"] == "engine-customised"
    assert rows["rubric"]["source"] == "brain" and rows["rubric"]["usedBy"] == ["scenario:pricing"]
    assert rows["rubric"]["sha"] == sha(RUBRIC) and rows["rubric"]["path"] == f"{METHODS}/rubric.md"


def test_get_answers_the_content_with_the_sha_a_write_swaps_against(sb, person):
    answer = person.get("/api/eval/methods/rubric/").json()
    assert answer["content"] == RUBRIC and answer["sha"] == sha(RUBRIC)
    assert person.get("/api/eval/methods/ghost/").json()["error"] == "not_found"


def test_a_write_commits_the_method_file_and_a_dry_run_changes_nothing(sb, person):
    head = sb.head()
    dry = person.post("/api/eval/methods/terse/", {"content": TERSE, "dryRun": True}, format="json")
    assert dry.status_code == 200, dry.json()
    assert dry.json()["dryRun"] and dry.json()["changed"] and dry.json()["commit"] is None
    assert sb.head() == head and not ActionLog.objects.exists()
    with pytest.raises(GitError):
        sb.show(f"{METHODS}/terse.md")
    made = person.post("/api/eval/methods/terse/", {"content": TERSE}, format="json").json()
    assert made["commit"] == sb.head() != head and made["sha"] == sha(TERSE)
    assert sb.show(f"{METHODS}/terse.md") == TERSE
    assert ActionLog.objects.get().op == "eval_write_method"
    listed = {row["name"] for row in person.get("/api/eval/methods/").json()["methods"]}
    assert "terse" in listed  # the brain was synced after the commit


def test_a_stale_sha_is_a_conflict_naming_the_current_sha_and_the_current_sha_is_accepted(sb, person):
    stale = person.post("/api/eval/methods/rubric/", {"content": TERSE, "sha": sha("older bytes")}, format="json")
    assert stale.status_code == 409
    assert stale.json()["error"] == "conflict" and sha(RUBRIC) in stale.json()["detail"]
    assert sb.show(f"{METHODS}/rubric.md") == RUBRIC
    fresh = person.post("/api/eval/methods/rubric/", {"content": TERSE, "sha": sha(RUBRIC)}, format="json")
    assert fresh.status_code == 200, fresh.json()
    assert sb.show(f"{METHODS}/rubric.md") == TERSE


def test_a_file_without_the_heading_is_refused_naming_the_heading_and_the_file(sb, person):
    head = sb.head()
    response = person.post("/api/eval/methods/terse/", {"content": "# Grade it\n\nWell.\n"}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert (
        body["error"] == "invalid" and "# Run Evaluation" in body["detail"] and f"{METHODS}/terse.md" in body["detail"]
    )
    assert sb.head() == head


def test_a_broken_frontmatter_is_refused_naming_where(sb, person):
    broken = "---\nname: terse\ndescription: Judge: briefly\n---\n# Run Evaluation\n"
    response = person.post("/api/eval/methods/terse/", {"content": broken, "dryRun": True}, format="json")
    assert response.status_code == 400 and f"{METHODS}/terse.md" in response.json()["detail"]


def test_the_name_none_is_reserved(sb, person):
    response = person.post("/api/eval/methods/none/", {"content": RUBRIC}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid" and "reserved" in response.json()["detail"]


def test_an_agent_may_dry_run_but_not_write_the_judges_method(sb, alice):
    agent = client_for(alice, agent=True)
    assert agent.get("/api/eval/methods/").status_code == 200
    assert agent.post("/api/eval/methods/terse/", {"content": TERSE, "dryRun": True}, format="json").status_code == 200
    refused = agent.post("/api/eval/methods/terse/", {"content": TERSE}, format="json")
    assert refused.status_code == 403 and refused.json()["error"] == "refused"


def test_the_schema_documents_the_three_tools():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    ids = {op["operationId"] for path in schema["paths"].values() for op in path.values() if "operationId" in op}
    assert {"eval_list_methods", "eval_get_method", "eval_write_method"} <= ids
