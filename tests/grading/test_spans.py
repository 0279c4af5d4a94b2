"""A run's trace as spans (issue 28): the schema, its limits, old entries read as spans, the API round trip."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from grading import spans
from grading.models import Execution
from grading.spans import TraceRefused, normalise, totals, tree, validate_trace
from singularity.models import ApiToken
from tests.grading.runs_helpers import make_entity

URL = "/api/runs/report/"
T0 = "2026-03-01T11:00:00.000000Z"


def llm_span(**over: Any) -> dict[str, Any]:
    span = {
        "spanId": "llm-1",
        "parentSpanId": None,
        "name": "chat gpt-4o",
        "kind": "llm",
        "startTime": T0,
        "endTime": "2026-03-01T11:00:01.250000Z",
        "status": "ok",
        "statusMessage": "",
        "attributes": {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "Label this ticket"}]}],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "billing"}], "finish_reason": "stop"}
            ],
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 3,
            "gen_ai.response.finish_reasons": ["stop"],
            "singularity.cost_usd": "0.000420",
        },
    }
    span.update(over)
    return span


def tool_span(**over: Any) -> dict[str, Any]:
    span = {
        "spanId": "tool-1",
        "parentSpanId": "llm-1",
        "name": "execute_tool crm__lookup",
        "kind": "tool",
        "startTime": "2026-03-01T11:00:01.300000Z",
        "endTime": "2026-03-01T11:00:01.400000Z",
        "status": "error",
        "statusMessage": "customer not found",
        "attributes": {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "crm__lookup",
            "gen_ai.tool.call.arguments": {"email": "a@example.com"},
        },
    }
    span.update(over)
    return span


# --- the schema ------------------------------------------------------------------------


def test_a_span_tree_is_read_as_sent_and_durations_become_end_times():
    given_duration = tool_span()
    del given_duration["endTime"]
    given_duration["durationMs"] = 100
    stored = validate_trace([llm_span(), given_duration])
    assert stored[0] == llm_span()
    assert stored[1] == tool_span()


def test_an_instant_with_an_offset_is_stored_as_the_same_instant_in_utc():
    (stored,) = validate_trace([llm_span(startTime="2026-03-01T13:00:00+02:00")])
    assert stored["startTime"] == T0


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"spanId": ""}, "trace[0].spanId"),
        ({"kind": "agent"}, "trace[0] (span 'llm-1').kind: expected one of llm, tool, other"),
        ({"status": "unset"}, "trace[0] (span 'llm-1').status"),
        ({"startTime": "yesterday"}, "startTime: 'yesterday' is not an ISO-8601 instant"),
        ({"startTime": "2026-03-01T11:00:00"}, "startTime"),
        ({"endTime": "2026-03-01T10:00:00Z"}, "endTime: 2026-03-01T10:00:00+00:00 is before startTime"),
        ({"durationMs": 5}, "give endTime or durationMs, not both"),
        ({"colour": "red"}, "trace[0] (span 'llm-1').colour: unknown field"),
        ({"parentSpanId": "nobody"}, "parentSpanId: 'nobody' is no span of this trace"),
        ({"parentSpanId": "llm-1"}, "the parents loop back to span 'llm-1'"),
        ({"attributes": {"gen_ai.usage.input_tokens": -1}}, "gen_ai.usage.input_tokens: expected a whole number"),
        ({"attributes": {"gen_ai.usage.output_tokens": "3"}}, "gen_ai.usage.output_tokens"),
        ({"attributes": {"singularity.cost_usd": 0.1}}, "singularity.cost_usd: expected a decimal string"),
        ({"attributes": {"singularity.cost_usd": "-1"}}, "must not be negative"),
        ({"attributes": {"singularity.cost_usd": "0.0000000000001"}}, "more than 12 decimal places"),
        ({"attributes": {"gen_ai.input.messages": "hi"}}, "gen_ai.input.messages: expected a list of messages"),
        ({"attributes": {"gen_ai.response.finish_reasons": "stop"}}, "finish_reasons: expected a list of text"),
        ({"attributes": {"gen_ai.request.model": 4}}, "gen_ai.request.model: expected text"),
    ],
)
def test_a_bad_span_is_refused_naming_the_span_and_the_field(change, named):
    with pytest.raises(TraceRefused) as refused:
        validate_trace([llm_span(**change)])
    assert named in str(refused.value)


def test_two_spans_may_not_share_an_id():
    with pytest.raises(TraceRefused, match=r"trace\[1\] \(span 'llm-1'\)\.spanId: already used by trace\[0\]"):
        validate_trace([llm_span(), llm_span()])


def test_a_loop_of_parents_is_refused():
    a = llm_span(spanId="a", parentSpanId="b")
    b = llm_span(spanId="b", parentSpanId="a")
    with pytest.raises(TraceRefused, match="the parents loop back"):
        validate_trace([a, b])


# --- the limits ------------------------------------------------------------------------------


@override_settings(TRACE_MAX_SPANS=3)
def test_a_trace_over_its_span_limit_is_refused_naming_the_limit_and_the_first_span_past_it():
    trace = [llm_span(spanId=f"s{i}") for i in range(4)]
    with pytest.raises(TraceRefused) as refused:
        validate_trace(trace)
    message = str(refused.value)
    assert "4 spans, over the limit of 3 spans a run (TRACE_MAX_SPANS)" in message
    assert "trace[3] (span 's3')" in message
    assert len(validate_trace(trace[:3])) == 3


@override_settings(TRACE_MAX_SPAN_BYTES=4096)
def test_a_span_over_its_byte_limit_is_refused_and_one_at_the_limit_is_kept_whole():
    base = spans.span_bytes(validate_trace([llm_span(attributes={"note": ""})])[0])
    fits = llm_span(attributes={"note": "x" * (4096 - base)})
    (stored,) = validate_trace([fits])
    assert spans.span_bytes(stored) == 4096 and stored["attributes"]["note"] == "x" * (4096 - base)
    over = llm_span(attributes={"note": "x" * (4097 - base)})
    with pytest.raises(TraceRefused, match=r"trace\[0\] \(span 'llm-1'\): 4,097 bytes, over the limit of 4,096 bytes"):
        validate_trace([over])


@override_settings(TRACE_MAX_BYTES=2048, TRACE_MAX_SPAN_BYTES=2048)
def test_a_trace_over_its_total_byte_limit_is_refused_naming_the_span_it_passed_it_at():
    trace = [llm_span(spanId=f"s{i}", attributes={"note": "y" * 500}) for i in range(4)]
    with pytest.raises(TraceRefused, match=r"over the limit of 2,048 bytes a trace \(TRACE_MAX_BYTES\) at trace\[2\]"):
        validate_trace(trace)


# --- old entries read as spans --------------------------------------------------------------------


def test_old_tool_entries_and_log_lines_read_as_spans():
    old = [
        {"tool": "echo__echo", "arguments": {"text": "hi"}, "status": "success", "error": "", "duration_ms": 7},
        {"tool": "echo__fail", "status": "indeterminate", "error": "timed out", "dry_run": True, "task": "a"},
        {"log": "starting", "at": "2026-03-01T11:00:00+00:00"},
    ]
    first, second, log = normalise(old)
    assert (first["kind"], first["name"], first["status"], first["durationMs"]) == ("tool", "echo__echo", "ok", 7)
    assert first["attributes"]["gen_ai.tool.call.arguments"] == {"text": "hi"}
    assert first["startTime"] is None
    assert (second["status"], second["statusMessage"]) == ("error", "timed out")
    assert second["attributes"]["singularity.dry_run"] is True and second["attributes"]["singularity.task"] == "a"
    assert (log["kind"], log["attributes"]["singularity.log"], log["startTime"]) == ("other", "starting", T0)
    assert spans.tool_calls(old)[1] == {"tool": "echo__fail", "status": "indeterminate", "error": "timed out"}


def test_totals_sum_tokens_and_cost_and_measure_wall_time_over_the_spans():
    result = totals(validate_trace([llm_span(), tool_span(), llm_span(spanId="llm-2", parentSpanId=None)]))
    assert (result["input_tokens"], result["output_tokens"]) == (240, 6)
    assert result["cost_usd"] == Decimal("0.000840")
    assert result["wall_ms"] == pytest.approx(1400)
    assert (result["llm_calls"], result["tool_calls"], result["errors"]) == (2, 1, 1)


def test_the_tree_nests_children_under_their_parent_and_places_their_bars():
    rows = tree(validate_trace([tool_span(), llm_span()]))
    assert [(row["span"]["spanId"], row["depth"]) for row in rows] == [("llm-1", 0), ("tool-1", 1)]
    assert rows[0]["offset_pct"] == 0 and rows[0]["width_pct"] == pytest.approx(89.29, abs=0.01)
    assert rows[1]["offset_pct"] == pytest.approx(92.86, abs=0.01)


# --- the API -----------------------------------------------------------------------------------------


def _client(user) -> APIClient:
    _, key = ApiToken.issue(user, "script")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def _report(trace: Any, **over: Any) -> dict[str, Any]:
    return {
        "entity": "scenario:triage",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05Z",
        "trace": trace,
        **over,
    }


@pytest.fixture
def triage(db):
    with time_machine.travel("2026-03-01T12:00:00Z", tick=False):
        yield make_entity("triage")


@pytest.mark.django_db
def test_a_reported_trace_reads_back_whole_and_costs_what_its_spans_cost(triage, alice):
    api = _client(alice)
    trace = [llm_span(), tool_span()]
    response = api.post(URL, _report(trace), format="json")
    assert response.status_code == 201, response.json()
    (run_id,) = response.json()["ids"]
    execution = Execution.objects.get(pk=run_id)
    assert execution.cost_usd == Decimal("0.000420") and execution.tool_failures == 1
    assert api.get(f"/api/runs/{run_id}/").json()["trace"] == trace


@pytest.mark.django_db
@override_settings(TRACE_MAX_SPANS=2)
def test_a_reported_trace_over_its_limit_is_a_400_naming_the_limit_and_the_span(triage, alice):
    trace = [llm_span(spanId=f"s{i}") for i in range(3)]
    response = _client(alice).post(URL, _report(trace), format="json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "over the limit of 2 spans a run (TRACE_MAX_SPANS)" in detail and "trace[2] (span 's2')" in detail
    assert not Execution.objects.exists()


@pytest.mark.django_db
def test_a_bad_span_in_a_batch_is_refused_naming_the_row(triage, alice):
    response = _client(alice).post(URL, [_report([]), _report([llm_span(kind="agent")])], format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("runs[1].trace[0] (span 'llm-1').kind:")


@pytest.mark.django_db
def test_an_old_run_reads_its_tool_calls_back_as_tool_spans(triage, alice):
    execution = Execution.objects.create(
        entity=triage,
        run_kind="workflow",
        status="succeeded",
        source="api",
        trace=[{"tool": "kb__search", "status": "success", "arguments": {"q": "refund"}, "duration_ms": 4}],
    )
    (span,) = _client(alice).get(f"/api/runs/{execution.pk}/").json()["trace"]
    assert (span["kind"], span["name"], span["durationMs"]) == ("tool", "kb__search", 4)
    assert span["attributes"]["gen_ai.tool.call.arguments"] == {"q": "refund"}


@pytest.mark.django_db
def test_the_schema_documents_the_span_with_its_genai_attributes(alice):
    schema = _client(alice).get("/api/schema/?format=json").json()
    span = schema["components"]["schemas"]["Span"]
    assert {"spanId", "parentSpanId", "name", "kind", "startTime", "endTime", "status", "attributes"} <= set(
        span["properties"]
    )
    attributes = span["properties"]["attributes"]["properties"]
    for name in ("gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.tool.call.arguments"):
        assert name in attributes
    assert "singularity.cost_usd" in attributes
    detail = schema["components"]["schemas"]["RunDetail"]["properties"]["trace"]
    assert detail["items"]["$ref"].endswith("/Span")


# --- round trip over generated trees -------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def span_trees(draw: Any) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 12))
    result = []
    for index in range(count):
        kind = draw(st.sampled_from(spans.KINDS))
        start_us = draw(st.integers(0, 10**9))
        attributes = draw(st.dictionaries(_text.filter(bool).map(lambda key: "x." + key), _json, max_size=3))
        if kind == "llm":
            attributes |= {
                "gen_ai.request.model": draw(_text),
                "gen_ai.usage.input_tokens": draw(st.integers(0, 10**6)),
                "gen_ai.usage.output_tokens": draw(st.integers(0, 10**6)),
                "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": draw(_text)}]}],
                "singularity.cost_usd": str(draw(st.decimals(0, 10, places=6, allow_nan=False))),
            }
        if kind == "tool":
            attributes |= {"gen_ai.tool.name": draw(_text), "gen_ai.tool.call.arguments": draw(_json)}
        status = draw(st.sampled_from(spans.STATUSES))
        result.append(
            {
                "spanId": f"span-{index}",
                "parentSpanId": f"span-{draw(st.integers(0, index - 1))}" if index and draw(st.booleans()) else None,
                "name": draw(_text.filter(bool)),
                "kind": kind,
                "startTime": _us(start_us),
                "endTime": _us(start_us + draw(st.integers(0, 10**8))),
                "status": status,
                "statusMessage": draw(_text) if status == "error" else "",
                "attributes": attributes,
            }
        )
    return result


def _us(offset: int) -> str:
    from datetime import UTC, datetime, timedelta

    return spans.instant_text(datetime(2026, 3, 1, 10, tzinfo=UTC) + timedelta(microseconds=offset))


@pytest.mark.django_db
@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=span_trees())
def test_any_span_tree_within_the_limits_reads_back_whole(triage, alice, trace):
    api = _client(alice)
    response = api.post(URL, _report(trace), format="json")
    assert response.status_code == 201, response.json()
    (run_id,) = response.json()["ids"]
    assert api.get(f"/api/runs/{run_id}/").json()["trace"] == trace
