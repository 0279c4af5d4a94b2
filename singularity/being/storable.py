"""Untrusted text made storable where it enters the being: the model's replies and the tools' outcomes.

Postgres refuses a NUL in a text column and ``\\u0000`` in ``jsonb``; no UTF-8
column takes a lone surrogate (``\\ud800``, which JSON may carry). Such a
character is replaced by its visible JSON escape, six characters of text:
NUL becomes ``\\u0000``, so what was sent shows as what it was and is stored
the same on every database. Everything else passes unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from singularity.nul import each_string

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def storable_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by its visible escape."""
    return _UNSTORABLE.sub(_escape, text)


def storable(value: Any) -> Any:
    """``value`` with ``storable_text`` applied to every string in it, keys included."""
    return each_string(value, storable_text)


def storable_arguments(arguments: str) -> str:
    """Tool-call arguments (JSON text) whose parsed strings are storable; the model's exact text when they are."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return storable_text(arguments)
    cleaned = storable(parsed)
    return arguments if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


def storable_completion(completion: Any) -> Any:
    """A gateway completion whose content, model, tool calls and wire message are storable."""
    calls = [
        dataclasses.replace(
            call, id=storable_text(call.id), name=storable_text(call.name), arguments=storable_arguments(call.arguments)
        )
        for call in completion.tool_calls
    ]
    message = storable(completion.message)
    for wire, call in zip(message.get("tool_calls") or [], calls, strict=True):
        wire["function"]["arguments"] = call.arguments
    return dataclasses.replace(
        completion,
        content=None if completion.content is None else storable_text(completion.content),
        model=storable_text(completion.model),
        tool_calls=calls,
        message=message,
    )


class StorableGateway:
    """Wraps a gateway so every completion it returns is storable (see ``storable_completion``)."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    def complete(self, *, model: str, messages: list[dict], tools: list[dict], **limits: Any) -> Any:
        return storable_completion(self.gateway.complete(model=model, messages=messages, tools=tools, **limits))


def storable_outcome(outcome: Any) -> Any:
    """A tool outcome whose result (what the model sees), raw result and error are storable."""
    outcome.result = storable(outcome.result)
    outcome.raw = storable(outcome.raw)
    outcome.error = storable_text(outcome.error or "")
    return outcome
