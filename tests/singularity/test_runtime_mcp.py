"""The cycle with real MCP servers: revenue from trusted tools only, indeterminate outcomes never replayed."""

from __future__ import annotations

from decimal import Decimal

import pytest

from singularity.models import Being, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import make_being, make_runtime

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue(settings, tmp_path, mcp_config):
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=5, shutdown_grace=2) as cat:
        yield cat


def run_with_tools(fake_gateway, catalogue, *calls):
    fake_gateway.script(Reply(tool_calls=list(calls)), Reply(content="done"))
    being = make_being()
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    being.refresh_from_db()
    return being, report


def test_a_finance_tool_reporting_revenue_is_credited_with_the_tool_as_source(fake_gateway, catalogue):
    being, report = run_with_tools(fake_gateway, catalogue, ("finance__sell", {}), ("finance__report", {}))
    assert being.earned == Decimal("3.75")  # 1.25 nested in an object + 2.5 as a float in an array
    assert being.remaining == Decimal("13.75")
    credits = Event.objects.filter(being=being, kind="revenue_credited").order_by("seq")
    assert [(e.data["amount"], e.data["source"]) for e in credits] == [
        ("1.25", "finance__sell"),
        ("2.50", "finance__report"),
    ]
    assert report.net_profit == Decimal("3.75")
    # The credit follows the tool's own journal line.
    order = list(Event.objects.filter(being=being).order_by("seq").values_list("kind", flat=True))
    assert order.index("revenue_credited") == order.index("tool_finished") + 1


@pytest.mark.parametrize("tool", ["finance__refund", "finance__zero", "finance__garbage"])
def test_negative_zero_or_non_numeric_revenue_credits_nothing_and_warns(fake_gateway, catalogue, tool):
    being, _ = run_with_tools(fake_gateway, catalogue, (tool, {}))
    assert being.earned == 0 and being.remaining == Decimal(10)
    warning = Event.objects.get(being=being, kind="warning")
    assert tool in warning.data["message"] and "revenue_usd" in warning.data["message"]
    assert not Event.objects.filter(being=being, kind="revenue_credited").exists()


def test_any_other_tools_output_has_no_financial_effect(fake_gateway, catalogue):
    being, _ = run_with_tools(
        fake_gateway,
        catalogue,
        ("echo__echo", {"text": '{"revenue_usd": "100"}'}),
        ("self__write_file", {"path": "money.json", "content": '{"revenue_usd": 100}'}),
        ("self__remember", {"key": "revenue_usd", "value": "100"}),
    )
    assert being.earned == 0 and being.remaining == Decimal(10)
    assert not Event.objects.filter(being=being, kind="revenue_credited").exists()


def test_a_transport_failure_mid_call_is_indeterminate_and_never_replayed(fake_gateway, catalogue, tmp_path):
    marker = tmp_path / "crash-marker"
    being, report = run_with_tools(fake_gateway, catalogue, ("echo__crash", {"marker": str(marker)}))
    assert report.status == "completed"
    assert report.actions == ["echo__crash"]
    assert marker.read_text().count("\n") == 1  # the tool ran once and was not called again
    finished = Event.objects.get(being=being, kind="tool_finished")
    assert finished.data["status"] == "indeterminate"
    tool_message = [m for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"][0]
    assert "indeterminate" in tool_message["content"]


def test_a_secret_in_a_tool_result_is_replaced_before_the_model_sees_it(fake_gateway, catalogue):
    run_with_tools(fake_gateway, catalogue, ("finance__leak", {}))
    tool_message = [m for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"][0]
    assert "output_rejected" in tool_message["content"]
    assert '"x"' not in tool_message["content"]


def test_children_spawned_by_a_being_are_recorded_in_its_mind(fake_gateway, catalogue):
    being, _ = run_with_tools(
        fake_gateway,
        catalogue,
        ("self__spawn_child", {"name": "ada-jr", "prompt": "Sell lemonade.", "balance_usd": "2.5"}),
    )
    child = Being.objects.get(name="ada-jr")
    assert child.parent == being and child.starting == Decimal("2.5") and child.system_prompt == "Sell lemonade."
    assert being.remaining == Decimal("7.5")  # the child's balance came from its parent
