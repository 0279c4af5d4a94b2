"""Reading a rating out of a person's words: "4 good pacing" rates 4 with the note "good pacing"."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hitl.models import Card

# A number, optionally written over its scale ("4/5"): the scale is read past, not taken as a rating.
_NUMBER = re.compile(r"(?<![\w.,])(-?\d+(?:[.,]\d+)?)(?:\s*/\s*\d+(?:[.,]\d+)?)?(?![\w])")
_EDGES = " \t\n,;:.-–—"


@dataclass(frozen=True)
class Reading:
    """What a reply says: the ``choice`` and ``values`` to answer with and a ``note``, or an ``error``."""

    choice: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    error: str = ""


def _note(text: str, spans: list[tuple[int, int]]) -> str:
    """Return ``text`` without ``spans``, whitespace collapsed and stray punctuation trimmed."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    return " ".join(" ".join(kept).split()).strip(_EDGES)


def _same_number(a: str, b: Any) -> bool:
    try:
        return Decimal(a.replace(",", ".")) == Decimal(str(b))
    except ArithmeticError:
        return False


def read_rating(card: Card, text: str) -> Reading:
    """Return the rating ``text`` gives on a rating ``card``: one button's value, or a number per form metric in order."""
    text = text.strip()
    if card.is_form:
        metrics = card.metrics
        found = list(_NUMBER.finditer(text))[: len(metrics)]
        if len(found) < len(metrics):
            names = ", ".join(str(m.get("label") or m["metric_id"]) for m in metrics)
            return Reading(error=f"I need {len(metrics)} number(s), in this order: {names}.")
        values = {
            str(m["metric_id"]): match.group(1).replace(",", ".") for m, match in zip(metrics, found, strict=True)
        }
        return Reading(choice=Card.RATE, values=values, note=_note(text, [m.span() for m in found]))
    for button in card.buttons:
        label = str(button.get("label", ""))
        if label and not label.isdigit() and text.startswith(label):
            return Reading(choice=str(button["value"]), note=_note(text, [(0, len(label))]))
    match = _NUMBER.search(text)
    allowed = ", ".join(str(o.get("label", o["value"])) for o in card.buttons)
    if match is None:
        return Reading(error=f"Start the reply with a rating: {allowed}.")
    option: dict[str, Any] | None = next((o for o in card.buttons if _same_number(match.group(1), o["value"])), None)
    if option is None:
        return Reading(error=f"{match.group(1)} is not one of: {allowed}.")
    return Reading(choice=str(option["value"]), note=_note(text, [match.span()]))
