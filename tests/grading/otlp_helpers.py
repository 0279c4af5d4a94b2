"""An agent instrumented with the real OpenTelemetry SDK, for the tests of POST /v1/traces.

``agent_spans`` runs a small triage agent under a tracer and returns the
finished SDK spans (a root, two model calls, a tool call); ``export`` sends
spans with the SDK's own OTLP/HTTP exporter; ``encoded`` gives the exporter's
protobuf request for spans, to send by hand when a test needs the answer.
"""

from __future__ import annotations

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
