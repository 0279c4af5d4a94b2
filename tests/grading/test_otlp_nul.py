"""A NUL character (U+0000) an agent sends in its trace is kept as U+FFFD on every database, at every OTLP door.

PostgreSQL refuses U+0000 in text and jsonb; SQLite keeps it. A run's
evidence is kept, not refused: where a run's JSON or text is built, a NUL in
a string or a key becomes U+FFFD (``grading.executions.validate_report``), so
both databases store the same run. These send real export requests, protobuf
and OTLP/JSON, through the view in this process.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from grading import otlp_assemble
from grading.models import Entity, Execution, OtlpTrace, UnknownAgent
from singularity.models import ApiToken
from tests.grading.grading_helpers import make_entity
from tests.grading.otlp_helpers import agent_spans, encoded, export_in_process, otlp_json

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(django_user_model) -> str:
    _, key = ApiToken.issue(django_user_model.objects.create_user("agent-owner"), "otlp", is_agent=True)
    return key


@pytest.fixture
def triage(key) -> Entity:
    return make_entity("triage", evaluation={"method": "none", "sample": {"rate": 1.0, "maxPerDay": 1000}})


def assemble() -> int:
    return otlp_assemble.sweep(now=timezone.now() + timedelta(hours=1))


def with_nuls(service: str = "triage") -> ExportTraceServiceRequest:
    """The triage agent's trace with NULs in a tool span's attribute (value and key), its name, and the root's status."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans(service=service, fail=True)))
    tool = request.resource_spans[0].scope_spans[0].spans[1]
    tool.attributes.add(key="gen_ai.tool.call.result").value.string_value = "found\x00it"
    tool.attributes.add(key="odd\x00key").value.string_value = "x"
    tool.name = "execute_tool crm\x00lookup"
    root = request.resource_spans[0].scope_spans[0].spans[3]
    root.status.message = "the CRM\x00was down"
    next(item for item in root.attributes if item.key == "output.value").value.string_value = '{"label": "bill\\u0000"}'
    return request


def assert_kept_with_replacement_characters(run: Execution) -> None:
    assert run.status == "failed" and run.error == "the CRM\ufffdwas down"
    assert run.output == {"label": "bill\ufffd"}
    tool = next(span for span in run.trace if span["kind"] == "tool")
    assert tool["name"] == "execute_tool crm\ufffdlookup"
    assert tool["attributes"]["gen_ai.tool.call.result"] == "found\ufffdit"
    assert tool["attributes"]["odd\ufffdkey"] == "x"
    stored = Execution.objects.values_list("input", "output", "error", "trace").get(pk=run.pk)
    assert "\x00" not in json.dumps(stored, ensure_ascii=False)


def test_a_protobuf_trace_with_nuls_becomes_its_run_with_replacement_characters(key, triage):
    export_in_process(key, with_nuls().SerializeToString())
    assert assemble() == 1
    (run,) = Execution.objects.all()
    assert_kept_with_replacement_characters(run)
    assert OtlpTrace.objects.get().assembly_error == ""


def test_an_otlp_json_trace_with_nuls_becomes_its_run_with_replacement_characters(key, triage):
    body = otlp_json(with_nuls())
    text = json.dumps(body)
    assert "\\u0000" in text
    export_in_process(key, text.encode(), "application/json")
    assert assemble() == 1
    (run,) = Execution.objects.all()
    assert_kept_with_replacement_characters(run)


def test_a_late_span_with_a_nul_attaches_to_its_run_with_a_replacement_character(key, triage):
    request = with_nuls()
    spans = request.resource_spans[0].scope_spans[0].spans
    late = ExportTraceServiceRequest()
    late.CopyFrom(request)
    del spans[1]  # the tool span comes after its trace became a run
    late_spans = late.resource_spans[0].scope_spans[0].spans
    for index in (3, 2, 0):
        del late_spans[index]
    export_in_process(key, request.SerializeToString())
    assert assemble() == 1
    export_in_process(key, late.SerializeToString())
    (run,) = Execution.objects.all()
    assert_kept_with_replacement_characters(run)


def test_a_service_name_with_a_nul_names_no_entity_and_is_listed_with_a_replacement_character(key, triage):
    answer = export_in_process(key, encoded(agent_spans(service="bill\x00ing")))
    assert answer.partial_success.rejected_spans == 4
    assert "names no entity" in answer.partial_success.error_message
    assert list(UnknownAgent.objects.values_list("name", flat=True)) == ["bill\ufffding"]
    assert not OtlpTrace.objects.exists()
