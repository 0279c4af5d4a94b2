"""What the span tree partial shows of each span: ``{{ spans|span_tree_rows }}`` (grading/partials/span_tree.html).

Every value a person reads is text: message parts as their text, arguments,
results and other attributes as indented JSON, a long one cut at
``SHOWN_CHARS`` with the whole kept beside it for "show all". The rows are
built here as HTML (``span_tree_rows``), every value escaped, rather than by
a template loop: at the trace limit (2,000 spans) the loop and its includes
took seconds to render a page (measured in docs/decisions.md, issue 28).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from grading import spans as S
from singularity.templatetags.singularity_tags import money, money_exact

register = template.Library()

#: How much of a long value shows before "show all".
SHOWN_CHARS = 600
NONE_RECORDED = '<p class="muted small">None recorded.</p>'


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


def _value_html(value: dict[str, Any]) -> str:
    text = f'<pre class="span-value">{escape(value["text"])}</pre>'
    if value["cut"]:
        text += (
            f'<details class="span-all"><summary>show all ({value["chars"]} characters)</summary>'
            f'<pre class="span-value">{escape(value["full"])}</pre></details>'
        )
    return text


def _messages_html(name: str, label: str, messages: list[dict[str, Any]]) -> str:
    body = "".join(
        f'<div class="span-message"><span class="span-role">{escape(m["role"])}</span>{_value_html(m["body"])}</div>'
        for m in messages
    )
    return (
        f'<div class="span-messages" data-messages="{name}"><div class="span-label">{label}</div>'
        f"{body or NONE_RECORDED}</div>"
    )


def _money_html(amount: Any) -> str:
    if amount is None:
        return "—"
    return f'<span title="{escape(money_exact(amount))}">{escape(money(amount))}</span>'


def _count(value: Any) -> str:
    return "—" if value is None else escape(str(value))


def _body_html(r: dict[str, Any]) -> str:
    parts = []
    if r["message"]:
        parts.append(f'<p class="error small span-error-message">{escape(r["message"])}</p>')
    if r["kind"] == S.LLM:
        model = f"<code>{escape(r['model'] or '—')}</code>"
        if r["response_model"] and r["response_model"] != r["model"]:
            model += f" → <code>{escape(r['response_model'])}</code>"
        parts.append(
            '<dl class="span-facts small">'
            f"<dt>Model</dt><dd>{model}</dd>"
            f"<dt>Tokens</dt><dd data-tokens>in {_count(r['input_tokens'])} · out {_count(r['output_tokens'])}</dd>"
            f"<dt>Cost</dt><dd data-cost>{_money_html(r['cost'])}</dd>"
            f"<dt>Latency</dt><dd>{escape(r['duration'] or '—')}</dd>"
            f"<dt>Finish</dt><dd>{escape(r['finish'] or '—')}</dd></dl>"
        )
        parts.append(_messages_html("input", "Input messages", r["input"]))
        parts.append(_messages_html("output", "Output", r["output"]))
    elif r["kind"] == S.TOOL:
        task = f"<dt>Task</dt><dd>{escape(str(r['task']))}</dd>" if r["task"] else ""
        parts.append(
            f'<dl class="span-facts small"><dt>Tool</dt><dd><code>{escape(str(r["tool"]))}</code></dd>'
            f"<dt>Took</dt><dd>{escape(r['duration'] or '—')}</dd>{task}</dl>"
        )
        parts.append('<div class="span-label">Arguments</div>')
        if r["has_arguments"]:
            parts.append(f"<div data-arguments>{_value_html(r['arguments'])}</div>")
        else:
            parts.append(NONE_RECORDED)
        if r["has_result"]:
            parts.append(f'<div class="span-label">Result</div><div data-result>{_value_html(r["result"])}</div>')
        elif r["status"] != S.ERROR:
            parts.append('<p class="muted small">No result recorded.</p>')
    elif isinstance(r["log"], str):
        parts.append(f'<p class="span-log">{escape(r["log"])}</p>')
    if r["attributes"]:
        listed = "".join(
            f"<dt><code>{escape(a['key'])}</code></dt><dd>{_value_html(a['value'])}</dd>" for a in r["attributes"]
        )
        parts.append(f'<dl class="span-facts small span-attributes">{listed}</dl>')
    return "".join(parts)


def _row_html(r: dict[str, Any]) -> str:
    error = r["status"] == S.ERROR
    badges = (' <span class="badge failed">error</span>' if error else "") + (
        ' <span class="badge">dry run</span>' if r["dry_run"] else ""
    )
    if r["bar"]:
        bar = f'<span class="span-bar" style="left: {r["offset_pct"]:.2f}%; width: {r["width_pct"]:.2f}%"></span>'
        where = f"starts at {r['offset_pct']:.1f}% of the trace"
    else:
        bar, where = "", "no start time recorded"
    kind = escape(r["kind"])
    return (
        f'<li class="span span-{kind}{" span-error" if error else ""}" data-span-id="{escape(r["id"])}" '
        f'data-kind="{kind}" data-depth="{r["depth"]}" style="--depth: {r["depth"]}">'
        f'<div class="span-head"><span class="span-name"><span class="badge span-kind">{kind}</span> '
        f"<code>{escape(r['name'])}</code>{badges}</span>"
        f'<span class="span-track" aria-hidden="true">{bar}</span>'
        f'<span class="span-took" title="{where}">{escape(r["duration"] or "—")}</span></div>'
        f'<div class="span-body">{_body_html(r)}</div></li>'
    )


@register.filter
def span_tree_rows(spans: Any) -> SafeString:
    """Return the tree's rows as ``<li>`` elements, in tree order, every value escaped."""
    return mark_safe("\n".join(_row_html(row) for row in span_rows(spans)))  # noqa: S308 - built escaped above
