"""The pull-request API for scripts (/api/forge/pulls/): list, read with statuses, merge and close for a person."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from evolution.forges.base import DIFF_GATE
from evolution.models import PullRequest
from singularity.models import ApiToken
from tests.evolution.forge_helpers import ForgeBrain, forge_brain

pytestmark = pytest.mark.django_db


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    return forge_brain(tmp_path, settings)


def api(user: User, *, agent: bool = False) -> APIClient:
    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def opened(fb: ForgeBrain, branch: str = "loop/digest-0000aaaa", *, green: bool = True) -> int:
    head = fb.push_branch(branch, {f"features/digest/{branch.rsplit('-', 1)[1]}.md": "Line one.\n"})
    info = fb.forge.open_pull(head=branch, base="main", title="Shorter notes", body="**Why**: brevity.")
    if green:
        fb.forge.set_status(head, DIFF_GATE, "success", "2 changed lines")
    return info.number


def test_the_list_answers_every_pull_open_first_and_filters_by_state(fb, alice):
    first = opened(fb)
    second = opened(fb, "loop/digest-0000bbbb")
    fb.forge.close_pull(first, by="alice")
    body = api(alice).get("/api/forge/pulls/").json()
    assert [p["number"] for p in body["pulls"]] == [second, first]
    assert body["pulls"][0]["state"] == "open" and body["pulls"][0]["head"] == "loop/digest-0000bbbb"
    assert body["pulls"][0]["url"] == f"/evolution/pulls/{second}/"
    closed = api(alice).get("/api/forge/pulls/", {"state": "closed"}).json()
    assert [p["number"] for p in closed["pulls"]] == [first]


def test_a_state_that_is_not_one_is_refused_naming_the_states(fb, alice):
    answer = api(alice).get("/api/forge/pulls/", {"state": "draft"})
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid" and "open, merged or closed" in answer.json()["detail"]


def test_one_pull_carries_its_body_statuses_and_what_blocks_its_merge(fb, alice):
    number = opened(fb, green=False)
    body = api(alice).get(f"/api/forge/pulls/{number}/").json()
    assert body["number"] == number and body["body"] == "**Why**: brevity."
    assert body["statuses"] == []
    assert body["mergeBlockers"] == [f"required status {DIFF_GATE} is missing on {body['headSha'][:12]}"]
    fb.forge.set_status(body["headSha"], DIFF_GATE, "success", "1 changed line")
    body = api(alice).get(f"/api/forge/pulls/{number}/").json()
    [status] = body["statuses"]
    assert status == {
        "context": DIFF_GATE,
        "state": "success",
        "description": "1 changed line",
        "required": True,
        "updatedAt": status["updatedAt"],
    }
    assert body["mergeBlockers"] == []


def test_a_number_that_names_no_pull_is_404(fb, alice):
    answer = api(alice).get("/api/forge/pulls/999/")
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    assert "#999" in answer.json()["detail"]
    assert api(alice).post("/api/forge/pulls/999/merge/").status_code == 404


def test_a_person_merges_and_the_brain_has_the_change(fb, alice):
    number = opened(fb)
    answer = api(alice).post(f"/api/forge/pulls/{number}/merge/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["state"] == "merged" and body["mergedBy"] == "alice" and len(body["mergeSha"]) == 40
    assert fb.branch_sha("main") == body["mergeSha"]
    assert body["problems"] == []


def test_a_merge_branch_protection_refuses_is_409_in_the_forges_words_and_nothing_merges(fb, alice):
    number = opened(fb, green=False)
    answer = api(alice).post(f"/api/forge/pulls/{number}/merge/")
    assert answer.status_code == 409
    assert answer.json()["error"] == "precondition"
    assert f"required status {DIFF_GATE} is missing" in answer.json()["detail"]
    assert PullRequest.objects.get(number=number).state == "open"


def test_a_person_closes_and_a_merged_pull_cannot_be_closed(fb, alice):
    number = opened(fb)
    answer = api(alice).post(f"/api/forge/pulls/{number}/close/")
    assert answer.status_code == 200 and answer.json()["state"] == "closed" and answer.json()["closedBy"] == "alice"
    other = opened(fb, "loop/digest-0000cccc")
    api(alice).post(f"/api/forge/pulls/{other}/merge/")
    refused = api(alice).post(f"/api/forge/pulls/{other}/close/")
    assert refused.status_code == 409 and "already merged" in refused.json()["detail"]


def test_an_agent_reads_but_never_merges_or_closes(fb, alice):
    number = opened(fb)
    bot = api(alice, agent=True)
    assert bot.get(f"/api/forge/pulls/{number}/").status_code == 200
    for verb in ("merge", "close"):
        answer = bot.post(f"/api/forge/pulls/{number}/{verb}/")
        assert answer.status_code == 403
        assert answer.json()["error"] == "refused" and "agent" in answer.json()["detail"]
    assert PullRequest.objects.get(number=number).state == "open"


def test_a_person_who_is_not_staff_may_read_but_not_merge(fb, charlie):
    number = opened(fb)
    assert api(charlie).get("/api/forge/pulls/").status_code == 200
    answer = api(charlie).post(f"/api/forge/pulls/{number}/merge/")
    assert answer.status_code == 403 and "staff" in answer.json()["detail"]


def test_the_schema_documents_the_pull_endpoints(alice):
    schema = api(alice).get("/api/schema/", {"format": "json"}).json()
    for path in ("/api/forge/pulls/", "/api/forge/pulls/{number}/", "/api/forge/pulls/{number}/merge/"):
        assert path in schema["paths"], path
    assert schema["paths"]["/api/forge/pulls/{number}/merge/"]["post"]["operationId"] == "forge_merge_pull"
