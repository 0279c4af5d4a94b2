"""A run's trace as a tree of spans: the one span schema, its limits, and how a trace is read.

A trace is a list of spans. Each span is a JSON object::

    {"spanId": "a1", "parentSpanId": null, "name": "chat demo-model", "kind": "llm",
     "startTime": "2026-01-01T12:00:00.000000Z", "endTime": "2026-01-01T12:00:00.250000Z",
     "status": "ok", "statusMessage": "", "attributes": {"gen_ai.request.model": "demo-model", ...}}

``kind`` is ``llm`` (a model call), ``tool`` (a tool call) or ``other``;
``status`` is ``ok`` or ``error`` (``statusMessage`` says why). Attributes
are keyed by the OpenTelemetry GenAI semantic-convention names (the
constants below), so an OTLP span maps onto this shape without translation;
``singularity.cost_usd`` is the span's cost, a decimal string in USD.

``validate_trace`` reads a reported trace strictly (a span may give
``durationMs`` instead of ``endTime``; the stored form always has both
times) and refuses it, naming the limit and the span, when it is over
``settings.TRACE_MAX_SPANS`` spans, a span over ``TRACE_MAX_SPAN_BYTES`` or
the whole over ``TRACE_MAX_BYTES``. ``normalise`` reads any stored trace,
including entries written before spans (``{"tool", "status", "arguments",
"error", "duration_ms"}`` become tool spans with no start time, ``{"log",
"at"}`` other spans). ``tree`` orders spans for the page with their depth
and waterfall position; ``totals`` sums tokens, cost and wall time.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from singularity.errors import ConfigError
from singularity.money import DECIMAL_PLACES, MoneyError, parse_money, quantize

LLM, TOOL, OTHER = "llm", "tool", "other"
KINDS = (LLM, TOOL, OTHER)
OK, ERROR = "ok", "error"
STATUSES = (OK, ERROR)

# --- attribute names (OpenTelemetry GenAI semantic conventions) ----------------------------
OPERATION = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"
# --- ours: no convention names them ------------------------------------------------------
COST = "singularity.cost_usd"
TOOL_STATUS = "singularity.tool.status"
DRY_RUN = "singularity.dry_run"
TASK = "singularity.task"
LOG = "singularity.log"
CUT = "singularity.cut"

#: Attributes whose values must be of one type, and the words naming it.
INT_ATTRIBUTES = (INPUT_TOKENS, OUTPUT_TOKENS)
TEXT_ATTRIBUTES = (OPERATION, REQUEST_MODEL, RESPONSE_MODEL, TOOL_NAME, TOOL_CALL_ID, ERROR_TYPE, TOOL_STATUS, TASK)
MESSAGE_ATTRIBUTES = (INPUT_MESSAGES, OUTPUT_MESSAGES)
#: Shown on their own on the page (the rest of a span's attributes are listed under it).
SHOWN = frozenset(
    {
        OPERATION,
        REQUEST_MODEL,
        RESPONSE_MODEL,
        INPUT_MESSAGES,
        OUTPUT_MESSAGES,
        INPUT_TOKENS,
        OUTPUT_TOKENS,
        FINISH_REASONS,
        TOOL_NAME,
        TOOL_ARGUMENTS,
        TOOL_RESULT,
        COST,
        TOOL_STATUS,
        DRY_RUN,
        TASK,
        LOG,
    }
)

SPAN_FIELDS = frozenset(
    {"spanId", "parentSpanId", "name", "kind", "startTime", "endTime", "durationMs", "status", "statusMessage"}
    | {"attributes"}
)
MAX_ID_CHARS = 64
MAX_NAME_CHARS = 256
MAX_KEY_CHARS = 256
#: The most one span may cost (USD): far past any model call, well inside the money column.
MAX_SPAN_COST = Decimal(10**9)
#: The old tool-call statuses that mean the call did not (surely) do its work.
_FAILED_TOOL_STATUSES = frozenset({"failed", "indeterminate", "error"})


class TraceRefused(ConfigError):
    """A reported trace the schema or a limit refuses; the message names the span and the rule."""


def max_spans() -> int:
    return int(settings.TRACE_MAX_SPANS)


def max_span_bytes() -> int:
    return int(settings.TRACE_MAX_SPAN_BYTES)


def max_trace_bytes() -> int:
    return int(settings.TRACE_MAX_BYTES)


def instant_text(moment: datetime) -> str:
    """Return an aware instant as the stored text: UTC, microseconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_instant(value: Any) -> datetime | None:
    """Return the aware instant a stored or reported time names, or None when it names none."""
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if not isinstance(value, str):
        return None
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def span_bytes(span: dict[str, Any]) -> int:
    """Return the size of a span as stored: its compact UTF-8 JSON."""
    return len(json.dumps(span, ensure_ascii=False, separators=(",", ":"), default=str).encode())


# --- reading a reported trace strictly ------------------------------------------------------


def _label(where: str, index: int, span_id: Any = None) -> str:
    named = f" (span {span_id!r})" if isinstance(span_id, str) and span_id else ""
    return f"{where}[{index}]{named}"


def _time(data: dict[str, Any], name: str, label: str) -> datetime:
    value = data.get(name)
    if value is None:
        raise TraceRefused(f"{label}.{name}: required (an ISO-8601 instant with a UTC offset)")
    parsed = parse_instant(value) if isinstance(value, str) else None
    if parsed is None:
        raise TraceRefused(f"{label}.{name}: {value!r} is not an ISO-8601 instant with a UTC offset")
    return parsed


def check_attributes(attributes: Any, label: str) -> dict[str, Any]:
    """Return a span's attributes, or raise ``TraceRefused`` naming the first key or value the schema refuses."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise TraceRefused(f"{label}.attributes: expected a JSON object, got {type(attributes).__name__}")
    for key, value in attributes.items():
        where = f"{label}.attributes.{key}"
        if not key or len(key) > MAX_KEY_CHARS:
            raise TraceRefused(f"{label}.attributes: a key must be 1 to {MAX_KEY_CHARS} characters")
        if key in INT_ATTRIBUTES and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise TraceRefused(f"{where}: expected a whole number of tokens ≥ 0, got {value!r}")
        if key in TEXT_ATTRIBUTES and not isinstance(value, str):
            raise TraceRefused(f"{where}: expected text, got {type(value).__name__}")
        if key == FINISH_REASONS and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise TraceRefused(f'{where}: expected a list of text, e.g. ["stop"]')
        if key in MESSAGE_ATTRIBUTES:
            _check_messages(value, where)
        if key == COST:
            _check_cost(value, where)
    return dict(attributes)


def _check_messages(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise TraceRefused(f"{where}: expected a list of messages ({{role, parts}}), got {type(value).__name__}")
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TraceRefused(f"{where}[{index}]: expected a message object with a text role")
        if "parts" in message and not isinstance(message["parts"], list):
            raise TraceRefused(f"{where}[{index}].parts: expected a list of parts")


def _check_cost(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise TraceRefused(f'{where}: expected a decimal string in USD, e.g. "0.0042", got {type(value).__name__}')
    try:
        amount = parse_money(value, what=where, allow_negative=False)
    except MoneyError as exc:
        raise TraceRefused(str(exc)) from None
    if amount > MAX_SPAN_COST:
        raise TraceRefused(f"{where}: {value} is over {MAX_SPAN_COST}, the most one span may cost")
    if quantize(amount) != amount:
        raise TraceRefused(f"{where}: {value} has more than {DECIMAL_PLACES} decimal places")


def validate_span(data: Any, label: str) -> dict[str, Any]:
    """Return one reported span in its stored form, or raise ``TraceRefused`` naming the field."""
    if not isinstance(data, dict):
        raise TraceRefused(f"{label}: expected a span object, got {type(data).__name__}")
    unknown = sorted(set(data) - SPAN_FIELDS)
    if unknown:
        raise TraceRefused(f"{label}.{unknown[0]}: unknown field; a span carries {', '.join(sorted(SPAN_FIELDS))}")
    span_id = data.get("spanId")
    if not isinstance(span_id, str) or not 0 < len(span_id) <= MAX_ID_CHARS:
        raise TraceRefused(f"{label}.spanId: expected text of 1 to {MAX_ID_CHARS} characters, got {span_id!r}")
    parent = data.get("parentSpanId")
    if parent is not None and (not isinstance(parent, str) or not 0 < len(parent) <= MAX_ID_CHARS):
        raise TraceRefused(f"{label}.parentSpanId: expected null or a span's id, got {parent!r}")
    name = data.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        raise TraceRefused(f"{label}.name: expected text of 1 to {MAX_NAME_CHARS} characters")
    kind = data.get("kind", OTHER)
    if kind not in KINDS:
        raise TraceRefused(f"{label}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    start = _time(data, "startTime", label)
    if "endTime" in data and "durationMs" in data:
        raise TraceRefused(f"{label}: give endTime or durationMs, not both")
    if "durationMs" in data:
        duration = data["durationMs"]
        if isinstance(duration, bool) or not isinstance(duration, int | float) or not 0 <= duration <= 10**11:
            raise TraceRefused(f"{label}.durationMs: expected a number of milliseconds ≥ 0, got {duration!r}")
        end = start + timedelta(milliseconds=duration)
    else:
        end = _time(data, "endTime", label)
        if end < start:
            raise TraceRefused(f"{label}.endTime: {end.isoformat()} is before startTime")
    status = data.get("status", OK)
    if status not in STATUSES:
        raise TraceRefused(f"{label}.status: expected ok or error, got {status!r}")
    message = data.get("statusMessage", "")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise TraceRefused(f"{label}.statusMessage: expected text, got {type(message).__name__}")
    return {
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": kind,
        "startTime": instant_text(start),
        "endTime": instant_text(end),
        "status": status,
        "statusMessage": message,
        "attributes": check_attributes(data.get("attributes"), label),
    }


def _check_tree(spans: list[dict[str, Any]], where: str) -> None:
    """Refuse a repeated id, a parent that is no span of the trace, and a loop of parents."""
    index_of: dict[str, int] = {}
    for index, span in enumerate(spans):
        if span["spanId"] in index_of:
            raise TraceRefused(
                f"{_label(where, index, span['spanId'])}.spanId: already used by {where}[{index_of[span['spanId']]}]"
            )
        index_of[span["spanId"]] = index
    for index, span in enumerate(spans):
        parent = span["parentSpanId"]
        if parent is not None and parent not in index_of:
            raise TraceRefused(
                f"{_label(where, index, span['spanId'])}.parentSpanId: {parent!r} is no span of this trace"
            )
    settled: set[str] = set()
    for index, span in enumerate(spans):
        path: list[str] = []
        current: str | None = span["spanId"]
        while current is not None and current not in settled:
            if current in path:
                raise TraceRefused(
                    f"{_label(where, index, span['spanId'])}.parentSpanId: the parents loop back to span {current!r}"
                )
            path.append(current)
            current = spans[index_of[current]]["parentSpanId"]
        settled.update(path)


def validate_trace(trace: Any, *, where: str = "trace") -> list[dict[str, Any]]:
    """Return a reported trace as stored spans, or raise ``TraceRefused`` naming the span and the rule or limit.

    A legacy tool entry (``{"tool", ...}`` with no ``spanId``) is taken as a
    tool span with no start time, as stored traces of that shape are read.
    """
    if trace is None:
        return []
    if not isinstance(trace, list):
        raise TraceRefused(f"{where}: expected a list of spans, got {type(trace).__name__}")
    if len(trace) > max_spans():
        first = trace[max_spans()]
        span_id = first.get("spanId") if isinstance(first, dict) else None
        raise TraceRefused(
            f"{where}: {len(trace):,} spans, over the limit of {max_spans():,} spans a run (TRACE_MAX_SPANS); "
            f"the first past it is {_label(where, max_spans(), span_id)}"
        )
    spans: list[dict[str, Any]] = []
    total = 0
    for index, data in enumerate(trace):
        span_id = data.get("spanId") if isinstance(data, dict) else None
        label = _label(where, index, span_id)
        if isinstance(data, dict) and "spanId" not in data and isinstance(data.get("tool"), str):
            span = legacy_span(data, index)
        else:
            span = validate_span(data, label)
        size = span_bytes(span)
        if size > max_span_bytes():
            raise TraceRefused(
                f"{label}: {size:,} bytes, over the limit of {max_span_bytes():,} bytes a span (TRACE_MAX_SPAN_BYTES)"
            )
        total += size
        if total > max_trace_bytes():
            raise TraceRefused(
                f"{where}: over the limit of {max_trace_bytes():,} bytes a trace (TRACE_MAX_BYTES) at {label}"
            )
        spans.append(span)
    _check_tree(spans, where)
    return spans


def check_assembled(trace: list[dict[str, Any]], *, where: str = "trace", most_bytes: int | None = None) -> None:
    """Refuse, in ``validate_trace``'s words, a trace of stored spans each already checked, for what only the whole
    can break: more than ``TRACE_MAX_SPANS`` spans, a repeated id, a parent no span of it, a loop of parents, or
    over ``TRACE_MAX_BYTES``, measured only when ``most_bytes`` (what its spans' sizes cannot pass) is not within it.

    For the spans an OTLP export checked one by one (``grading.otlp_decode.check``) and its sweep read back in the
    stored form: ``validate_trace`` would rebuild and measure each span again for nothing.
    """
    if len(trace) > max_spans():
        raise TraceRefused(
            f"{where}: {len(trace):,} spans, over the limit of {max_spans():,} spans a run (TRACE_MAX_SPANS)"
        )
    if most_bytes is None or most_bytes > max_trace_bytes():
        total = 0
        for index, span in enumerate(trace):
            total += span_bytes(span)
            if total > max_trace_bytes():
                raise TraceRefused(
                    f"{where}: over the limit of {max_trace_bytes():,} bytes a trace (TRACE_MAX_BYTES) at "
                    f"{_label(where, index, span['spanId'])}"
                )
    _check_tree(trace, where)


# --- reading what is stored -----------------------------------------------------------------


def legacy_span(step: dict[str, Any], index: int) -> dict[str, Any]:
    """Return an entry stored before spans as a span: a tool call, a log line or other."""
    if isinstance(step.get("log"), str):
        at = parse_instant(step.get("at"))
        return {
            "spanId": f"legacy-{index}",
            "parentSpanId": None,
            "name": "log",
            "kind": OTHER,
            "startTime": instant_text(at) if at else None,
            "endTime": instant_text(at) if at else None,
            "status": OK,
            "statusMessage": "",
            "attributes": {LOG: step["log"]},
        }
    if isinstance(step.get("tool"), str):
        tool_status = str(step.get("status") or "")
        failed = tool_status in _FAILED_TOOL_STATUSES
        attributes: dict[str, Any] = {OPERATION: "execute_tool", TOOL_NAME: step["tool"]}
        if "arguments" in step:
            attributes[TOOL_ARGUMENTS] = step["arguments"]
        if "result" in step:
            attributes[TOOL_RESULT] = step["result"]
        if tool_status:
            attributes[TOOL_STATUS] = tool_status
        if step.get("dry_run"):
            attributes[DRY_RUN] = True
        for key in ("task", "turn"):
            if key in step:
                attributes[f"singularity.{key}"] = step[key]
        duration = step.get("duration_ms", step.get("ms"))
        return {
            "spanId": f"legacy-{index}",
            "parentSpanId": None,
            "name": step["tool"],
            "kind": TOOL,
            "startTime": None,
            "endTime": None,
            "durationMs": duration if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
            "status": ERROR if failed else OK,
            "statusMessage": str(step.get("error") or ""),
            "attributes": attributes,
        }
    return {
        "spanId": f"legacy-{index}",
        "parentSpanId": None,
        "name": str(step.get("name") or "(unnamed)")[:MAX_NAME_CHARS],
        "kind": OTHER,
        "startTime": None,
        "endTime": None,
        "status": OK,
        "statusMessage": "",
        "attributes": {str(key): value for key, value in step.items()},
    }


def normalise(trace: Any) -> list[dict[str, Any]]:
    """Return a stored trace as spans, whatever shape its entries were written in; never raises."""
    spans = []
    for index, step in enumerate(trace if isinstance(trace, list) else []):
        if not isinstance(step, dict):
            step = {"value": step}
        if isinstance(step.get("spanId"), str) and step.get("kind") in KINDS:
            spans.append(step)
        else:
            spans.append(legacy_span(step, index))
    return spans


def duration_ms(span: dict[str, Any]) -> float | None:
    """Return a span's duration in milliseconds (from its times, else a legacy entry's), or None."""
    start, end = parse_instant(span.get("startTime")), parse_instant(span.get("endTime"))
    if start is not None and end is not None:
        return (end - start).total_seconds() * 1000
    value = span.get("durationMs")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def span_cost(span: dict[str, Any]) -> Decimal | None:
    """Return the span's ``singularity.cost_usd`` as a Decimal, or None when it has none readable."""
    value = (span.get("attributes") or {}).get(COST)
    if value is None:
        return None
    try:
        return parse_money(value, allow_negative=False)
    except MoneyError:
        return None


def trace_cost(spans: list[dict[str, Any]]) -> Decimal | None:
    """Return the sum of the spans' ``singularity.cost_usd``, or None when none has one readable."""
    costs = [cost for cost in (span_cost(span) for span in spans) if cost is not None]
    return sum(costs, Decimal(0)) if costs else None


def totals(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the trace's totals: tokens in and out, cost, wall time, and how many spans of each kind and failed."""
    starts = [parse_instant(span.get("startTime")) for span in spans]
    ends = [parse_instant(span.get("endTime")) for span in spans]
    timed_starts = [moment for moment in starts if moment is not None]
    timed_ends = [moment for moment in ends if moment is not None]
    wall = (max(timed_ends) - min(timed_starts)).total_seconds() * 1000 if timed_starts and timed_ends else None
    return {
        "spans": len(spans),
        "llm_calls": sum(1 for span in spans if span.get("kind") == LLM),
        "tool_calls": sum(1 for span in spans if span.get("kind") == TOOL),
        "errors": sum(1 for span in spans if span.get("status") == ERROR),
        "input_tokens": sum(_int((span.get("attributes") or {}).get(INPUT_TOKENS)) for span in spans),
        "output_tokens": sum(_int((span.get("attributes") or {}).get(OUTPUT_TOKENS)) for span in spans),
        "cost_usd": trace_cost(spans),
        "wall_ms": wall,
    }


def tool_calls(trace: Any) -> list[dict[str, Any]]:
    """Return the trace's tool calls as compact records (tool, status, and arguments, result, error when held)."""
    calls = []
    for span in normalise(trace):
        if span["kind"] != TOOL:
            continue
        attributes = span.get("attributes") or {}
        record: dict[str, Any] = {
            "tool": attributes.get(TOOL_NAME, span["name"]),
            "status": attributes.get(TOOL_STATUS, span["status"]),
        }
        if TOOL_ARGUMENTS in attributes:
            record["arguments"] = attributes[TOOL_ARGUMENTS]
        if TOOL_RESULT in attributes:
            record["result"] = attributes[TOOL_RESULT]
        if span.get("statusMessage"):
            record["error"] = span["statusMessage"]
        calls.append(record)
    return calls


def logs(trace: Any) -> list[str]:
    """Return the log lines of a trace, in order."""
    return [span["attributes"][LOG] for span in normalise(trace) if isinstance(span["attributes"].get(LOG), str)]


# --- recording spans (the engine's own runners) -----------------------------------------------


def new_span_id() -> str:
    """Return a fresh span id: 16 hex digits, as OpenTelemetry's."""
    return secrets.token_hex(8)


def _json_value(text: Any) -> Any:
    """Return JSON text parsed when it parses, else the text itself."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def _text_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        return [
            {"type": "text", "content": part.get("text", "")}
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        ]
    return []


def genai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return chat-completions messages in the GenAI conventions' shape: ``{role, parts}``.

    Text becomes ``text`` parts; an assistant's tool calls ``tool_call`` parts
    (arguments parsed when they are JSON); a tool message a
    ``tool_call_response`` part.
    """
    shaped = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "user")
        if role == "tool":
            parts = [
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id"),
                    "result": _json_value(message.get("content")),
                }
            ]
        else:
            parts = _text_parts(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                parts.append(
                    {
                        "type": "tool_call",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": _json_value(function.get("arguments")),
                    }
                )
        shaped.append({"role": role, "parts": parts})
    return shaped


def fit(span: dict[str, Any]) -> dict[str, Any]:
    """Return the span within ``TRACE_MAX_SPAN_BYTES``: its largest values cut, their names in ``singularity.cut``.

    For what the engine records itself (a run is never refused for its
    trace); a reported span over the limit is refused instead.
    """
    limit = max_span_bytes()
    cut: list[str] = []
    while span_bytes(span) > limit:
        attributes = span["attributes"]
        sizes = {
            key: len(json.dumps(value, ensure_ascii=False, default=str))
            for key, value in attributes.items()
            if key not in cut and key != CUT
        }
        if "statusMessage" not in cut:
            sizes["statusMessage"] = len(span.get("statusMessage") or "")
        if not sizes:
            break
        key = max(sizes, key=lambda name: sizes[name])
        value = span["statusMessage"] if key == "statusMessage" else attributes[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        cut.append(key)
        attributes[CUT] = cut
        # A character is at least one byte of JSON: dropping `over` of them (and room for the note) is enough,
        # unless escapes made the note's room too small; then it is cut again from the original.
        keep = len(text)
        while keep > 0 and span_bytes(span) > limit:
            keep = max(0, keep - (span_bytes(span) - limit) - 128)
            shortened = text[:keep] + f"… [cut from {len(text):,} characters]"
            if key == "statusMessage":
                span["statusMessage"] = shortened
            else:
                attributes[key] = shortened
    return span


# --- the page's view of a trace --------------------------------------------------------------


def page_context(trace: Any) -> dict[str, Any]:
    """Return what ``grading/partials/span_tree.html`` takes: ``{"spans", "totals"}`` of a stored trace."""
    spans = normalise(trace)
    return {"spans": spans, "totals": totals(spans)}


def tree(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the spans in tree order (each parent before its children, siblings by start) with depth and bar.

    Each row is ``{"span", "depth", "duration_ms", "offset_pct", "width_pct"}``;
    the bar is placed by the span's start within the trace's timed extent
    (a span with no start time gets no bar). A span whose parent is missing
    is shown as a root.
    """
    ids = {span["spanId"] for span in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span.get("parentSpanId")
        children.setdefault(parent if parent in ids else None, []).append(span)
    starts = [parse_instant(span.get("startTime")) for span in spans]
    ends = [parse_instant(span.get("endTime")) for span in spans]
    first = min((moment for moment in starts if moment), default=None)
    last = max((moment for moment in ends if moment), default=None)
    extent = (last - first).total_seconds() * 1000 if first and last else 0.0

    def key(span: dict[str, Any]) -> tuple[int, datetime]:
        start = parse_instant(span.get("startTime"))
        return (0, start) if start else (1, datetime.max.replace(tzinfo=UTC))

    rows: list[dict[str, Any]] = []
    seen: set[str] = set()

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=key):
            if span["spanId"] in seen:
                continue
            seen.add(span["spanId"])
            rows.append(_row(span, depth, first, extent))
            walk(span["spanId"], depth + 1)

    walk(None, 0)
    for span in spans:  # anything a loop of parents hid from the walk still shows
        if span["spanId"] not in seen:
            seen.add(span["spanId"])
            rows.append(_row(span, 0, first, extent))
    return rows


def _row(span: dict[str, Any], depth: int, first: datetime | None, extent: float) -> dict[str, Any]:
    start = parse_instant(span.get("startTime"))
    took = duration_ms(span)
    row: dict[str, Any] = {"span": span, "depth": min(depth, 12), "duration_ms": took, "bar": False}
    if start is not None and first is not None and took is not None:
        offset = (start - first).total_seconds() * 1000
        row["bar"] = True
        row["offset_pct"] = round(100 * offset / extent, 2) if extent else 0
        row["width_pct"] = max(round(100 * took / extent, 2), 0.5) if extent else 100
    return row


# --- the schema in the API document ----------------------------------------------------------

ATTRIBUTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Keyed by OpenTelemetry GenAI semantic-convention names; any other key is kept as sent. "
        "`singularity.cost_usd` is the span's cost in USD as a decimal string."
    ),
    "properties": {
        OPERATION: {"type": "string", "example": "chat", "description": "chat, execute_tool, invoke_agent, …"},
        REQUEST_MODEL: {"type": "string", "example": "gpt-4o"},
        RESPONSE_MODEL: {"type": "string", "example": "gpt-4o-2024-08-06"},
        INPUT_MESSAGES: {
            "type": "array",
            "description": "The messages sent: `{role, parts: [{type: text, content}]}`.",
            "items": {"type": "object", "additionalProperties": True},
        },
        OUTPUT_MESSAGES: {
            "type": "array",
            "description": "The messages returned: `{role, parts, finish_reason}`.",
            "items": {"type": "object", "additionalProperties": True},
        },
        INPUT_TOKENS: {"type": "integer", "minimum": 0},
        OUTPUT_TOKENS: {"type": "integer", "minimum": 0},
        FINISH_REASONS: {"type": "array", "items": {"type": "string"}, "example": ["stop"]},
        TOOL_NAME: {"type": "string", "example": "crm__lookup"},
        TOOL_CALL_ID: {"type": "string"},
        TOOL_ARGUMENTS: {"description": "The tool's arguments (any JSON, an object as a rule)."},
        TOOL_RESULT: {"description": "What the tool returned (any JSON)."},
        COST: {"type": "string", "format": "decimal", "example": "0.000420", "description": "USD"},
    },
    "additionalProperties": True,
}


@extend_schema_field(ATTRIBUTES_SCHEMA)
class AttributesField(serializers.JSONField):
    """A span's attributes: a JSON object keyed by GenAI semantic-convention names."""


@extend_schema_serializer(component_name="Span")
class SpanSerializer(serializers.Serializer):
    """One span of a run's trace: a model call (llm), a tool call (tool) or anything else (other)."""

    spanId = serializers.CharField(max_length=MAX_ID_CHARS, help_text="Unique within the trace.")
    parentSpanId = serializers.CharField(
        max_length=MAX_ID_CHARS, allow_null=True, required=False, help_text="The parent's spanId; null for a root."
    )
    name = serializers.CharField(max_length=MAX_NAME_CHARS, help_text="e.g. `chat gpt-4o`, `execute_tool search`.")
    kind = serializers.ChoiceField(choices=list(KINDS), required=False, default=OTHER)
    startTime = serializers.DateTimeField(
        allow_null=True, help_text="ISO-8601 with a UTC offset (null only on entries stored before spans)."
    )
    endTime = serializers.DateTimeField(
        allow_null=True, required=False, help_text="ISO-8601 with a UTC offset; or give durationMs instead."
    )
    durationMs = serializers.FloatField(
        min_value=0, required=False, help_text="On input, instead of endTime; never both."
    )
    status = serializers.ChoiceField(choices=list(STATUSES), required=False, default=OK)
    statusMessage = serializers.CharField(allow_blank=True, required=False, help_text="Why the span failed.")
    attributes = AttributesField(required=False)

    def to_representation(self, instance: Any) -> Any:
        """A stored span is returned exactly as stored."""
        return instance
