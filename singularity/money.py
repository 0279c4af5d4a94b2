"""Exact money: parsing, the ledger quantum, and the debit formula.

Every amount is a ``Decimal``. A debit is computed exactly and each of its
two parts (api, instance) is rounded once, half-even, to ``QUANTUM``; every
sum after that is exact. JSON carries money as decimal strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation

#: The smallest amount the ledger records: one trillionth of a dollar.
QUANTUM = Decimal("1e-12")
DECIMAL_PLACES = 12
#: Wide enough that no intermediate product of the debit formula rounds.
EXACT = Context(prec=60, rounding=ROUND_HALF_EVEN)

NS_PER_HOUR = Decimal(3_600_000_000_000)
TOKENS_PER_MILLION = Decimal(1_000_000)


class MoneyError(ValueError):
    """A value that cannot be money: not a number, not finite, or negative where that is refused."""


def quantize(amount: Decimal) -> Decimal:
    return amount.quantize(QUANTUM, rounding=ROUND_HALF_EVEN, context=EXACT)


def parse_money(value: object, *, what: str = "amount", allow_negative: bool = True) -> Decimal:
    """Read money from a decimal string, an int or a float (through its shortest decimal text).

    ``0.1`` as a float reads as exactly ``Decimal("0.1")``. Booleans are refused.
    """
    if isinstance(value, bool):
        raise MoneyError(f"{what}: expected a decimal amount, got a boolean")
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        number = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            raise MoneyError(f"{what}: {value!r} is not a decimal amount") from None
    else:
        raise MoneyError(f"{what}: expected a decimal amount, got {type(value).__name__}")
    if not number.is_finite():
        raise MoneyError(f"{what}: {value!r} is not a finite amount")
    if not allow_negative and number < 0:
        raise MoneyError(f"{what}: must not be negative, got {value!r}")
    return number


#: Money written as text the way JSON writes a number, without the exponent: ``-?(0|[1-9]\d*)(\.\d+)?``, ASCII digits.
JSON_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")


def parse_json_money(value: object, *, what: str = "amount") -> Decimal:
    """Read money a tool reported: a JSON number (as ``parse_money``), or a string written as JSON writes one.

    A string is refused unless it is what ``JSON_DECIMAL`` matches, whole: ``Decimal()`` alone also reads
    ``"1_000"``, ``" 5 "`` and ``"5e2"`` (docs/decisions.md, issue 27: no exponent in money text).
    """
    if isinstance(value, str) and not JSON_DECIMAL.fullmatch(value):
        raise MoneyError(
            f"{what}: {value!r} is not a decimal amount as JSON writes one (digits, an optional fraction, no exponent)"
        )
    return parse_money(value, what=what)


def money_str(amount: Decimal) -> str:
    """The exact decimal text of an amount, no exponent, no trailing zeros past the cents."""
    text = format(amount.normalize(EXACT), "f")
    if "." not in text:
        return text + ".00"
    whole, frac = text.split(".")
    return f"{whole}.{frac.ljust(2, '0')}"


@dataclass(frozen=True)
class Debit:
    api: Decimal
    instance: Decimal

    @property
    def total(self) -> Decimal:
        return EXACT.add(self.api, self.instance)


def debit_for(
    *,
    prompt_tokens: int,
    completion_tokens: int,
    elapsed_ns: int,
    input_price_per_million: Decimal,
    output_price_per_million: Decimal,
    instance_usd_per_hour: Decimal,
) -> Debit:
    """The seed's formula: tokens at the per-million prices, wall time at the hourly rate."""
    api = EXACT.add(
        EXACT.divide(EXACT.multiply(Decimal(prompt_tokens), input_price_per_million), TOKENS_PER_MILLION),
        EXACT.divide(EXACT.multiply(Decimal(completion_tokens), output_price_per_million), TOKENS_PER_MILLION),
    )
    instance = EXACT.divide(EXACT.multiply(Decimal(elapsed_ns), instance_usd_per_hour), NS_PER_HOUR)
    return Debit(api=quantize(api), instance=quantize(instance))
