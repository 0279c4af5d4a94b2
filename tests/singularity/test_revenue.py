"""Revenue is credited only from trusted evidence (seed 001, DESIGN decision 1)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from singularity.being.actions import create_being
from singularity.being.ledger import apply_credit
from singularity.being.revenue import find_revenue
from singularity.errors import StateError


def test_only_finance_and_trading_tools_can_report_revenue():
    assert find_revenue("shop__sell", {"revenue_usd": "5"}) is None
    assert find_revenue("self__write_file", {"revenue_usd": "100"}) is None
    assert find_revenue("finance__sell", {"revenue_usd": "5"}).amount == Decimal(5)
    assert find_revenue("trading__close", {"realized_profit_usd": 2}).amount == Decimal(2)


def test_the_key_is_found_recursively_through_objects_and_arrays():
    finding = find_revenue("finance__t", {"a": [{"b": 1}, {"realized_profit_usd": "1.25"}]})
    assert finding.amount == Decimal("1.25")
    assert finding.key == "realized_profit_usd"


def test_a_float_is_credited_through_its_decimal_text():
    assert find_revenue("finance__t", {"revenue_usd": 0.1}).amount == Decimal("0.1")


def test_the_first_value_found_decides_depth_first_in_document_order():
    result = {"first": {"revenue_usd": "-1"}, "second": {"revenue_usd": "5"}}
    finding = find_revenue("finance__t", result)
    assert finding.amount is None
    assert "not positive" in finding.problem


@pytest.mark.parametrize("value", [0, "0", -3, "-3"])
def test_zero_or_negative_revenue_is_not_credited(value):
    finding = find_revenue("finance__t", {"revenue_usd": value})
    assert finding.amount is None and "revenue_usd" in finding.problem


@pytest.mark.parametrize("value", ["lots", None, True, {"x": 1}])
def test_non_numeric_revenue_is_not_credited_and_says_why(value):
    finding = find_revenue("finance__t", {"revenue_usd": value})
    assert finding.amount is None
    assert "finance__t: revenue_usd" in finding.problem


def test_no_revenue_key_means_no_finding():
    assert find_revenue("finance__t", {"balance_usd": "5"}) is None
    assert find_revenue("finance__t", "revenue_usd 5") is None


@pytest.mark.django_db
def test_a_negative_credit_is_a_hard_state_error_and_changes_nothing():
    being = create_being("ledger")
    with pytest.raises(StateError, match="revenue must be positive"):
        apply_credit(being, Decimal(-1))
    assert being.earned == 0 and being.remaining == Decimal(10)


# --- Money by JSON's grammar (issue 27): a string is credited only as JSON would write the number, no exponent ---


@pytest.mark.parametrize(
    ("text", "amount"), [("5", "5"), ("0.25", "0.25"), ("1000", "1000"), ("12.000000000001", "12.000000000001")]
)
def test_a_revenue_string_written_as_json_writes_a_number_is_credited(text, amount):
    assert find_revenue("finance__t", {"revenue_usd": text}).amount == Decimal(amount)


@pytest.mark.parametrize(
    "text", ["1_000", " 5 ", "5 ", "5e2", "5E2", "1e-3", "+5", "05", ".5", "5.", "0x10", "Infinity", "NaN", "5\n", "٥"]
)
def test_a_revenue_string_not_written_as_a_plain_json_number_is_not_credited_and_names_the_value(text):
    finding = find_revenue("finance__t", {"revenue_usd": text})
    assert finding.amount is None
    assert finding.problem == (
        f"finance__t: revenue_usd: {text!r} is not a decimal amount as JSON writes one "
        "(digits, an optional fraction, no exponent); nothing credited"
    )
