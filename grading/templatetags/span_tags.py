"""What the span tree partial shows of each span: ``{{ spans|span_rows }}`` (grading/partials/span_tree.html).

Every value a person reads is text: message parts as their text, arguments,
results and other attributes as indented JSON, a long one cut at
``SHOWN_CHARS`` with the whole kept beside it for "show all".
"""

from __future__ import annotations

import json
from typing import Any

from django import template

from grading import spans as S

register = template.Library()

#: How much of a long value shows before "show all".
SHOWN_CHARS = 600


def shown(value: Any) -> dict[str, Any]:
    """Return a value as ``{"text", "full", "cut", "chars"}``: text as text, anything else as indented JSON."""
    full = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
    cut = len(full) > SHOWN_CHARS
    return {"text": full[:SHOWN_CHARS] + "…" if cut else full, "full": full, "cut": cut, "chars": len(full)}


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    kind = part.get("type")
    if kind == "text" or (kind is None and "content" in part):
        content = part.get("content")
        return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    if kind == "tool_call":
        arguments = json.dumps(part.get("arguments"), indent=2, ensure_ascii=False, default=str)
        return f"calls {part.get('name')}({arguments})"
    if kind == "tool_call_response":
        result = part.get("result")
        text = result if isinstance(result, str) else json.dumps(result, indent=2, ensure_ascii=False, default=str)
        return f"tool answered: {text}"
    return json.dumps(part, indent=2, ensure_ascii=False, default=str)


def message_rows(messages: Any) -> list[dict[str, Any]]:
    """Return GenAI messages (``{role, parts}``, or ``{role, content}``) as ``{"role", "body"}`` to show."""
    rows = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("parts"), list):
            text = "\n".join(_part_text(part) for part in message["parts"])
        else:
            content = message.get("content")
            text = content if isinstance(content, str) else _part_text({"type": "text", "content": content})
        rows.append({"role": str(message.get("role", "")), "body": shown(text)})
    return rows


def _duration_text(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 1 or ms == 0 else f"{ms:.2f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    return f"{int(ms // 60_000)} min {int(ms % 60_000 // 1000):02d} s"


@register.filter
def duration_ms(value: Any) -> str:
    """Return milliseconds as "850 ms", "1.25 s" or "2 min 05 s"."""
    return _duration_text(value)


@register.filter
def span_rows(spans: Any) -> list[dict[str, Any]]:
    """Return the rows the span tree shows, in tree order (``grading.spans.tree``), each ready to print."""
    rows = []
    for row in S.tree(list(spans or [])):
        span = row["span"]
        attributes = span.get("attributes") or {}
        finish = attributes.get(S.FINISH_REASONS)
        entry: dict[str, Any] = {
            **row,
            "id": span["spanId"],
            "name": span["name"],
            "kind": span["kind"],
            "status": span.get("status", S.OK),
            "message": span.get("statusMessage") or "",
            "duration": _duration_text(row["duration_ms"]),
            "indent": row["depth"] * 0.9,
            "model": attributes.get(S.REQUEST_MODEL, ""),
            "response_model": attributes.get(S.RESPONSE_MODEL, ""),
            "input_tokens": attributes.get(S.INPUT_TOKENS),
            "output_tokens": attributes.get(S.OUTPUT_TOKENS),
            "cost": S.span_cost(span),
            "finish": ", ".join(str(reason) for reason in finish) if isinstance(finish, list) else "",
            "tool": attributes.get(S.TOOL_NAME, span["name"]),
            "dry_run": bool(attributes.get(S.DRY_RUN)),
            "task": attributes.get(S.TASK, ""),
            "log": attributes.get(S.LOG),
        }
        if span["kind"] == S.LLM:
            entry["input"] = message_rows(attributes.get(S.INPUT_MESSAGES))
            entry["output"] = message_rows(attributes.get(S.OUTPUT_MESSAGES))
        if span["kind"] == S.TOOL:
            entry["has_arguments"] = S.TOOL_ARGUMENTS in attributes
            entry["arguments"] = shown(attributes.get(S.TOOL_ARGUMENTS))
            entry["has_result"] = S.TOOL_RESULT in attributes
            entry["result"] = shown(attributes.get(S.TOOL_RESULT))
        entry["attributes"] = [
            {"key": key, "value": shown(value)} for key, value in attributes.items() if key not in S.SHOWN
        ]
        rows.append(entry)
    return rows
