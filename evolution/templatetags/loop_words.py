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


@register.filter
def markdown(text: Any) -> SafeString:
    """Markdown rendered to HTML with raw HTML disabled (it is escaped), so the result is safe to show."""
    return mark_safe(_MARKDOWN.render(str(text or "")))  # noqa: S308 - html is off: markdown-it escapes every tag
