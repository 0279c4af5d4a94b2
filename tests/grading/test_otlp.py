"""POST /v1/traces: an agent instrumented with the real OpenTelemetry SDK sends traces; each becomes a graded run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import requests
from django.test import override_settings
from django.utils import timezone
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from grading import otlp_assemble, spans
from grading.models import Entity, Execution, Grade, OtlpSpan, OtlpTrace, UnknownAgent
from grading.tasks.grading import assemble_traces
from singularity.models import ApiToken
from singularity.schedule import BEAT_SCHEDULE
from tests.concurrency import at_once
from tests.grading.grading_helpers import brain_repo, make_entity
from tests.grading.otlp_helpers import agent_spans, encoded, export, export_in_process, otlp_json

PROTOBUF = {"Content-Type": "application/x-protobuf"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LOOP_PATH = "features/triage/triage.loop.py"
MEASURE = """
def measure(run):
    return [{"id": "accuracy", "value": (run.output or {}).get("accuracy")}]
"""
ACCURACY = {"kind": "computed", "direction": "max", "unit": "share", "role": "objective", "floor": 0.5}


@pytest.fixture
def key(django_user_model) -> str:
    user = django_user_model.objects.create_user("agent-owner")
    _, key = ApiToken.issue(user, "otlp", is_agent=True)
    return key


@pytest.fixture
def triage(tmp_path) -> Entity:
    """A method-none workflow graded on every run by its loop module's accuracy."""
    checkout, commit = brain_repo(
        tmp_path / "brain", {LOOP_PATH: MEASURE, "features/triage/triage.scenario.md": "---\n---\n"}
    )
    evaluation = {"method": "none", "sample": {"rate": 1.0, "maxPerDay": 1000}, "metrics": {"accuracy": ACCURACY}}
    with override_settings(BRAIN_CHECKOUT=checkout.path):
        yield make_entity("triage", evaluation=evaluation, commit=commit, loop_module_path=LOOP_PATH)


def post(url: str, key: str, body: bytes, headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(
        f"{url}/v1/traces",
        data=body,
        headers={**PROTOBUF, "Authorization": f"Bearer {key}", **(headers or {})},
        timeout=10,
    )


def answer(response: requests.Response) -> ExportTraceServiceResponse:
    message = ExportTraceServiceResponse()
    if response.headers["Content-Type"].startswith("application/json"):
        json_format.Parse(response.text, message)
    else:
        message.ParseFromString(response.content)
    return message


def status_message(response: requests.Response) -> str:
    status = status_pb2.Status()
    if response.headers["Content-Type"].startswith("application/json"):
        json_format.Parse(response.text, status)
    else:
        status.ParseFromString(response.content)
    return status.message


def assemble() -> int:
    """The beat's sweep, once every grace and deadline has passed."""
    return otlp_assemble.sweep(now=timezone.now() + timedelta(hours=1))


def send_in_process(key: str, body: bytes) -> None:
    """One export request of ``body`` (protobuf) to the view in this process, every span accepted."""
    assert not export_in_process(key, body).partial_success.rejected_spans


def answer_of(response: object) -> ExportTraceServiceResponse:
    message = ExportTraceServiceResponse()
    message.ParseFromString(response.content)  # type: ignore[attr-defined]
    return message


def the_run() -> Execution:
    (execution,) = Execution.objects.all()
    return execution


def test_an_sdk_agents_trace_becomes_a_run_with_its_span_tree_and_is_graded(live_server, key, triage):
    spans = agent_spans(service="triage")
    assert export(live_server.url, key, spans) == SpanExportResult.SUCCESS
    assert Execution.objects.count() == 0  # pending until the root's grace has passed
    assert otlp_assemble.sweep() == 0
    assert assemble() == 1

    run = the_run()
    root = next(span for span in spans if span.parent is None)
    assert (run.entity, run.source, run.status) == (triage, "api", "succeeded")
    assert run.input == {"ticket": "my card was charged twice", "_label": "billing"}
    assert run.output == {"label": "billing", "accuracy": 0.9}
    assert run.started_at == EPOCH + timedelta(microseconds=root.start_time // 1000)
    assert run.duration_ms == (root.end_time - root.start_time) // 1_000_000
    assert run.cost_usd == Decimal("0.004")
    tree = {span["name"]: span for span in run.trace}
    assert [span["kind"] for span in run.trace] == ["llm", "tool", "llm"]  # the root is the run, not a span
    assert all(span["parentSpanId"] is None for span in run.trace)
    assert tree["execute_tool crm_lookup"]["attributes"]["gen_ai.tool.call.arguments"] == {"customer": 42}
    assert run.trace[0]["attributes"]["gen_ai.input.messages"][0]["role"] == "user"
    assert run.trace[0]["attributes"]["gen_ai.usage.input_tokens"] == 120
    grade = Grade.objects.get(execution=run)
    assert (grade.status, grade.passed, grade.metrics["accuracy"]) == (Grade.Status.GRADED, True, 0.9)
    assert not OtlpSpan.objects.exists()
    assert assemble() == 0  # the sweep is idempotent


def test_a_failed_root_is_a_failed_run_and_a_low_score_fails_its_grade(live_server, key, triage):
    export(live_server.url, key, agent_spans(entity="scenario:triage", fail=True, accuracy=0.1))
    assemble()
    run = the_run()
    assert (run.status, run.error) == ("failed", "the CRM was down")
    assert Grade.objects.get(execution=run).passed is False


def test_a_retried_export_doubles_nothing(live_server, key, triage):
    spans = agent_spans()
    for _ in range(3):
        assert export(live_server.url, key, spans) == SpanExportResult.SUCCESS
    assert OtlpSpan.objects.count() == 4
    assemble()
    assert len(the_run().trace) == 3
    assert export(live_server.url, key, spans) == SpanExportResult.SUCCESS  # after assembly, too
    assemble()
    assert Execution.objects.count() == 1 and len(the_run().trace) == 3


def test_spans_split_across_requests_out_of_order_assemble_and_late_ones_attach(live_server, key, triage):
    first_llm, tool, second_llm, root = agent_spans(entity="triage")
    export(live_server.url, key, [root])
    export(live_server.url, key, [second_llm])
    export(live_server.url, key, [first_llm])
    assemble()
    assert [span["spanId"] for span in the_run().trace] == [format(first_llm.context.span_id, "016x")] + [
        format(second_llm.context.span_id, "016x")
    ]
    export(live_server.url, key, [tool])  # late: attaches to the run's trace
    assert [span["name"] for span in sorted(the_run().trace, key=lambda s: s["startTime"])] == [
        "chat gpt-4o",
        "execute_tool crm_lookup",
        "chat gpt-4o",
    ]
    assert Execution.objects.count() == 1


def test_a_trace_whose_root_never_arrives_is_closed_as_failed_after_the_deadline(live_server, key, triage):
    *children, _root = agent_spans(entity="scenario:triage")
    export(live_server.url, key, children)
    assert otlp_assemble.sweep(now=timezone.now() + timedelta(seconds=60)) == 0  # past the grace, not the deadline
    assemble()
    run = the_run()
    assert run.status == "failed"
    assert "root span never arrived" in run.error and "OTLP_ORPHAN_SECS" in run.error
    assert len(run.trace) == 3


def test_an_unknown_entity_is_refused_by_name_nothing_kept_and_listed_as_seen(
    live_server, key, triage, client, django_user_model
):
    response = post(live_server.url, key, encoded(agent_spans(service="billing-bot")))
    assert response.status_code == 200
    partial = answer(response).partial_success
    assert partial.rejected_spans == 4
    assert "'billing-bot' names no entity in the brain" in partial.error_message
    assert "features/billing-bot/billing-bot.scenario.md" in partial.error_message
    assert not OtlpTrace.objects.exists() and not OtlpSpan.objects.exists()
    post(live_server.url, key, encoded(agent_spans(service="billing-bot")))
    agent = UnknownAgent.objects.get()
    assert (agent.name, agent.span_count) == ("billing-bot", 8)

    client.force_login(django_user_model.objects.create_user("viewer"))
    page = client.get("/evolution/entities/").content.decode()
    assert "billing-bot" in page and "features/billing-bot/billing-bot.scenario.md" in page
    make_entity("billing-bot")  # its file added to the brain: no longer listed as unknown
    assert "Agents seen, not in the brain" not in client.get("/evolution/entities/").content.decode()


def test_gzip_and_json_bodies_are_read(live_server, key, triage):
    assert export(live_server.url, key, agent_spans(), gzip=True) == SpanExportResult.SUCCESS
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    body = otlp_json(request)
    response = post(
        live_server.url,
        key,
        gzip.compress(json.dumps(body).encode()),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert not answer(response).HasField("partial_success")
    assert assemble() == 2


@pytest.mark.parametrize(
    ("body", "headers", "status", "said"),
    [
        (b"\x0a\xff\xff", {}, 400, "not an ExportTraceServiceRequest in protobuf"),
        (b"{not json", {"Content-Type": "application/json"}, 400, "body: not JSON"),
        (b'{"resourceSpans": 3}', {"Content-Type": "application/json"}, 400, "resourceSpans: expected a list"),
        (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}',
            {"Content-Type": "application/json"},
            400,
            "traceId: 'zz' is not hex",
        ),
        (b"not gzip", {"Content-Encoding": "gzip"}, 400, "the body is not gzip"),
        (b"", {"Content-Type": "text/plain"}, 415, "send application/x-protobuf or application/json"),
    ],
)
def test_a_body_that_cannot_be_read_is_a_400_naming_what_was_wrong(
    live_server, key, triage, body, headers, status, said
):
    response = post(live_server.url, key, body, headers)
    assert response.status_code == status, response.text
    assert said in status_message(response)
    assert not OtlpTrace.objects.exists()


def test_a_body_over_its_limit_is_a_413_naming_the_limit(live_server, key, triage):
    with override_settings(OTLP_MAX_BODY_BYTES=1024):
        response = post(live_server.url, key, encoded(agent_spans()) * 2)
    assert response.status_code == 413
    assert "OTLP_MAX_BODY_BYTES" in status_message(response)
    with override_settings(OTLP_MAX_DECOMPRESSED_BYTES=1024):
        response = post(live_server.url, key, gzip.compress(encoded(agent_spans()) * 2), {"Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "OTLP_MAX_DECOMPRESSED_BYTES" in status_message(response)


def test_a_trace_over_the_span_limit_is_a_413_and_nothing_is_kept(live_server, key, triage):
    spans = agent_spans()
    with override_settings(TRACE_MAX_SPANS=3):
        response = post(live_server.url, key, encoded(spans))
        assert response.status_code == 413
        assert "over the limit of 3 spans a run (TRACE_MAX_SPANS)" in status_message(response)
        assert not OtlpSpan.objects.exists()
        assert post(live_server.url, key, encoded(spans[:3])).status_code == 200
        response = post(live_server.url, key, encoded(spans[3:]))  # the fourth, in a later request
        assert response.status_code == 413
    assert OtlpSpan.objects.count() == 3


def test_a_span_with_bad_times_or_ids_is_refused_alone_with_the_reason(live_server, key, triage):
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].end_time_unix_nano = spans[0].start_time_unix_nano - 1
    spans[1].start_time_unix_nano = 0
    spans[2].span_id = b"\x01\x02\x03"
    response = post(live_server.url, key, request.SerializeToString())
    assert response.status_code == 200
    partial = answer(response).partial_success
    assert partial.rejected_spans == 3
    first = spans[0].span_id.hex()
    assert f"resourceSpans[0].scopeSpans[0].spans[0] (span {first}).endTimeUnixNano: before startTimeUnixNano" in (
        partial.error_message
    )
    assert "resourceSpans[0].scopeSpans[0].spans[1] (span " in partial.error_message
    assert "startTimeUnixNano: missing" in partial.error_message
    assert "resourceSpans[0].scopeSpans[0].spans[2] (span 010203).spanId: 3 bytes, expected 8" in partial.error_message
    assemble()
    assert the_run().trace == []  # the root alone was kept: the run, with no children


def test_no_token_or_a_bad_one_is_a_401(live_server, triage):
    response = requests.post(f"{live_server.url}/v1/traces", data=encoded(agent_spans()), headers=PROTOBUF, timeout=10)
    assert response.status_code == 401 and "Bearer" in status_message(response)
    assert post(live_server.url, "wrong", encoded(agent_spans())).status_code == 401
    assert not OtlpTrace.objects.exists()


SDK_ONLY_SCRIPT = """
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()  # the resource from OTEL_RESOURCE_ATTRIBUTES
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # the endpoint and headers from OTEL_EXPORTER_OTLP_*
tracer = provider.get_tracer("agent")
for _ in range(3):
    with tracer.start_as_current_span("invoke_agent triage") as root:
        with tracer.start_as_current_span("chat m") as call:
            call.set_attribute("gen_ai.request.model", "m")
            call.set_attribute("gen_ai.usage.input_tokens", 10)
        root.set_attribute("output.value", '{"accuracy": 0.2}')
provider.shutdown()
"""


def test_a_script_using_only_the_sdk_configured_by_environment_sends_graded_runs(live_server, key, triage):
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": live_server.url,
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{key}",
        "OTEL_RESOURCE_ATTRIBUTES": "singularity.entity=scenario:triage",
    }
    subprocess.run([sys.executable, "-c", SDK_ONLY_SCRIPT], env=env, check=True, timeout=60)
    assert assemble() == 3
    runs = list(Execution.objects.all())
    assert [(run.entity, run.status, len(run.trace)) for run in runs] == [(triage, "succeeded", 1)] * 3
    assert {grade.passed for grade in Grade.objects.filter(execution__in=runs)} == {False}  # below the floor


def test_a_run_the_report_would_refuse_is_kept_saying_what_was_dropped_and_the_sweep_goes_on(live_server, key, triage):
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    root = next(span for span in request.resource_spans[0].scope_spans[0].spans if not span.parent_span_id)
    root.end_time_unix_nano += 3600 * 10**9  # an agent whose clock is an hour ahead
    assert post(live_server.url, key, request.SerializeToString()).status_code == 200
    assert assemble() == 1
    with override_settings(TRACE_MAX_BYTES=1024):
        export(live_server.url, key, agent_spans())  # its spans together over the trace's byte limit
        assert assemble() == 1
    ahead, large = sorted(Execution.objects.all(), key=lambda run: "TRACE_MAX_BYTES" in run.error)
    assert "its spans were not kept" in large.error and "TRACE_MAX_BYTES" in large.error and large.trace == []
    assert large.cost_usd == Decimal("0.004")
    assert "is in the future" in ahead.error and "its times were not kept" in ahead.error
    assert len(ahead.trace) == 3 and ahead.completed_at <= timezone.now()


def test_the_sweep_keeps_a_trace_as_the_report_path_would_store_it_and_refuses_a_loop_of_parents(key, triage):
    # Issue 30: the sweep checks only what the whole trace can break (each span was checked at its export); the run
    # it stores is what the report path's full check makes of it, and a loop of parents still costs the run its spans.
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    first, tool, second, _root = request.resource_spans[0].scope_spans[0].spans
    first.parent_span_id, tool.parent_span_id = tool.span_id, first.span_id  # each the other's parent
    send_in_process(key, encoded(agent_spans()) + request.SerializeToString())  # two requests' bodies: two traces
    assert assemble() == 2
    kept, looped = sorted(Execution.objects.all(), key=lambda run: bool(run.error))
    assert len(kept.trace) == 3 and spans.validate_trace(kept.trace) == kept.trace
    assert looped.trace == [] and "the parents loop back" in looped.error and "its spans were not kept" in looped.error
    assert looped.cost_usd == Decimal("0.004")


def test_a_number_json_cannot_hold_is_kept_as_otlp_json_writes_it_and_stops_no_sweep(key, triage):
    # Issue 30: a double attribute NaN or ±Infinity was written as JSON's non-standard NaN, which PostgreSQL's jsonb
    # refuses: the sweep's batch failed on every pass, and every trace behind it waited. Kept as the protobuf JSON
    # mapping writes it (OTLP/JSON's own form): "NaN", "Infinity", "-Infinity".
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for name, value in (("score", float("nan")), ("upper", float("inf")), ("lower", float("-inf"))):
        span.attributes.add(key=name).value.double_value = value
    # Python's JSON reads NaN and Infinity in a text too: such a text is kept as the text it is.
    span.attributes.add(key="gen_ai.tool.call.result").value.string_value = "[1, NaN]"
    root = request.resource_spans[0].scope_spans[0].spans[3]
    next(item for item in root.attributes if item.key == "output.value").value.string_value = '{"accuracy": Infinity}'
    send_in_process(key, request.SerializeToString())
    assert assemble() == 1
    run = the_run()
    attributes = run.trace[0]["attributes"]
    assert (attributes["score"], attributes["upper"], attributes["lower"]) == ("NaN", "Infinity", "-Infinity")
    assert attributes["gen_ai.tool.call.result"] == "[1, NaN]" and run.output == '{"accuracy": Infinity}'


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_make_each_trace_one_run(key, triage):
    # Issue 30: the beat's sweeps may overlap (a batch past the 5 s beat, two workers): each takes its batch under a
    # row lock the other skips, so every trace becomes exactly one run, whoever took it.
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("two sweeps at once need Postgres's SKIP LOCKED")
    body = encoded([span for _ in range(60) for span in agent_spans()])
    send_in_process(key, body)
    later = timezone.now() + timedelta(hours=1)
    taken = at_once(lambda: otlp_assemble.sweep(now=later, limit=7))
    assert sum(taken) == 60 and Execution.objects.count() == 60
    runs = list(OtlpTrace.objects.values_list("execution_id", flat=True))
    assert len(runs) == 60 and None not in runs and len(set(runs)) == 60
    assert Grade.objects.filter(status=Grade.Status.GRADED).count() == 60 and not OtlpSpan.objects.exists()


def test_the_beat_sweeps_every_grace_and_its_task_makes_the_runs(live_server, key, triage):
    entry = BEAT_SCHEDULE["grading-assemble-traces"]
    assert entry["task"] == "grading.tasks.grading.assemble_traces" and entry["schedule"] == 5.0
    export(live_server.url, key, agent_spans())
    assert assemble_traces() == 0  # inside the grace
    with override_settings(OTLP_GRACE_SECS=0):
        assert assemble_traces() == 1
    assert the_run().status == "succeeded"


def test_an_assembled_traces_row_is_kept_for_late_spans_then_pruned_by_the_sweep(live_server, key, triage):
    spans = agent_spans()
    export(live_server.url, key, spans)
    assembled_at = timezone.now() + timedelta(hours=1)
    assert otlp_assemble.sweep(now=assembled_at) == 1
    kept = otlp_assemble.keep()
    assert kept == timedelta(hours=1)  # OTLP_KEEP_SECS
    otlp_assemble.sweep(now=assembled_at + kept - timedelta(seconds=1))
    assert OtlpTrace.objects.count() == 1  # inside the keep: a retry still finds its run
    assert export(live_server.url, key, spans) == SpanExportResult.SUCCESS
    export(live_server.url, key, agent_spans())  # another trace: assembled by the next sweep, kept from then
    otlp_assemble.sweep(now=assembled_at + kept + timedelta(seconds=1))
    assert list(OtlpTrace.objects.values_list("assembled_at", flat=True)) == [
        assembled_at + kept + timedelta(seconds=1)
    ]
    assert Execution.objects.count() == 2
    with override_settings(OTLP_KEEP_SECS=0):
        assert otlp_assemble.sweep(now=assembled_at + 2 * kept) == 0
    assert not OtlpTrace.objects.exists() and not OtlpSpan.objects.exists()
    assert [len(run.trace) for run in Execution.objects.all()] == [3, 3]  # the runs stay


def test_the_api_schema_documents_the_receiver_with_both_encodings_and_its_refusals(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("reader"))
    schema = client.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/v1/traces"]["post"]
    assert set(operation["requestBody"]["content"]) == {"application/x-protobuf", "application/json"}
    assert set(operation["responses"]) == {"200", "400", "401", "413", "415"}
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rpartition("/")[2]
    assert "partialSuccess" in schema["components"]["schemas"][answer]["properties"]


def _span_with(**attributes: object) -> object:
    """The first model-call span of the test agent, with ``attributes`` set (a list value: repeated keys)."""
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for key, values in attributes.items():
        for value in values if isinstance(values, tuple) else (values,):
            item = KeyValue(key=key.replace("__", "."))
            if isinstance(value, bool):
                item.value.bool_value = value
            elif isinstance(value, int):
                item.value.int_value = value
            elif isinstance(value, float):
                item.value.double_value = value
            elif isinstance(value, list):
                for entry in value:
                    item.value.array_value.values.add().int_value = entry
            else:
                item.value.string_value = value
            span.attributes.append(item)
    return span


FAR = 2**64 - 1  # the last nanosecond OTLP can send (the year 2554)


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"gen_ai__usage__input_tokens": "many"},
        {"gen_ai__usage__input_tokens": -1},
        {"gen_ai__usage__output_tokens": 2.5},
        {"gen_ai__usage__output_tokens": True},
        {"gen_ai__request__model": 4},
        {"gen_ai__response__finish_reasons": 3},
        {"gen_ai__response__finish_reasons": [1, 2]},
        {"gen_ai__response__finish_reasons": "stop"},
        {"singularity__cost_usd": "abc"},
        {"singularity__cost_usd": "-1"},
        {"singularity__cost_usd": "0.0000000000001"},
        {"singularity__cost_usd": 2e9},
        {"singularity__cost_usd": 0.5},
        {"singularity__cost_usd": True},
        {"": "empty key"},
        {"k" * 257: "long key"},
        {"llm__token_count__prompt": "many"},
        {"llm__token_count__completion": 7},
        {"singularity__entity": 3},
        {"gen_ai__usage__input_tokens": ("many", 5)},
        {"gen_ai__usage__input_tokens": (5, "many")},
        {"gen_ai__input__messages": "not json ["},
        {"gen_ai__tool__call__arguments": "{"},
        {"end": FAR},
        {"start": FAR, "end": FAR},
        {"start": FAR, "end": 1},
    ],
)
def test_the_exports_check_refuses_exactly_what_assembly_would_with_its_words(attributes):
    from grading.otlp_decode import check, convert, stored_span
    from grading.spans import TraceRefused

    times = {name: attributes.pop(name) for name in ("start", "end") if name in attributes}
    span = _span_with(**attributes)
    if "start" in times:
        span.start_time_unix_nano = times["start"]
    if "end" in times:
        span.end_time_unix_nano = times["end"]
    said = []
    for read in (check, convert):
        try:
            read(span, "spans[0]")
            said.append("")
        except TraceRefused as exc:
            said.append(str(exc))
    assert said[0] == said[1]
    if not said[0]:  # kept: assembly reads its bytes into what convert makes
        assert stored_span(span.SerializeToString(), span.trace_id.hex()) == convert(span, "spans[0]")


@pytest.mark.parametrize("size", [100, 9_000, 20_000, 70_000])
def test_a_kept_span_read_at_assembly_is_cut_to_its_limit_as_convert_cuts_it(size):
    from grading.otlp_decode import convert, stored_span

    span = _span_with(gen_ai__tool__call__result="\x01" * size)
    stored = stored_span(span.SerializeToString(), span.trace_id.hex())
    assert stored == convert(span, "spans[0]")
    assert (spans.span_bytes(stored) <= spans.max_span_bytes()) and (
        ("singularity.cut" in stored["attributes"]) == (size > 9_000)
    )


@pytest.mark.parametrize("nanos", [0, 1, 999, 1_000, 1_765_000_000_123_456_789, FAR, 253_402_300_799_999_999_999])
def test_an_otlp_time_reads_as_the_stored_instant_text(nanos):
    from grading.otlp_decode import _instant

    assert _instant(nanos, "x") == spans.instant_text(EPOCH + timedelta(microseconds=nanos // 1000))


def test_an_export_request_is_a_handful_of_statements_whatever_its_spans(key, triage):
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from grading.api_otlp import export_traces

    def send(traces: int) -> int:
        body = encoded([span for _ in range(traces) for span in agent_spans()])
        request = RequestFactory().post(
            "/v1/traces", data=body, content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {key}"
        )
        with CaptureQueriesContext(connection) as queries:
            assert export_traces(request).status_code == 200
        return len(queries)

    send(1)  # the token's last use noted (once a minute)
    assert send(1) == send(40) <= 10
    assert OtlpSpan.objects.count() == (1 + 1 + 40) * 4
    last_used = ApiToken.objects.get().last_used_at
    send(1)
    assert ApiToken.objects.get().last_used_at == last_used
