"""Whether a signed GitHub delivery can be read: its headers, its JSON, and the shape of the fields the receiver reads.

A delivery that passed the signature but cannot be read is refused 400 with
``problem``'s sentence naming the field (docs/decisions.md, issue 27): GitHub
shows the answer in the hook's delivery log, where a person looks, and does
not redeliver by itself. What is read:

- the ``X-GitHub-Event`` and ``X-GitHub-Delivery`` headers (recorded: no NUL);
- the body: UTF-8 JSON, an object, no NUL or lone surrogate anywhere, nested at
  most ``json_input.MAX_DEPTH`` levels (``singularity.json_input``);
- ``action``: text, when present (recorded for every event);
- for a ``pull_request`` event, ``repository`` and ``pull_request`` objects,
  ``repository.full_name`` text, and ``number`` / ``pull_request.number`` an
  integer (not a boolean: ``true`` is not PR #1) from 1 to ``MAX_NUMBER``.
"""

from __future__ import annotations

from typing import Any

from singularity import json_input
from singularity.json_input import KIND_NAMES, kind_name, value_at

#: The largest pull request number a row holds (a positive integer column on both databases).
MAX_NUMBER = 2**31 - 1
#: Each field a pull_request event is read for, and the JSON type it must have (absent or null is fine).
PULL_REQUEST_SHAPE: dict[str, type] = {
    "repository": dict,
    "repository.full_name": str,
    "pull_request": dict,
    "number": int,
    "pull_request.number": int,
}


class Unreadable(ValueError):
    """A signed delivery that cannot be read; the message names the field and what is wrong."""


def header_problem(name: str, value: str) -> str:
    """Why a recorded header cannot be stored ("" when it can)."""
    problem = json_input.text_problem(value)
    return f"{name}: {problem}" if problem else ""


def read(body: bytes, event: str) -> dict[str, Any]:
    """The delivery's payload, checked; Unreadable naming the field when it cannot be read."""
    try:
        payload = json_input.loads(body or b"{}")
    except json_input.JsonRefused as exc:
        raise Unreadable(str(exc)) from None
    if not isinstance(payload, dict):
        raise Unreadable(f"body: expected an object, got {kind_name(payload)}")
    _expect(payload, "action", str)
    if event == "pull_request":
        for place, kind in PULL_REQUEST_SHAPE.items():
            _expect(payload, place, kind)
    return payload


def _expect(payload: dict[str, Any], place: str, kind: type) -> None:
    value = value_at(payload, place)
    if value is None:
        return
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise Unreadable(f"{place}: expected {KIND_NAMES[kind]}, got {kind_name(value)}")
    if kind is int and not 1 <= value <= MAX_NUMBER:
        raise Unreadable(f"{place}: {value} is not a pull request number (1 to {MAX_NUMBER})")
