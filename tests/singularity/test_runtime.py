"""The cycle's anatomy and the ledger (seeds 000 and 001), run in-process against a loopback gateway."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from singularity.being.runtime import ROUND_LIMIT_WARNING, Prices
from singularity.models import TOKENS_MAX, Being, Cycle, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import make_being, make_runtime

pytestmark = pytest.mark.django_db

REMEMBER = ("self__remember", {"key": "k", "value": "v"})


def usage(prompt: int, completion: int, total: int | None = None) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion if total is None else total,
    }


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


def kinds(being: Being) -> list[str]:
    return list(Event.objects.filter(being=being).order_by("seq").values_list("kind", flat=True))


def test_a_plain_reply_completes_the_cycle_with_it_as_final_content(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="I rest.", usage=usage(10, 2)))
    being = make_being()
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    assert report.status == "completed"
    assert report.final_content == "I rest."
    assert report.cycle == 1
    assert kinds(being) == ["cycle_started", "model_completed", "cost_debited"]
    assert Cycle.objects.get(being=being, number=1).status == "completed"


def test_the_reports_actions_are_the_tool_names_invoked_this_cycle_in_order(fake_gateway, catalogue):
    fake_gateway.script(
        Reply(tool_calls=[REMEMBER, ("self__recall", {"key": "k"})]),
        Reply(tool_calls=[("self__recall", {"key": "missing"})]),
        Reply(content="done"),
    )
    report = make_runtime(make_being(), fake_gateway.gateway(), catalogue).run_cycle()
    assert report.actions == ["self__remember", "self__recall", "self__recall"]  # a failed call is invoked too
    assert report.as_json()["actions"] == ["self__remember", "self__recall", "self__recall"]


def test_the_solvency_gate_refuses_a_cycle_at_zero_balance(fake_gateway, catalogue):
    being = make_being(starting="0")
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    assert report.status == "budget_exhausted"
    assert fake_gateway.requests == []
    assert "cycle_started" not in kinds(being)
    being.refresh_from_db()
    assert being.status == Being.Status.EXHAUSTED
    assert being.cycle == 0


def test_solvency_is_rechecked_before_every_round(fake_gateway, catalogue):
    # Round 1 costs exactly the whole balance and asks for a tool: no second call is made.
    fake_gateway.script(Reply(tool_calls=[REMEMBER], usage=usage(1_000_000, 0)))
    being = make_being(starting="2")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(2), Decimal(0), Decimal(0)))
    report = runtime.run_cycle()
    assert len(fake_gateway.requests) == 1
    assert report.status == "budget_exhausted"
    assert report.balance == Decimal(0)
    being.refresh_from_db()
    assert being.status == Being.Status.EXHAUSTED


def test_the_framing_message_carries_the_numbers_and_the_last_ten_actions(fake_gateway, catalogue):
    being = make_being(starting="12.5")
    being.recent_actions = [f"t{i}:success" for i in range(12)]
    being.save()
    fake_gateway.script(Reply(content="ok", usage=usage(1, 1)))
    make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    framing = fake_gateway.requests[0].json["messages"][1]
    assert framing["role"] == "user"
    text = framing["content"]
    assert "Begin autonomous cycle 1." in text
    assert "Balance: 12.50 USD" in text
    assert "Earned: 0.00 USD" in text
    assert "Net profit: 0.00 USD" in text
    assert f"Current model: {being.model}" in text
    assert "t0:success" not in text and "t1:success" not in text
    assert all(f"t{i}:success" in text for i in range(2, 12))
    assert "plain response" in text and "ends only this cycle" in text


def test_the_stimulus_is_shown_on_cycle_one_only(fake_gateway, catalogue):
    being = make_being(stimulus="a market opened")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
    fake_gateway.script(Reply(content="one", usage=usage(1, 1)), Reply(content="two", usage=usage(1, 1)))
    runtime.run_cycle()
    runtime.run_cycle()
    first, second = (r.json["messages"][1]["content"] for r in fake_gateway.requests)
    assert "External observation: a market opened" in first
    assert "a market opened" not in second
    assert "Begin autonomous cycle 2." in second


@pytest.mark.parametrize("limit", [None, 3])
def test_rounds_stop_at_the_limit_with_a_warning(fake_gateway, catalogue, settings, limit):
    if limit:
        settings.SINGULARITY_MAX_TOOL_ROUNDS = limit
    fake_gateway.handler = lambda request, headers: Reply(tool_calls=[REMEMBER], usage=usage(3, 1))
    being = make_being()
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    expected = limit or 8
    assert len(fake_gateway.requests) == expected
    assert report.status == "tool_round_limit"
    warning = Event.objects.get(being=being, kind="warning")
    assert warning.data["message"] == ROUND_LIMIT_WARNING == "maximum tool rounds reached"
    assert Event.objects.filter(being=being, kind="cost_debited").count() == expected


def test_every_round_sends_the_full_tool_catalogue_and_rebuilt_mind(fake_gateway, catalogue):
    fake_gateway.script(
        Reply(tool_calls=[("self__add_rule", {"rule": "never gamble"})], usage=usage(1, 1)),
        Reply(content="done", usage=usage(1, 1)),
    )
    being = make_being()
    make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    first, second = fake_gateway.requests
    names = {t["function"]["name"] for t in first.json["tools"]}
    assert {"self__remember", "self__add_rule", "self__write_file"} <= names
    assert second.json["tools"] == first.json["tools"]
    assert "never gamble" not in first.json["messages"][0]["content"]
    assert "never gamble" in second.json["messages"][0]["content"]


def test_tool_calls_run_in_order_and_their_outcomes_reach_the_model(fake_gateway, catalogue):
    fake_gateway.script(
        Reply(
            tool_calls=[
                ("self__remember", {"key": "a", "value": "1"}),
                ("nope__missing", {}),
                ("self__recall", {"key": "a"}),
            ],
            usage=usage(5, 5),
        ),
        Reply(content="fine", usage=usage(5, 5)),
    )
    being = make_being()
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    assert report.actions == ["self__remember", "nope__missing", "self__recall"]
    finished = Event.objects.filter(being=being, kind="tool_finished").order_by("seq")
    assert [e.data["tool"] for e in finished] == ["self__remember", "nope__missing", "self__recall"]
    assert finished[1].data["error"].startswith("unknown_tool")
    tool_messages = [m for m in fake_gateway.requests[1].json["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 3
    assert json.loads(tool_messages[1]["content"])["status"] == "failed"
    being.refresh_from_db()
    assert being.memories == {"a": "1"}
    assert being.recent_actions[-3:] == ["self__remember:success", "nope__missing:failed", "self__recall:success"]


def test_the_debit_follows_the_seed_formula_exactly(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="x", usage=usage(1000, 500)))
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(3), Decimal(15), Decimal(0)))
    runtime.run_cycle()
    debit = Event.objects.get(being=being, kind="cost_debited")
    assert debit.data["amount"] == "0.0105"
    being.refresh_from_db()
    assert being.api_spent == Decimal("0.0105")
    assert being.remaining == Decimal("9.9895")
    assert being.total_tokens == 1500


def test_money_stays_exact_where_floats_would_drift(fake_gateway, catalogue):
    # Three debits of 0.1 µ$-priced tokens: float arithmetic gives 0.30000000000000004.
    fake_gateway.script(
        *[Reply(tool_calls=[REMEMBER], usage=usage(1, 0)) for _ in range(2)], Reply(content="x", usage=usage(1, 0))
    )
    being = make_being(starting="0.3")
    runtime = make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal("100000"), Decimal(0), Decimal(0))
    )
    runtime.run_cycle()
    being.refresh_from_db()
    assert being.api_spent == Decimal("0.3")
    assert being.remaining == Decimal("0")
    assert str(being.remaining.normalize()) in ("0", "0E-12")


def test_instance_time_is_priced_per_hour_of_call_wall_time(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="slow", usage=usage(0, 0), delay_s=0.05))
    being = make_being()
    runtime = make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(0), Decimal(0), Decimal("3.6"))
    )
    runtime.run_cycle()
    completed = Event.objects.get(being=being, kind="model_completed")
    elapsed = completed.data["elapsed_ns"]
    assert elapsed >= 50_000_000
    debit = Event.objects.get(being=being, kind="cost_debited")
    assert Decimal(debit.data["instance"]) == Decimal(elapsed) * Decimal("1e-12")
    being.refresh_from_db()
    assert being.instance_spent == Decimal(elapsed) * Decimal("1e-12")
    assert being.net_profit == -being.instance_spent


def test_with_default_prices_a_completion_debits_nothing(fake_gateway, catalogue, settings):
    fake_gateway.script(Reply(content="free", usage=usage(500, 500)))
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices.from_settings())
    runtime.run_cycle()
    being.refresh_from_db()
    assert being.remaining == Decimal(10)
    assert Event.objects.get(being=being, kind="cost_debited").data["amount"] == "0.00"


def test_each_completion_is_debited_once_and_journaled_as_a_pair(fake_gateway, catalogue):
    fake_gateway.script(
        Reply(tool_calls=[REMEMBER], usage=usage(100, 10)),
        Reply(tool_calls=[REMEMBER], usage=usage(200, 20)),
        Reply(content="end", usage=usage(300, 30)),
    )
    being = make_being()
    make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(1), Decimal(2), Decimal(0))
    ).run_cycle()
    sequence = [k for k in kinds(being) if k in ("model_completed", "cost_debited")]
    assert sequence == ["model_completed", "cost_debited"] * 3
    debits = [Decimal(e.data["amount"]) for e in Event.objects.filter(being=being, kind="cost_debited")]
    being.refresh_from_db()
    assert sum(debits) == being.starting - being.remaining == Decimal("0.00072")


def test_a_usage_total_mismatch_is_refused_and_nothing_is_debited(fake_gateway, catalogue):
    from singularity.errors import UpstreamError

    fake_gateway.script(Reply(content="x", usage=usage(10, 5, total=16)))
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(1), Decimal(1), Decimal(1)))
    with pytest.raises(UpstreamError, match="usage total does not match prompt plus completion") as info:
        runtime.run_cycle()
    assert info.value.permanent
    being.refresh_from_db()
    assert being.remaining == Decimal(10) and being.total_tokens == 0
    assert not Event.objects.filter(being=being, kind="cost_debited").exists()
    assert Cycle.objects.get(being=being).status == "failed"


def test_a_zero_usage_total_is_accepted(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="x", usage=usage(10, 5, total=0)))
    being = make_being()
    make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(1000000), Decimal(0), Decimal(0))
    ).run_cycle()
    being.refresh_from_db()
    assert being.remaining == Decimal(0)
    assert being.total_tokens == 15


def test_total_tokens_saturate_instead_of_overflowing(fake_gateway, catalogue):
    being = make_being()
    Being.objects.filter(pk=being.pk).update(total_tokens=TOKENS_MAX - 5)
    being.refresh_from_db()
    fake_gateway.script(Reply(content="x", usage=usage(100, 100)))
    report = make_runtime(being, fake_gateway.gateway(), catalogue).run_cycle()
    being.refresh_from_db()
    assert being.total_tokens == TOKENS_MAX == report.total_tokens


def test_net_profit_is_derived_and_the_report_carries_the_headline_numbers(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="x", usage=usage(1000, 1000)))
    being = make_being()
    report = make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(1), Decimal(1), Decimal(0))
    ).run_cycle()
    doc = report.as_json()
    assert set(doc) == {
        "cycle",
        "status",
        "final_content",
        "balance_usd",
        "earned_usd",
        "net_profit_usd",
        "total_tokens",
        "actions",
    }
    assert doc["balance_usd"] == "9.998"
    assert doc["net_profit_usd"] == "-0.002"
    assert doc["earned_usd"] == "0.00"
    assert doc["total_tokens"] == 2000
    assert isinstance(doc["balance_usd"], str)


def test_an_absurd_usage_block_fails_the_cycle_as_upstream_and_records_what_the_call_cost(fake_gateway, catalogue):
    from singularity.errors import UpstreamError

    fake_gateway.script(Reply(content="x", usage=usage(10**30, 5)))
    being = make_being()
    runtime = make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(1), Decimal(1), Decimal(3600))
    )
    with pytest.raises(UpstreamError, match="usage prompt_tokens 1000000000000000000000000000000 is absurd") as info:
        runtime.run_cycle()
    assert info.value.permanent and info.value.exit_code == 3
    being.refresh_from_db()
    assert being.remaining == Decimal(10) and being.total_tokens == 0
    assert not Event.objects.filter(being=being, kind="cost_debited").exists()
    warning = Event.objects.get(being=being, kind="warning").data
    assert warning["usage"] == usage(10**30, 5)
    assert warning["elapsed_ns"] > 0
    # The call's wall time at 3,600 USD an hour is a dollar a second: recorded, not debited (DESIGN decision 2).
    assert Decimal(warning["instance_usd"]) == Decimal(warning["elapsed_ns"]) / Decimal(10**9)
    assert warning["debited"] == "0.00"
    assert Cycle.objects.get(being=being).status == "failed"
