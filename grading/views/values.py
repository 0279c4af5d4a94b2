"""Values as people read them: a metric's number in its unit or on its scale, and a run id read from text."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from grading.people import rubric_words
from grading.ratings import on_scale, scale_of
from singularity.templatetags.singularity_tags import money


def _plain(value: Any) -> str:
    """Decimal text of a number without exponent or trailing zeros."""
    number = _decimal(value)
    if number is None:
        return ""
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "") else text


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    except ArithmeticError:
        return None


def rated_on_scale(spec: dict[str, Any], normalized: Any) -> str:
    """Return a 0..1 value on the metric's own scale with its rubric words: "4 · Good"; "—" when absent."""
    if _decimal(normalized) is None:
        return "—"
    shown = on_scale(spec, float(normalized))
    assert shown is not None
    words = rubric_words(scale_of(spec), shown)
    return f"{_plain(shown)} · {words}" if words else _plain(shown)


def show_metric(spec: dict[str, Any], value: Any) -> str:
    """Return a metric's value in its unit: money as $, ms as seconds, a rated metric on its scale; "—" when absent."""
    number = _decimal(value)
    if number is None:
        return "—"
    unit = spec.get("unit")
    if unit == "usd":
        return money(number)
    if unit == "ms":
        return f"{_plain((number / 1000).quantize(Decimal('0.001')))} s"
    if spec.get("kind") in ("judged", "reported") and (spec.get("scale") or spec.get("human")):
        return rated_on_scale(spec, value)
    if unit == "count":
        return _plain(number)
    return _plain(number.quantize(Decimal("0.0001")) if number != number.to_integral_value() else number)


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
