"""A model choice that cannot work is refused, and a person can recover a being stuck on one (issue 34)."""

from __future__ import annotations

import json

import pytest

from singularity.models import Being, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import make_being, make_runtime, manage, manage_env


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


@pytest.mark.django_db
def test_a_switch_to_an_unserved_model_is_refused_naming_the_served_ones_and_the_being_goes_on(fake_gateway, catalogue):
    fake_gateway.models = ["m-small", "m-large"]
    fake_gateway.script(
        Reply(tool_calls=[("self__switch_model", {"model": "m-gone"})]),
        Reply(tool_calls=[("self__switch_model", {"model": "m-large"})]),
        Reply(content="done"),
    )
    being = make_being(model="m-small")
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    assert report.status == "completed"
    being.refresh_from_db()
    assert being.model == "m-large"
    assert [r.json["model"] for r in fake_gateway.requests] == ["m-small", "m-small", "m-large"]
    refused = [m for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"][0]
    content = json.loads(refused["content"])
    assert content["status"] == "failed"
    assert "'m-gone' is not served" in content["error"] and "m-large, m-small" in content["error"]
    statuses = [e.data["status"] for e in Event.objects.filter(being=being, kind="tool_finished").order_by("seq")]
    assert statuses == ["failed", "success"]
    assert fake_gateway.model_list_requests == 1  # cached


@pytest.mark.django_db
def test_a_gateway_that_lists_no_models_refuses_no_switch(fake_gateway, catalogue):
    fake_gateway.script(Reply(tool_calls=[("self__switch_model", {"model": "anything"})]), Reply(content="done"))
    being = make_being()
    make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    being.refresh_from_db()
    assert being.model == "anything"


@pytest.mark.django_db(transaction=True)
def test_resume_with_model_recovers_a_being_stuck_on_an_unserved_model(fake_gateway, tmp_path):
    fake_gateway.models = ["m-small"]

    def answer(request, headers):
        if request["model"] != "m-small":
            return Reply(status=400, error_message=f"model {request['model']} does not exist")
        return Reply(content="thinking again")

    fake_gateway.handler = answer
    env = manage_env(
        BRAMA_BASE_URL=fake_gateway.base_url, BRAMA_MAX_RETRIES="0", SINGULARITY_WORKSPACE=str(tmp_path / "ws")
    )
    make_being(model="m-gone")
    stuck = manage("being", "once", "--name", "ada", "--resume", env=env)
    assert stuck.returncode == 3 and "m-gone does not exist" in stuck.stderr

    refused = manage("being", "once", "--name", "ada", "--resume", "--model", "m-other", env=env)
    assert refused.returncode == 2 and "'m-other' is not served" in refused.stderr and "m-small" in refused.stderr

    recovered = manage("being", "once", "--name", "ada", "--resume", "--model", "m-small", env=env)
    assert recovered.returncode == 0, recovered.stderr
    assert json.loads(recovered.stdout)["final_content"] == "thinking again"
    being = Being.objects.get(name="ada")
    assert being.model == "m-small"
    started = Event.objects.filter(being=being, kind="started").order_by("-seq").first()
    assert started.data["model"] == "m-small" and started.data["model_was"] == "m-gone"
