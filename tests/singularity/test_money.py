"""Money is exact on both databases: the column, parsing, and the debit formula."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import Sum

from singularity.being.actions import create_being
from singularity.errors import ConfigError
from singularity.models import Being, Cycle
from singularity.money import MoneyError, debit_for, money_str, parse_money


@pytest.mark.django_db
def test_the_money_column_keeps_twelve_decimals_exactly_past_fifteen_digits():
    amount = Decimal("1234567.000000000001")  # 19 significant digits: SQLite REAL would lose the last one
    being = create_being("exact", starting=amount)
    being.refresh_from_db()
    assert being.remaining == amount
    assert Being.objects.filter(remaining__gt=Decimal("1234567")).count() == 1
    assert Being.objects.filter(remaining__gt=amount).count() == 0


@pytest.mark.django_db
def test_sums_of_money_are_exact_in_the_database():
    being = create_being("summer")
    for number in range(1, 4):
        Cycle.objects.create(being=being, number=number, spent=Decimal("0.1"))
    total = Cycle.objects.filter(being=being).aggregate(total=Sum("spent"))["total"]
    assert total == Decimal("0.3")


def test_a_float_is_read_through_its_decimal_text():
    assert parse_money(0.1) == Decimal("0.1")
    assert parse_money("1.25") == Decimal("1.25")
    assert parse_money(3) == Decimal(3)


@pytest.mark.parametrize("bad", ["lots", "NaN", "Infinity", True, None, [1]])
def test_malformed_money_is_refused_naming_the_input(bad):
    with pytest.raises(MoneyError, match="price"):
        parse_money(bad, what="price")


def test_negative_money_is_refused_where_it_must_not_be():
    with pytest.raises(MoneyError, match="must not be negative"):
        parse_money("-1", what="starting", allow_negative=False)


@pytest.mark.django_db
def test_a_negative_starting_balance_is_refused_and_no_being_is_created():
    with pytest.raises(ConfigError, match="SINGULARITY_STARTING_BALANCE_USD"):
        create_being("broke", starting="-1")
    assert not Being.objects.filter(name="broke").exists()


def test_each_debit_part_is_rounded_once_half_even_to_the_quantum():
    debit = debit_for(
        prompt_tokens=1,
        completion_tokens=0,
        elapsed_ns=1,
        input_price_per_million=Decimal("0.0000025"),  # 2.5e-12 USD per token -> rounds to 2e-12 (half-even)
        output_price_per_million=Decimal(0),
        instance_usd_per_hour=Decimal("3.6"),  # 1 ns at 3.6 $/h = 1e-12 exactly
    )
    assert debit.api == Decimal("2E-12")
    assert debit.instance == Decimal("1E-12")
    assert debit.total == Decimal("3E-12")


def test_money_text_is_exact_without_exponents():
    assert money_str(Decimal("1E-12")) == "0.000000000001"
    assert money_str(Decimal("10")) == "10.00"
    assert money_str(Decimal("-0.002000")) == "-0.002"


def test_a_debits_total_is_exact_beyond_the_default_28_digits():
    from singularity.money import Debit

    debit = Debit(api=Decimal("123456789012345678.123456789012"), instance=Decimal("0.000000000001"))
    assert debit.total == Decimal("123456789012345678.123456789013")
