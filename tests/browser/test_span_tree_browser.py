"""A run reported through the API with an LLM span and a tool span, read on its run page in headless Chromium."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from singularity.models import ApiToken
from tests.browser.helpers import log_in
from tests.grading.runs_helpers import make_entity
from tests.grading.test_spans import llm_span, tool_span

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium (required in CI)"
    ),
]

LONG_RESULT = "line of the knowledge-base article " * 60


def report(live_server, alice) -> str:
    """Report one run with a model call and a tool call under it through ``POST /api/runs/report/``; its id."""
    make_entity("triage")
    _, key = ApiToken.issue(alice, "script")
    tool = tool_span(status="ok", statusMessage="")
    tool["attributes"]["gen_ai.tool.call.result"] = LONG_RESULT
    body = {
        "entity": "scenario:triage",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:02Z",
        "input": {"text": "I was charged twice"},
        "output": {"label": "billing"},
        "trace": [llm_span(), tool],
    }
    response = httpx.post(
        f"{live_server.url}/api/runs/report/", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 201, response.text
    return response.json()["ids"][0]


@pytest.mark.parametrize("width", [1366, 390])
def test_the_run_page_shows_the_model_call_and_the_tool_call_of_a_reported_trace(page, live_server, alice, width):
    run_id = report(live_server, alice)
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server, f"/evolution/runs/{run_id}/")
    tree = page.locator(".span-tree")
    llm = tree.locator("li[data-kind=llm]")
    tool = tree.locator("li[data-kind=tool]")
    assert llm.locator("[data-messages=input]").inner_text().count("Label this ticket") == 1
    assert "billing" in llm.locator("[data-messages=output]").inner_text()
    assert llm.locator("[data-tokens]").inner_text() == "in 120 · out 3"
    assert llm.locator("[data-cost]").inner_text() == "$0.00042"
    assert '"email": "a@example.com"' in tool.locator("[data-arguments]").inner_text()
    assert tool.get_attribute("data-depth") == "1"  # nested under the model call that asked for it
    totals = tree.locator("[data-totals]").inner_text()
    assert "tokens in 120 / out 3" in totals and "cost $0.00042" in totals and "wall time 1.40 s" in totals
    # Both bars of the waterfall are drawn: the tool's starts after the model call's.
    lefts = [tree.locator(f"li[data-kind={kind}] .span-bar").bounding_box()["x"] for kind in ("llm", "tool")]
    assert lefts[0] < lefts[1]
    # The long result shows cut; "show all" opens the whole of it.
    result = tool.locator("[data-result]")
    assert LONG_RESULT.strip() not in result.locator("pre").first.inner_text()
    result.get_by_text("show all").click()
    assert LONG_RESULT.strip() in result.locator("details pre").inner_text()
    # The tree stays inside the viewport: wide content scrolls in its own box, not the page.
    box = tree.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width


def test_a_demo_triage_run_shows_the_prompt_it_sent_and_the_label_it_got_back(page, live_server, alice, settings):
    from decimal import Decimal

    from grading.runners import run_entity
    from singularity.demo_model import demo_policy
    from tests.fakes.gateway import FakeGateway
    from tests.grading.test_spans_runs import TICKET, TRIAGE, body_of

    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("3")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("15")
    settings.BRAMA_MODEL = "demo-model"
    with FakeGateway() as fake:
        fake.handler = demo_policy
        execution = run_entity(
            make_entity("triage", body=body_of(TRIAGE)), input=TICKET, source="demo", gateway=fake.gateway()
        )
    page.set_viewport_size({"width": 390, "height": 900})
    log_in(page, live_server, f"/evolution/runs/{execution.pk}/")
    llm = page.locator(".span-tree li[data-kind=llm]")
    sent = llm.locator("[data-messages=input]").inner_text()
    assert "## Rules" in sent and "charged twice" in sent
    assert llm.locator("[data-messages=output]").inner_text().strip().endswith("billing")
    (call,) = [span for span in execution.trace if span["kind"] == "llm"]
    used = call["attributes"]
    assert llm.locator("[data-tokens]").inner_text() == (
        f"in {used['gen_ai.usage.input_tokens']} · out {used['gen_ai.usage.output_tokens']}"
    )
    assert llm.locator("[data-cost]").inner_text().startswith("$0.000")
    assert "No spans recorded" not in page.inner_text("body")
