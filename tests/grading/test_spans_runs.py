"""The engine's own runs record spans (issue 28): a demo triage run's model call, a replay's, a run page's tree."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from grading import spans
from grading.models import Execution
from grading.replays import prepare, run_replay
from grading.runners import run_entity
from grading.runners.context import RunRecorder, _Resources
from singularity.demo_model import demo_policy
from tests.grading.runs_helpers import Brain, make_entity

pytestmark = pytest.mark.django_db

TRIAGE = Path(__file__).resolve().parents[2] / "demo_brain/features/support/triage/triage.scenario.md"
TICKET = {"text": "I was charged twice for my March subscription, please fix it.", "_expected": "billing"}


@pytest.fixture(autouse=True)
def prices(settings):
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("3")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("15")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    settings.BRAMA_MODEL = "demo-model"


def body_of(path: Path) -> str:
    return path.read_text(encoding="utf-8").split("---", 2)[2].strip()


def llm_spans(execution: Execution) -> list[dict[str, Any]]:
    return [span for span in execution.trace if span["kind"] == "llm"]


def assert_the_triage_call_is_recorded(execution: Execution) -> None:
    (call,) = llm_spans(execution)
    attributes = call["attributes"]
    sent = attributes["gen_ai.input.messages"]
    assert sent[0]["role"] == "system" and "## Rules" in sent[0]["parts"][0]["content"]
    assert sent[1]["role"] == "user" and "charged twice" in sent[1]["parts"][0]["content"]
    assert "_expected" not in sent[1]["parts"][0]["content"]
    (answer,) = attributes["gen_ai.output.messages"]
    assert answer["parts"] == [{"type": "text", "content": "billing"}] and answer["finish_reason"] == "stop"
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["gen_ai.request.model"] == "demo-model"
    assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
    expected = (
        Decimal(attributes["gen_ai.usage.input_tokens"]) * 3 + Decimal(attributes["gen_ai.usage.output_tokens"]) * 15
    ) / 1_000_000
    assert Decimal(attributes["singularity.cost_usd"]) == expected
    # The run's totals are its spans': the cost it was charged is what its model call cost.
    assert execution.cost_usd == expected == spans.totals(execution.trace)["cost_usd"]
    assert spans.parse_instant(call["startTime"]) <= spans.parse_instant(call["endTime"])
    (conversation,) = [span for span in execution.trace if span["parentSpanId"] is None]
    assert call["parentSpanId"] == conversation["spanId"]
    # What is stored passes the schema a reported trace must pass.
    assert spans.validate_trace(execution.trace) == execution.trace


def test_a_demo_triage_run_records_its_model_call_with_the_prompt_the_label_tokens_and_cost(fake_gateway):
    fake_gateway.handler = demo_policy
    triage = make_entity("triage", body=body_of(TRIAGE))
    execution = run_entity(triage, input=TICKET, source="demo", gateway=fake_gateway.gateway())
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    assert execution.output["result"] == "billing"
    assert_the_triage_call_is_recorded(execution)


def test_a_replay_of_the_check_records_its_model_call_the_same_way(fake_gateway, tmp_path):
    fake_gateway.handler = demo_policy
    text = TRIAGE.read_text(encoding="utf-8")
    brain = Brain(tmp_path, {"features/triage/triage.scenario.md": text})
    triage = make_entity("triage", body=body_of(TRIAGE), commit=brain.first)
    replay = prepare(triage, input=TICKET, commit=brain.first)
    execution = run_replay(replay, checkout=brain.checkout, gateway=fake_gateway.gateway())
    execution.refresh_from_db()
    assert (execution.status, execution.loop_launched) == ("succeeded", True)
    assert_the_triage_call_is_recorded(execution)


@override_settings(TRACE_MAX_SPAN_BYTES=2048, TRACE_MAX_SPANS=4)
def test_the_recorder_keeps_within_the_limits_cutting_long_values_and_counting_what_it_could_not_keep():
    execution = Execution.objects.create(entity=make_entity(), run_kind="workflow", status="running", source="manual")
    recorder = RunRecorder(execution, _Resources(gateway=object(), catalogue=object()))
    recorder.log("x" * 5000)
    (span,) = recorder.trace
    assert spans.span_bytes(span) <= 2048
    assert span["attributes"]["singularity.cut"] == ["singularity.log"]
    assert span["attributes"]["singularity.log"].endswith("[cut from 5,000 characters]")
    for line in range(5):
        recorder.log(f"line {line}")
    assert len(recorder.trace) == 4
    assert recorder.trace[-1]["attributes"]["singularity.dropped_spans"] == 3
    assert spans.validate_trace(recorder.trace) == recorder.trace


# --- the run page ----------------------------------------------------------------------------------------------


def test_the_run_page_shows_the_span_tree_with_the_prompt_the_completion_tokens_cost_and_tool_arguments(client, alice):
    from tests.grading.test_spans import llm_span, tool_span

    execution = Execution.objects.create(
        entity=make_entity(),
        run_kind="workflow",
        status="succeeded",
        source="api",
        trace=spans.validate_trace([llm_span(), tool_span(), {"tool": "legacy__call", "status": "failed"}]),
    )
    client.force_login(alice)
    page = client.get(execution.get_absolute_url()).content.decode()
    assert "Label this ticket" in page and "billing" in page
    assert "in 120 · out 3" in page and "$0.00042" in page
    assert "&quot;email&quot;: &quot;a@example.com&quot;" in page
    assert "customer not found" in page and "legacy__call" in page
    assert 'data-depth="1"' in page  # the tool span nests under the model call
    assert "No tool calls" not in page


def test_a_long_value_is_shown_cut_with_show_all_and_kept_whole(client, alice):
    from tests.grading.test_spans import tool_span

    long = "word " * 400
    trace = spans.validate_trace([tool_span(parentSpanId=None, attributes={"gen_ai.tool.call.arguments": long})])
    execution = Execution.objects.create(
        entity=make_entity(), run_kind="workflow", status="succeeded", source="api", trace=trace
    )
    client.force_login(alice)
    page = client.get(execution.get_absolute_url()).content.decode()
    assert "show all (2000 characters)" in page
    assert long in page
    assert execution.trace[0]["attributes"]["gen_ai.tool.call.arguments"] == long


def test_what_a_reported_span_says_is_shown_as_text_never_as_markup(client, alice):
    from tests.grading.test_spans import llm_span

    evil = "<script>alert(1)</script>"
    span = llm_span(name=evil, statusMessage=evil, status="error")
    span["attributes"] |= {"gen_ai.request.model": evil, "x.note": evil}
    span["attributes"]["gen_ai.input.messages"] = [{"role": evil, "parts": [{"type": "text", "content": evil}]}]
    execution = Execution.objects.create(
        entity=make_entity(), run_kind="workflow", status="succeeded", source="api", trace=spans.validate_trace([span])
    )
    client.force_login(alice)
    page = client.get(execution.get_absolute_url()).content.decode()
    assert evil not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 6
