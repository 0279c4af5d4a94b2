"""``POST /v1/traces`` in the OpenAPI schema (a drf-spectacular postprocessing hook; the view is no DRF view).

The receiver speaks OTLP/HTTP, not the API's own JSON: its bodies are an
``ExportTraceServiceRequest`` in protobuf or OTLP/JSON, its answer an
``ExportTraceServiceResponse`` (``partial_success`` when spans were
refused), its refusals a ``google.rpc.Status`` — each in the request's
encoding (``grading.api_otlp``). The JSON shapes below are OTLP/JSON's
(lowerCamelCase, ids in hex, 64-bit integers as decimal text).
"""

from __future__ import annotations

from typing import Any

PATH = "/v1/traces"
PROTOBUF, JSON = "application/x-protobuf", "application/json"
BINARY = {"type": "string", "format": "binary"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


UNSIGNED_64 = {
    "oneOf": [{"type": "string", "pattern": "^[0-9]{1,20}$"}, {"type": "integer", "minimum": 0}],
    "description": "Nanoseconds since 1970 (UTC), as decimal text or a number.",
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "OtlpAnyValue": {
        "type": "object",
        "description": "One attribute value: exactly one of its fields.",
        "properties": {
            "stringValue": {"type": "string"},
            "boolValue": {"type": "boolean"},
            "intValue": {"oneOf": [{"type": "string", "pattern": "^-?[0-9]{1,19}$"}, {"type": "integer"}]},
            "doubleValue": {"type": "number"},
            "arrayValue": {
                "type": "object",
                "properties": {"values": {"type": "array", "items": _ref("OtlpAnyValue")}},
            },
            "kvlistValue": {
                "type": "object",
                "properties": {"values": {"type": "array", "items": _ref("OtlpKeyValue")}},
            },
            "bytesValue": {"type": "string", "format": "byte"},
        },
    },
    "OtlpKeyValue": {
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": _ref("OtlpAnyValue")},
        "required": ["key"],
    },
    "OtlpSpan": {
        "type": "object",
        "description": (
            "One span (OpenTelemetry's GenAI conventions name its attributes). A span with an id of the wrong "
            "length, or a missing or inverted time, is refused alone, counted in partialSuccess."
        ),
        "properties": {
            "traceId": {
                "type": "string",
                "description": "32 hex digits.",
                "example": "5b8efff798038103d269b633813fc60c",
            },
            "spanId": {"type": "string", "description": "16 hex digits.", "example": "eee19b7ec3c1b174"},
            "parentSpanId": {"type": "string", "description": "16 hex digits; absent or empty for the root (the run)."},
            "name": {"type": "string"},
            "kind": {"type": "integer"},
            "startTimeUnixNano": UNSIGNED_64,
            "endTimeUnixNano": UNSIGNED_64,
            "attributes": {"type": "array", "items": _ref("OtlpKeyValue")},
            "status": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer", "description": "2 (ERROR) makes the run failed."},
                    "message": {"type": "string"},
                },
            },
        },
    },
    "OtlpExportTraceServiceRequest": {
        "type": "object",
        "description": (
            "OTLP/JSON's ExportTraceServiceRequest. Each trace names its entity: the span or resource attribute "
            "`singularity.entity` (`scenario:triage`, or a plain slug only one entity has), else `service.name`."
        ),
        "properties": {
            "resourceSpans": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "resource": {
                            "type": "object",
                            "properties": {"attributes": {"type": "array", "items": _ref("OtlpKeyValue")}},
                        },
                        "scopeSpans": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"spans": {"type": "array", "items": _ref("OtlpSpan")}},
                            },
                        },
                    },
                },
            }
        },
    },
    "OtlpExportTraceServiceResponse": {
        "type": "object",
        "description": "Empty when every span was kept; else partialSuccess counts the refused and says why.",
        "properties": {
            "partialSuccess": {
                "type": "object",
                "properties": {
                    "rejectedSpans": {
                        "type": "string",
                        "pattern": "^[0-9]+$",
                        "description": "Spans refused (a 64-bit integer, as decimal text).",
                    },
                    "errorMessage": {
                        "type": "string",
                        "description": "The first five reasons, each naming the span or trace and the rule.",
                    },
                },
            }
        },
    },
    "OtlpStatus": {
        "type": "object",
        "description": "A refusal of the whole request (google.rpc.Status); nothing of the request is kept.",
        "properties": {
            "code": {"type": "integer", "description": "google.rpc.Code: 3 invalid, 8 over a limit, 16 no token."},
            "message": {"type": "string", "description": "What was wrong, naming the field or the limit."},
            "details": {"type": "array", "items": {"type": "object"}},
        },
    },
}


def _answer(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {PROTOBUF: {"schema": BINARY}, JSON: {"schema": _ref(schema)}}}


OPERATION: dict[str, Any] = {
    "operationId": "otlp_traces_export",
    "summary": "Receive OpenTelemetry traces (OTLP/HTTP)",
    "description": (
        "The OTLP/HTTP traces endpoint: point any OpenTelemetry exporter at the server's base URL (it appends "
        "`/v1/traces`) with `Authorization: Bearer <API token>`. The body is an ExportTraceServiceRequest in "
        "protobuf or OTLP/JSON, gzip or not (`Content-Encoding: gzip`); the answer is in the request's encoding. "
        "Each trace becomes one run of the entity it names once its root span has ended and a short grace has "
        "passed, and is graded as a reported run. A retried export doubles nothing. Agent tokens may send."
    ),
    "tags": ["otlp"],
    "security": [{"apiToken": []}],
    "requestBody": {
        "required": True,
        "content": {PROTOBUF: {"schema": BINARY}, JSON: {"schema": _ref("OtlpExportTraceServiceRequest")}},
    },
    "responses": {
        "200": _answer(
            "Received: the spans kept; partialSuccess counts those refused (a bad span, a trace naming no "
            "entity of the brain — it is listed on the Entities page with the file to add) and says why.",
            "OtlpExportTraceServiceResponse",
        ),
        "400": _answer(
            "A body the server cannot read: not protobuf, not JSON, an id that is not hex, gzip that is not gzip.",
            "OtlpStatus",
        ),
        "401": _answer("No token, or a bad or revoked one.", "OtlpStatus"),
        "413": _answer(
            "A body over OTLP_MAX_BODY_BYTES (as sent) or OTLP_MAX_DECOMPRESSED_BYTES (inflated), or a trace "
            "that would pass TRACE_MAX_SPANS spans; the message names the limit.",
            "OtlpStatus",
        ),
        "415": _answer(
            "A Content-Type other than application/x-protobuf or application/json, or a Content-Encoding "
            "other than gzip.",
            "OtlpStatus",
        ),
    },
}


def document_otlp(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Add ``POST /v1/traces`` and its OTLP shapes to the schema ``result``; return it."""
    result.setdefault("paths", {})[PATH] = {"post": OPERATION}
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in SCHEMAS.items():
        schemas.setdefault(name, schema)
    return result
