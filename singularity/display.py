"""How the site shows money, numbers and instants: one format for each, used by every page.

Numbers: at most three significant decimals ("0.667", "0.0412", "2.33", "112"),
never a raw float ("0.666666666667"); a share as a percentage ("67%").

Money: two decimals ("$9.98"), or two significant digits below a cent
("$0.0052") so a small cost never reads as "$0.00"; the exact ledger amount
goes in a title. Instants, one format on every page (issue 28): absolute in the
configured time zone, "2025-01-31 14:05 UTC", with the relative ("3 min ago")
and the seconds in its title (``instant_title``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.timezone import _datetime_ambiguous_or_imaginary as _ambiguous_or_imaginary

from singularity.money import EXACT, MoneyError, money_str, parse_money

CENT = Decimal("0.01")
#: Below a cent, this many significant digits are shown.
SMALL_DIGITS = 2
INSTANT_FORMAT = "Y-m-d H:i T"
#: The title of an instant: the same format with seconds.
INSTANT_TITLE_FORMAT = "Y-m-d H:i:s T"
#: Past this age (or this far ahead) a relative instant reads as the instant itself.
RELATIVE_LIMIT = timedelta(days=7)


def amount_of(value: Any) -> Decimal | None:
    """The Decimal for ``value`` (a Decimal, int, float or decimal string), or None when it is not money."""
    if value is None or value == "":
        return None
    try:
        return parse_money(value)
    except MoneyError:
        return None


def number_of(value: Any) -> Decimal | None:
    """The Decimal for a number (int, float, Decimal or numeric string), or None for anything else (bool too)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return Decimal(repr(value)) if value == value and value not in (float("inf"), float("-inf")) else None
    try:
        number = Decimal(str(value).strip())
    except (ArithmeticError, ValueError):
        return None
    return number if number.is_finite() else None


def number_text(value: Any) -> str:
    """Return a number as people read it: two places from 1 up, three significant digits below; "—" for none.

    0.666666666667 → "0.667", 0.0412345 → "0.0412", 2.3333 → "2.33", 112.0 → "112", -481 → "-481".
    Text that is not a number is returned unchanged.
    """
    number = number_of(value)
    if number is None:
        return "—" if value is None or value == "" else str(value)
    if number == 0:
        return "0"
    places = CENT if abs(number) >= 1 else Decimal(1).scaleb(number.adjusted() - 2)
    text = f"{number.quantize(places, rounding=ROUND_HALF_EVEN, context=EXACT):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def signed_number_text(value: Any) -> str:
    """``number_text`` with an explicit sign on a positive number ("+0.667"), for a movement or a gain."""
    number = number_of(value)
    text = number_text(value)
    return f"+{text}" if number is not None and number > 0 else text


def percent_text(value: Any) -> str:
    """Return a share (0..1) as a percentage: 0.6667 → "67%", 1 → "100%", 0.004 → "0.4%"; "—" for none."""
    number = number_of(value)
    if number is None:
        return "—" if value is None or value == "" else str(value)
    hundred = number * 100
    if hundred == 0 or abs(hundred) >= 1:
        return f"{hundred.quantize(Decimal(1), rounding=ROUND_HALF_EVEN, context=EXACT):f}%"
    return f"{number_text(hundred)}%"


#: One word per state of a graded run, on every page (Runs, a run, a cycle's check and watch, the PR comment):
#: a run the grade passed, one it did not, one with no verdict yet. "failed" is kept for a run that broke.
OUTCOME_WORDS = {True: "passed", False: "bad", None: "not graded"}
#: The badge's colour class of each.
OUTCOME_CLASSES = {True: "ok", False: "bad", None: ""}


def outcome_word(passed: bool | None) -> str:
    """The word for a graded run's outcome: "passed", "bad", or "not graded" (no verdict)."""
    return OUTCOME_WORDS[passed if isinstance(passed, bool) else None]


def usd_text(value: Any) -> str:
    """Return an amount as people read it: "$9.98", "-$0.25", "$1,234.50"; below a cent "$0.0052".

    Two decimals, half-even; a non-zero amount below a cent keeps (at most)
    two significant digits: "$0.0003", "$0.0049". None reads as "" and text that is not money is
    returned unchanged.
    """
    amount = amount_of(value)
    if amount is None:
        return "" if value is None else str(value)
    sign = "-" if amount < 0 else ""
    size = abs(amount)
    if size and size < CENT:
        quantum = Decimal(1).scaleb(size.adjusted() - SMALL_DIGITS + 1)
        shown = size.quantize(quantum, rounding=ROUND_HALF_EVEN, context=EXACT)
        if shown < CENT:
            return f"{sign}${format(shown.normalize(EXACT), 'f')}"
    shown = size.quantize(CENT, rounding=ROUND_HALF_EVEN, context=EXACT)
    if not shown:
        sign = ""
    return f"{sign}${shown:,.2f}"


def usd_exact(value: Any) -> str:
    """Return the exact ledger amount as "9.984300000001 USD" (for titles); "" when it is not money."""
    amount = amount_of(value)
    return "" if amount is None else f"{money_str(amount)} USD"


def usd_plain(value: Any) -> str:
    """Return the exact amount with a dollar sign and at least the cents: "$9.9843", "-$0.50", "$10.00".

    For plot ticks (round numbers, so short) and plot points (whose hover is their title).
    """
    amount = amount_of(value)
    if amount is None:
        return "" if value is None else str(value)
    sign = "-" if amount < 0 else ""
    return f"{sign}${money_str(abs(amount))}"


def _local(value: datetime) -> datetime:
    return timezone.localtime(value) if timezone.is_aware(value) else value


def instant_text(value: datetime | None, *, seconds: bool = False) -> str:
    """Return an instant in the configured time zone, "2025-01-31 14:05 UTC" (with seconds when asked); "" for None.

    What ``date_format`` gives for ``INSTANT_FORMAT`` (``INSTANT_TITLE_FORMAT``), written out: a page shows
    hundreds (a plot's hover a run), and Django's formatter parses the format again at each (~20 µs).
    """
    if value is None:
        return ""
    if not isinstance(value, datetime):
        return date_format(_local(value), INSTANT_TITLE_FORMAT if seconds else INSTANT_FORMAT)
    return _written(_local(value), seconds)


def _written(local: datetime, seconds: bool) -> str:
    """``instant_text`` of an instant already in the configured time zone (``_local``)."""
    # Django's "T": the zone's name, or nothing where the wall-clock time is ambiguous or skipped in it.
    zone = local.tzinfo if timezone.is_aware(local) else timezone.get_default_timezone()
    name = "" if _ambiguous_or_imaginary(local, zone) else str(zone.tzname(local))
    clock = (
        f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}" if seconds else f"{local.hour:02d}:{local.minute:02d}"
    )
    return f"{local.year:04d}-{local.month:02d}-{local.day:02d} {clock} {name}"


def ago_text(value: datetime | None, *, now: datetime | None = None) -> str:
    """Return how long ago (or how far ahead) an instant is: "just now", "45 s ago", "3 min ago", "in 2 h".

    Past a week either way, the instant itself (``instant_text``); "" for None.
    """
    if value is None:
        return ""
    delta = (now or timezone.now()) - value
    ahead = delta < timedelta(0)
    size = abs(delta)
    if size >= RELATIVE_LIMIT:
        return instant_text(value)
    seconds = int(size.total_seconds())
    if seconds < 10:
        return "just now"
    if seconds < 60:
        span = f"{seconds} s"
    elif seconds < 3600:
        span = f"{seconds // 60} min"
    elif seconds < 86400:
        span = f"{seconds // 3600} h"
    else:
        days = seconds // 86400
        span = f"{days} day{'s' if days != 1 else ''}"
    return f"in {span}" if ahead else f"{span} ago"


def instant_title(value: datetime | None, *, now: datetime | None = None) -> str:
    """The tooltip of a shown instant: how long ago (or ahead) and the instant to the second.

    "3 min ago · 2025-01-31 14:05:07 UTC"; past a week the relative is the instant itself, so just that.
    """
    if value is None:
        return ""
    exact = instant_text(value, seconds=True)
    relative = ago_text(value, now=now)
    return exact if relative == instant_text(value) else f"{relative} · {exact}"


def instant_parts(value: datetime, *, now: datetime | None = None) -> tuple[str, str, str]:
    """(``iso``, ``instant_title``, ``instant_text``) of ``value``: what a shown instant writes (the ``instant``
    filter), its zone's time worked out once instead of once a part (a page shows a hundred)."""
    if not isinstance(value, datetime):
        return iso(value), instant_title(value, now=now), instant_text(value)
    local = _local(value)
    text, exact = _written(local, False), _written(local, True)
    relative = ago_text(value, now=now)
    return local.isoformat(), exact if relative == text else f"{relative} · {exact}", text


def iso(value: datetime | None) -> str:
    """Return the instant as ISO 8601 for a ``<time datetime>`` attribute; "" for None."""
    return "" if value is None else _local(value).isoformat()
