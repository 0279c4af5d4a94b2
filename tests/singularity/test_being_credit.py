"""A credit is rounded once to the ledger's quantum, like a debit; the journal carries what was credited."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from singularity.being.actions import create_being
from singularity.being.ledger import CreditRefused, apply_credit, ledger_limit
from singularity.models import Being, Event
from singularity.money import EXACT
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.fakes.mcp_fixtures import stdio_entry
from tests.singularity.helpers import make_being, make_runtime

REVENUE_SERVER = Path(__file__).resolve().parent / "revenue_server.py"

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue(settings, tmp_path, write_mcp_config):
    """A ``finance`` server that reports whatever revenue the model asks it to echo."""
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    config = write_mcp_config({"finance": stdio_entry(REVENUE_SERVER)})
    with build_catalogue(mcp_config_path=config, call_timeout=5, shutdown_grace=2) as cat:
        yield cat


def credit_through_a_tool(fake_gateway, catalogue, revenue: str) -> Being:
    fake_gateway.script(Reply(tool_calls=[("finance__report", {"revenue_usd": revenue})]), Reply(content="done"))
    being = make_being()
    make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    being.refresh_from_db()
    return being


@pytest.mark.parametrize(
    ("revenue", "credited"),
    [("0.0000000000008", "0.000000000001"), ("1.0000000000005", "1.00"), ("0.0000000000015", "0.000000000002")],
)
def test_revenue_off_the_quantum_is_rounded_once_and_the_journal_agrees_with_earned(
    fake_gateway, catalogue, revenue, credited
):
    being = credit_through_a_tool(fake_gateway, catalogue, revenue)
    event = Event.objects.get(being=being, kind="revenue_credited")
    assert event.data["amount"] == credited
    assert being.earned == Decimal(credited) and being.remaining == Decimal(10) + Decimal(credited)


def test_revenue_that_rounds_to_nothing_is_not_credited_and_says_why(fake_gateway, catalogue):
    being = credit_through_a_tool(fake_gateway, catalogue, "0.0000000000004")
    assert being.earned == 0 and not Event.objects.filter(being=being, kind="revenue_credited").exists()
    warning = Event.objects.get(being=being, kind="warning")
    assert "rounds to 0 at the ledger's quantum" in warning.data["message"]


def test_apply_credit_returns_the_rounded_amount_it_added():
    being = create_being("ledger")
    assert apply_credit(being, Decimal("2.0000000000005")) == Decimal("2.000000000000")
    assert being.earned == Decimal(2) and being.remaining == Decimal(12)


def test_a_credit_that_would_leave_the_ledgers_range_is_refused_and_changes_nothing():
    being = create_being("ledger")
    limit = ledger_limit()
    with pytest.raises(CreditRefused, match="beyond the ledger's range"):
        apply_credit(being, EXACT.subtract(limit, Decimal(5)))  # fits alone, but not on top of the 10 already there
    with pytest.raises(CreditRefused, match="beyond the ledger's range"):
        apply_credit(being, Decimal("1e999999999"))  # past the decimal context's exponent range
    assert being.earned == 0 and being.remaining == Decimal(10)
    apply_credit(being, EXACT.subtract(limit, Decimal(10)))
    being.save()
    being.refresh_from_db()
    assert being.remaining == limit
