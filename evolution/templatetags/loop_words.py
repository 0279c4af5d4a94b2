"""The loop's internal names in people's words on the pages: a cycle's phase, a settings op, a PR's Markdown.

``phase_words`` turns ``merge_wait`` into "waiting for the merge";
``op_words`` turns ``loop_widen`` into "widened"; ``action_words`` drops
the op and the subject an action-log summary starts with (the table shows
both beside it); ``markdown`` renders a PR description with markdown-it-py
with raw HTML off, so a body can format text but never inject markup.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from evolution.core import outcomes

register = template.Library()

OP_WORDS = {
    "loop_set": "set",
    "loop_widen": "widened",
    "loop_join": "joined the loop",
    "eval_write_method": "wrote a judge method",
    "instruction_write": "wrote a loop prompt",
    "instruction_reset": "reset a loop prompt",
}

#: CommonMark with raw HTML off (``js-default``: no HTML, no unsafe link schemes) plus tables.
_MARKDOWN = MarkdownIt("js-default").enable("table")


@register.filter
def phase_words(phase: Any) -> str:
    """A cycle's machine phase as a person reads it (``evolution.core.outcomes.phase_words``)."""
    return outcomes.phase_words(phase)


@register.filter
def op_words(op: Any) -> str:
    """A settings write's op as a person reads it ("set", "widened", "joined the loop")."""
    return OP_WORDS.get(str(op), str(op or "").replace("_", " "))


@register.filter
def action_words(action: Any) -> str:
    """An action-log summary without the "<op> <subject>: " it starts with (shown in their own columns)."""
    summary = str(getattr(action, "summary", "") or "")
    lead = f"{getattr(action, 'op', '')} {getattr(action, 'subject', '')}: "
    return summary.removeprefix(lead)


#: What the proposer's tool calls did, as a person reads it (``read_words``).
_READ_WORDS = {
    "file_list": "Listed the files under",
    "file_read": "Read",
    "db_schema": "Looked up the tables it may query",
    "db_query": "Queried the database",
    "loop_history": "Read the loop's history of this entity",
    "eval_list_episodes": "Listed the role's episodes",
    "eval_get_episode": "Read the dialog of episode",
}


@register.filter
def read_words(read: Any) -> str:
    """One tool call of the proposer's investigation in people's words ("Read features/x.md")."""
    if not isinstance(read, dict):
        return ""
    tool = str(read.get("tool", ""))
    args = read.get("arguments") if isinstance(read.get("arguments"), dict) else {}
    words = _READ_WORDS.get(tool, f"Asked for {tool}, which it does not have")
    if tool == "file_list":
        return f"{words} {args.get('path') or 'the brain'}"
    if tool == "file_read":
        return f"{words} {args.get('path', '?')}"
    if tool == "eval_get_episode":
        return f"{words} {args.get('runId', '?')}"
    return words


@register.filter
def markdown(text: Any) -> SafeString:
    """Markdown rendered to HTML with raw HTML disabled (it is escaped), so the result is safe to show."""
    return mark_safe(_MARKDOWN.render(str(text or "")))  # noqa: S308 - html is off: markdown-it escapes every tag
