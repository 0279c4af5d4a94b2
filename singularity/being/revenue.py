"""Revenue is credited only from trusted evidence (seed 001, DESIGN decision 1).

A credit needs all three: the tool that just returned is ``finance__*`` or
``trading__*``; its result holds a ``revenue_usd`` or ``realized_profit_usd``
key, found depth-first in document order; and that first value is a strictly
positive decimal (a string written as JSON writes a number, without an exponent —
``money.JSON_DECIMAL`` —, or a JSON number read through its decimal text).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from singularity.money import MoneyError, parse_json_money

TRUSTED_PREFIXES = ("finance__", "trading__")
REVENUE_KEYS = ("revenue_usd", "realized_profit_usd")

_MISSING = object()


@dataclass(frozen=True)
class RevenueFinding:
    """What the search found: a creditable ``amount``, or a ``problem`` explaining why nothing is credited."""

    key: str
    amount: Decimal | None
    problem: str = ""


def is_trusted(tool_name: str) -> bool:
    return tool_name.startswith(TRUSTED_PREFIXES)


def _first_revenue_value(value: Any) -> tuple[str, Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in REVENUE_KEYS:
                return key, item
            found = _first_revenue_value(item)
            if found[1] is not _MISSING:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _first_revenue_value(item)
            if found[1] is not _MISSING:
                return found
    return "", _MISSING


def find_revenue(tool_name: str, result: Any) -> RevenueFinding | None:
    """The revenue a tool result reports, or None when the tool is untrusted or reports none."""
    if not is_trusted(tool_name):
        return None
    key, value = _first_revenue_value(result)
    if value is _MISSING:
        return None
    try:
        amount = parse_json_money(value, what=f"{tool_name}: {key}")
    except MoneyError as exc:
        return RevenueFinding(key=key, amount=None, problem=f"{exc}; nothing credited")
    if amount <= 0:
        return RevenueFinding(
            key=key, amount=None, problem=f"{tool_name}: {key} {value!r} is not positive; nothing credited"
        )
    return RevenueFinding(key=key, amount=amount)
