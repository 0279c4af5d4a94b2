"""A run's evidence with its NUL characters (U+0000) as U+FFFD, so every database stores the same thing.

PostgreSQL refuses U+0000 in ``text`` and ``jsonb``; SQLite keeps it. What
an agent sent as its run (input, output, error, spans) is kept, not refused:
each NUL in a string or a key becomes U+FFFD, the Unicode replacement
character. A short text a person types (a note, a name) is refused instead,
naming the field (``singularity.json_input``, ``singularity.input_guard``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

NUL = "\x00"
REPLACEMENT = "\ufffd"
#: How a NUL reads in JSON text (``json.dumps`` escapes every control character, whatever ``ensure_ascii``).
_ESCAPED = "\\u0000"


def each_string(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (JSON-like: dicts, lists, tuples, scalars) with ``change`` applied to every string in it, keys
    included, at any depth; a list for a tuple; anything else as it is."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {each_string(key, change): each_string(item, change) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [each_string(item, change) for item in value]
    return value


def replaced(value: Any) -> Any:
    """Return ``value`` with every NUL in its strings and keys (at any depth of dicts and lists) as U+FFFD.

    Walks the whole value: call it on what holds a NUL (``holds_nul``).
    """
    return each_string(value, _replace)


def _replace(text: str) -> str:
    return text.replace(NUL, REPLACEMENT)


def holds_nul(value: Any) -> bool:
    """Whether a JSON-like value holds a NUL in a string or a key: one pass of the JSON encoder (C), no Python walk.

    A string holding the six characters ``\\u0000`` themselves reads as a
    NUL here too; ``replaced`` then finds nothing to change.
    """
    if isinstance(value, str):
        return NUL in value
    return _ESCAPED in json.dumps(value, default=str)


def nul_refusal(field: str, text: str) -> str:
    """``"<field>: contains a NUL character"`` when ``text`` holds one, else "": a person's short text is refused
    (they retype it), never changed behind their back."""
    return f"{field}: contains a NUL character" if NUL in text else ""
