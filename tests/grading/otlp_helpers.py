"""An agent instrumented with the real OpenTelemetry SDK, for the tests of POST /v1/traces.

``agent_spans`` runs a small triage agent under a tracer and returns the
finished SDK spans (a root, two model calls, a tool call); ``export`` sends
spans with the SDK's own OTLP/HTTP exporter; ``encoded`` gives the exporter's
protobuf request for spans, to send by hand when a test needs the answer.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode


def agent_spans(
    *, service: str = "triage", entity: str | None = None, fail: bool = False, accuracy: float = 0.9
) -> list[ReadableSpan]:
    """Run a triage agent under the SDK; return its finished spans, the root last (as an exporter sends them)."""
    memory = InMemorySpanExporter()
    attributes: dict[str, Any] = {"service.name": service}
    if entity is not None:
        attributes["singularity.entity"] = entity
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("triage-agent")
    with tracer.start_as_current_span("invoke_agent triage") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("input.value", json.dumps({"ticket": "my card was charged twice", "_label": "billing"}))
        with tracer.start_as_current_span("chat gpt-4o") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.request.model", "gpt-4o")
            llm.set_attribute("gen_ai.usage.input_tokens", 120)
            llm.set_attribute("gen_ai.usage.output_tokens", 30)
            llm.set_attribute("singularity.cost_usd", "0.0015")
            llm.set_attribute(
                "gen_ai.input.messages",
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": "my card was charged twice"}]}]),
            )
        with tracer.start_as_current_span("execute_tool crm_lookup") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "crm_lookup")
            tool.set_attribute("gen_ai.tool.call.arguments", json.dumps({"customer": 42}))
        with tracer.start_as_current_span("chat gpt-4o") as llm:
            llm.set_attribute("gen_ai.request.model", "gpt-4o")
            llm.set_attribute("gen_ai.usage.input_tokens", 200)
            llm.set_attribute("gen_ai.usage.output_tokens", 10)
            llm.set_attribute("singularity.cost_usd", "0.0025")
        root.set_attribute("output.value", json.dumps({"label": "billing", "accuracy": accuracy}))
        if fail:
            root.set_status(Status(StatusCode.ERROR, "the CRM was down"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def exporter(url: str, key: str, *, gzip: bool = False) -> OTLPSpanExporter:
    """The SDK's OTLP/HTTP exporter pointed at a server's /v1/traces with a bearer token."""
    return OTLPSpanExporter(
        endpoint=f"{url}/v1/traces",
        headers={"Authorization": f"Bearer {key}"},
        compression=Compression.Gzip if gzip else Compression.NoCompression,
        timeout=10,
    )


def export(url: str, key: str, spans: Sequence[ReadableSpan], *, gzip: bool = False) -> SpanExportResult:
    """Send spans with the SDK's exporter; return its result."""
    sender = exporter(url, key, gzip=gzip)
    try:
        return sender.export(list(spans))
    finally:
        sender.shutdown()


def encoded(spans: Sequence[ReadableSpan]) -> bytes:
    """The exporter's protobuf body for spans."""
    return encode_spans(list(spans)).SerializeToString()


def otlp_json(request: Any) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` as OTLP/JSON writes it: protobuf's JSON mapping, with the ids in hex (the
    mapping writes bytes in base64; OTLP/JSON says hex)."""
    from google.protobuf import json_format

    body = json_format.MessageToDict(request)
    for resource in body["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if field in span:
                        span[field] = base64.b64decode(span[field]).hex()
    return body


def export_in_process(key: str, body: bytes, content_type: str = "application/x-protobuf") -> Any:
    """One export request of ``body`` to the view in this process, answered 200; the answer read (protobuf or
    OTLP/JSON, as sent)."""
    from django.test import RequestFactory
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from grading.api_otlp import export_traces

    request = RequestFactory().post(
        "/v1/traces", data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}"
    )
    response = export_traces(request)
    assert response.status_code == 200, response.content
    answer = ExportTraceServiceResponse()
    if content_type == "application/json":
        json_format.Parse(response.content.decode(), answer)
    else:
        answer.ParseFromString(response.content)
    return answer
