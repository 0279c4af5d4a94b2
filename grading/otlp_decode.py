"""Reading an OTLP/HTTP traces body: gunzip within a bound, parse protobuf or OTLP/JSON, map each span onto ours.

``decode(body, content_type, content_encoding)`` returns the request as an
``ExportTraceServiceRequest`` or raises ``BodyRefused`` (400, or 413 for a
size past its limit) naming what was wrong. Protobuf is parsed by
opentelemetry-proto; JSON by protobuf's ``json_format`` after OTLP/JSON's
one departure from the standard mapping is undone (trace and span ids are hex,
not base64). ``received_spans`` then checks every span (``check``: what ``convert`` would
refuse, at a fraction of its cost) and keeps it as its protobuf bytes
(``Received``), or says why that one span is refused (``Rejected``).
``convert`` maps a span onto ``grading.spans``' stored form when its trace
is assembled; the kind comes from the GenAI attributes (``kind_of``).
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from grading import spans
from grading.spans import TraceRefused
from singularity.nul import NUL, REPLACEMENT

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: Where a trace names its entity (a span's attribute, else its resource's), and the fallback.
ENTITY_ATTRIBUTE = "singularity.entity"
SERVICE_NAME = "service.name"
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
#: OpenInference's names for what the GenAI conventions name otherwise.
OPENINFERENCE_KIND = "openinference.span.kind"
OPENINFERENCE_TOKENS = {"llm.token_count.prompt": spans.INPUT_TOKENS, "llm.token_count.completion": spans.OUTPUT_TOKENS}
INPUT_VALUE, OUTPUT_VALUE = "input.value", "output.value"
#: Attributes whose text is JSON in OTLP (an attribute value cannot be an object) and is stored parsed.
_JSON_ATTRIBUTES = (spans.INPUT_MESSAGES, spans.OUTPUT_MESSAGES, spans.TOOL_ARGUMENTS, spans.TOOL_RESULT)


class BodyRefused(Exception):
    """The whole request is refused: ``status`` is 400 or 413, the message names what was wrong."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Received:
    """One span checked (``check``), kept as its protobuf bytes: its ids in hex, and what it says its entity is.

    ``stored()`` is the span in our stored form (``convert``): made when its
    trace is assembled, not while the exporter waits for its answer.
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    raw: bytes
    entity: str
    service: str

    def stored(self) -> dict[str, Any]:
        return stored_span(self.raw, self.trace_id)


@dataclass
class Rejected:
    """One span refused, and why (``<where>: <reason>``)."""

    trace_id: str
    reason: str


def media_type(content_type: str) -> str:
    """Return the media type of a Content-Type header, lower-cased, without its parameters."""
    return content_type.split(";")[0].strip().lower()


def gunzip(body: bytes, limit: int) -> bytes:
    """Return a gzip body inflated, or raise ``BodyRefused`` (413 past ``limit`` bytes, 400 when it is no gzip)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BodyRefused(f"body: Content-Encoding is gzip but the body is not gzip ({exc})") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise BodyRefused(
            f"body: over the limit of {limit:,} bytes once decompressed (OTLP_MAX_DECOMPRESSED_BYTES)", 413
        )
    if not inflater.eof:
        raise BodyRefused("body: the gzip stream ends early")
    return data


def decode(body: bytes, content_type: str, content_encoding: str = "") -> ExportTraceServiceRequest:
    """Return the export request a body carries, or raise ``BodyRefused`` naming what was wrong."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        body = gunzip(body, int(settings.OTLP_MAX_DECOMPRESSED_BYTES))
    elif encoding not in ("", "identity"):
        raise BodyRefused(f"Content-Encoding: {content_encoding!r} is not supported; send gzip or none", 415)
    elif len(body) > int(settings.OTLP_MAX_DECOMPRESSED_BYTES):
        raise BodyRefused(
            f"body: over the limit of {settings.OTLP_MAX_DECOMPRESSED_BYTES:,} bytes (OTLP_MAX_DECOMPRESSED_BYTES)",
            413,
        )
    kind = media_type(content_type)
    if kind == PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BodyRefused(f"body: not an ExportTraceServiceRequest in protobuf ({exc})") from None
        return request
    if kind == JSON:
        return _decode_json(body)
    raise BodyRefused(f"Content-Type: {content_type!r}; send {PROTOBUF} or {JSON}", 415)


# --- OTLP/JSON -----------------------------------------------------------------------------------

_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _hex_to_base64(value: Any, field: str, where: str) -> str:
    """Return an OTLP/JSON hex id as the base64 ``json_format`` reads, or raise ``BodyRefused`` naming it."""
    if not isinstance(value, str):
        raise BodyRefused(f"{where}.{field}: expected hex text, got {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise BodyRefused(f"{where}.{field}: {value[:80]!r} is not hex") from None
    return base64.b64encode(raw).decode()


def _decode_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyRefused(f"body: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BodyRefused(f"body: expected an ExportTraceServiceRequest object, got {type(data).__name__}")
    for r, resource in enumerate(_list(data, "resourceSpans", "body")):
        for s, scope in enumerate(_list(resource, "scopeSpans", f"resourceSpans[{r}]")):
            for n, span in enumerate(_list(scope, "spans", f"resourceSpans[{r}].scopeSpans[{s}]")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                if not isinstance(span, dict):
                    raise BodyRefused(f"{where}: expected a span object")
                for field in _ID_BYTES:
                    if field in span:
                        span[field] = _hex_to_base64(span[field], field, where)
                for index, link in enumerate(span.get("links") or []):
                    if isinstance(link, dict):
                        for field in ("traceId", "spanId"):
                            if field in link:
                                link[field] = _hex_to_base64(link[field], field, f"{where}.links[{index}]")
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BodyRefused(f"body: not an ExportTraceServiceRequest in OTLP/JSON ({exc})") from None
    return request


def _list(data: Any, key: str, where: str) -> list[Any]:
    if not isinstance(data, dict):
        raise BodyRefused(f"{where}: expected an object")
    value = data.get(key) or []
    if not isinstance(value, list):
        raise BodyRefused(f"{where}.{key}: expected a list")
    return value


# --- one span onto ours -------------------------------------------------------------------------


#: A double JSON cannot hold, as the protobuf JSON mapping (and so OTLP/JSON) writes it.
_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def value_of(value: AnyValue) -> Any:
    """Return an OTLP attribute value as plain data (bytes as hex, a double JSON cannot hold as OTLP/JSON's text)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {item.key: value_of(item.value) for item in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    if which == "double_value" and not math.isfinite(value.double_value):
        return _NOT_FINITE[str(value.double_value)]  # JSON has no such number: as OTLP/JSON writes it
    return getattr(value, which)


def attributes_of(items: Any) -> dict[str, Any]:
    """Return OTLP key-values as a dict (a repeated key keeps its last value)."""
    return {item.key: value_of(item.value) for item in items}


def kind_of(attributes: dict[str, Any]) -> str:
    """Our kind of a span: ``llm`` for a model call, ``tool`` for a tool call (GenAI or OpenInference), else other."""
    operation = attributes.get(spans.OPERATION)
    openinference = str(attributes.get(OPENINFERENCE_KIND) or "").upper()
    if operation in LLM_OPERATIONS or spans.REQUEST_MODEL in attributes or openinference == "LLM":
        return spans.LLM
    if operation == "execute_tool" or spans.TOOL_NAME in attributes or openinference == "TOOL":
        return spans.TOOL
    return spans.OTHER


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


#: One decoder for every text (``json.loads`` with an option builds one a call, most of its cost on a short text).
_STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant)


def json_or_text(text: Any) -> Any:
    """Return the value a text attribute holds as JSON, else the text itself (NaN and Infinity are no JSON: text)."""
    if isinstance(text, str):
        try:
            return _STRICT_JSON.decode(text)
        except ValueError:  # JSONDecodeError too
            return text
    return text


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    """Return messages as the schema holds them: a list of ``{role, parts}``; anything else as one text message."""
    parsed = json_or_text(value)
    if isinstance(parsed, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("parts", []), list) for m in parsed
    ):
        return parsed
    text = parsed if isinstance(parsed, str) else json.dumps(parsed, ensure_ascii=False, default=str)
    return [{"role": role, "parts": [{"type": "text", "content": text}]}]


def _shaped(attributes: dict[str, Any]) -> dict[str, Any]:
    """Return a span's attributes in the schema's types: JSON text parsed, OpenInference tokens renamed."""
    shaped = dict(attributes)
    for name, ours in OPENINFERENCE_TOKENS.items():
        if name in shaped and ours not in shaped:
            shaped[ours] = shaped[name]
    for name in _JSON_ATTRIBUTES:
        if name in shaped:
            shaped[name] = json_or_text(shaped[name])
    if spans.INPUT_MESSAGES in shaped:
        shaped[spans.INPUT_MESSAGES] = _messages(shaped[spans.INPUT_MESSAGES], "user")
    if spans.OUTPUT_MESSAGES in shaped:
        shaped[spans.OUTPUT_MESSAGES] = _messages(shaped[spans.OUTPUT_MESSAGES], "assistant")
    if spans.FINISH_REASONS in shaped and isinstance(shaped[spans.FINISH_REASONS], str):
        shaped[spans.FINISH_REASONS] = [shaped[spans.FINISH_REASONS]]
    if isinstance(shaped.get(spans.COST), int | float) and not isinstance(shaped.get(spans.COST), bool):
        shaped[spans.COST] = repr(shaped[spans.COST])  # an exporter can only send a number; read its text
    return shaped


#: The first nanosecond ``_instant`` cannot hold (the year 10000), and the protobuf fields of the JSON names.
_LAST_NANOS = (
    int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() + 1) * 10**9
)
_FIELD_OF = {"startTimeUnixNano": "start_time_unix_nano", "endTimeUnixNano": "end_time_unix_nano"}


#: 1970 in UTC, naive: an OTLP time (unsigned nanoseconds) is never before it, so its ISO text has four-digit years.
_EPOCH = datetime(1970, 1, 1)


def _instant(nanos: int, where: str) -> str:
    """``grading.spans.instant_text`` of an OTLP time, for a third of its cost (no time zone, no ``strftime``)."""
    try:
        moment = _EPOCH + timedelta(microseconds=nanos // 1000)
    except (OverflowError, ValueError, OSError):
        raise TraceRefused(f"{where}: {nanos} nanoseconds since 1970 is no time this server can hold") from None
    return moment.isoformat(timespec="microseconds") + "Z"


def _check_ids_and_times(span: Any, where: str) -> None:
    if len(span.trace_id) != 16:
        raise TraceRefused(f"{where}.traceId: {len(span.trace_id)} bytes, expected 16 (32 hex digits)")
    if len(span.span_id) != 8:
        raise TraceRefused(f"{where}.spanId: {len(span.span_id)} bytes, expected 8 (16 hex digits)")
    if len(span.parent_span_id) not in (0, 8):
        raise TraceRefused(f"{where}.parentSpanId: {len(span.parent_span_id)} bytes, expected 8 or none")
    if not span.start_time_unix_nano:
        raise TraceRefused(f"{where}.startTimeUnixNano: missing")
    if not span.end_time_unix_nano:
        raise TraceRefused(f"{where}.endTimeUnixNano: missing (a span is exported once it has ended)")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise TraceRefused(f"{where}.endTimeUnixNano: before startTimeUnixNano")


#: The attributes ``grading.spans`` checks the value of; messages are always read into messages, never refused.
_CHECKED = frozenset(
    {*spans.INT_ATTRIBUTES, *spans.TEXT_ATTRIBUTES, spans.FINISH_REASONS, spans.COST, *OPENINFERENCE_TOKENS}
)


def check(span: Any, where: str) -> None:
    """Raise ``TraceRefused`` for exactly the spans ``convert`` refuses, with its message, at a fraction of its cost.

    What the export request does for each span: ids, times and the values
    ``grading.spans`` checks (tokens, text, finish reasons, cost), read from
    the protobuf without building the span (no JSON parsed or written).
    """
    _check(span, {item.key: item.value for item in span.attributes}, where)


def _check(span: Any, values: dict[str, AnyValue], where: str) -> None:
    """``check`` with the span's attribute values by key (a repeated key: its last) read already."""
    _check_ids_and_times(span, where)
    if span.end_time_unix_nano >= _LAST_NANOS:  # end ≥ start: a start past it is refused here too, as _instant would
        late = "startTimeUnixNano" if span.start_time_unix_nano >= _LAST_NANOS else "endTimeUnixNano"
        _instant(getattr(span, _FIELD_OF[late]), f"{where}.{late}")
    # In their order, the values checked and the keys out of range: any other is refused for nothing.
    checked = {
        key: value_of(value) if key in _CHECKED else None
        for key, value in values.items()
        if key in _CHECKED or not 0 < len(key) <= spans.MAX_KEY_CHARS
    }
    if checked:
        spans.check_attributes(_shaped(checked), where)


#: A span's stored JSON is at most this many times its protobuf bytes, plus ``_JSON_ROOM`` (a control character, one
#: byte, is written as six; the rest less): a span this small is within ``TRACE_MAX_SPAN_BYTES`` without measuring.
_JSON_PER_BYTE, _JSON_ROOM = 6, 4096


def stored_span(raw: bytes, trace_id: str) -> dict[str, Any]:
    """Return a span kept as protobuf bytes (``Received.raw``) in our stored form: ``convert``'s, made for less.

    The span passed ``check`` when it was received, so it is not read back
    (``grading.spans.validate_span``) and, when its bytes say it cannot be
    over ``TRACE_MAX_SPAN_BYTES``, not measured for ``fit`` either.
    """
    span = Span.FromString(raw)
    stored = _stored(span, f"trace {trace_id} (span {span.span_id.hex()})")
    if most_stored_bytes(raw) <= spans.max_span_bytes():
        return stored
    return spans.fit(stored)


def most_stored_bytes(raw: bytes) -> int:
    """The most bytes the stored form of a span kept as ``raw`` can take (``grading.spans.span_bytes``)."""
    return len(raw) * _JSON_PER_BYTE + _JSON_ROOM


def _stored(span: Any, where: str) -> dict[str, Any]:
    attributes = _shaped(attributes_of(span.attributes))
    attributes.pop(ENTITY_ATTRIBUTE, None)
    return {
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex() or None,
        "name": (span.name or "span")[: spans.MAX_NAME_CHARS],
        "kind": kind_of(attributes),
        "startTime": _instant(span.start_time_unix_nano, f"{where}.startTimeUnixNano"),
        "endTime": _instant(span.end_time_unix_nano, f"{where}.endTimeUnixNano"),
        "status": spans.ERROR if span.status.code == Status.STATUS_CODE_ERROR else spans.OK,
        "statusMessage": span.status.message,
        "attributes": attributes,
    }


def convert(span: Any, where: str) -> dict[str, Any]:
    """Return one OTLP span in our stored form, or raise ``TraceRefused`` naming the field at fault."""
    _check_ids_and_times(span, where)
    return spans.fit(spans.validate_span(_stored(span, where), where))


def _refusal(span: Any, values: dict[str, AnyValue], where: str) -> str:
    """Why ``_check`` refuses a span it has refused, in words that say where the span is."""
    try:
        _check(span, values, where)
    except TraceRefused as exc:
        return str(exc)
    raise AssertionError(f"{where}: refused once, then not")


def _name(value: Any) -> str:
    """An entity or service name as sent, a NUL as U+FFFD: it names no entity, and is listed as sent (no database
    holds a NUL in every text)."""
    return str(value or "").replace(NUL, REPLACEMENT)


def received_spans(request: ExportTraceServiceRequest) -> tuple[list[Received], list[Rejected]]:
    """Return every span of a request read onto our schema, and those refused with the reason."""
    received: list[Received] = []
    rejected: list[Rejected] = []
    for r, resource_spans in enumerate(request.resource_spans):
        resource = attributes_of(resource_spans.resource.attributes)
        resource_entity = _name(resource.get(ENTITY_ATTRIBUTE))
        service = _name(resource.get(SERVICE_NAME))
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for n, span in enumerate(scope_spans.spans):
                trace_id = span.trace_id.hex()
                values = {item.key: item.value for item in span.attributes}
                try:
                    _check(span, values, "")  # where it is only matters to a refusal: said then
                except TraceRefused:
                    where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                    if span.span_id:
                        where += f" (span {span.span_id.hex()})"
                    rejected.append(Rejected(trace_id, _refusal(span, values, where)))
                    continue
                entity = resource_entity
                if ENTITY_ATTRIBUTE in values:  # a repeated key: its first
                    named = next(kv.value for kv in span.attributes if kv.key == ENTITY_ATTRIBUTE)
                    entity = _name(value_of(named))
                parent = span.parent_span_id.hex() or None
                raw = span.SerializeToString()
                received.append(Received(trace_id, span.span_id.hex(), parent, raw, entity, service))
    return received, rejected
