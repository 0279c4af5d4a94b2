"""Children: funded by a transfer from the parent's balance, journaled on both sides, capped in number."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from singularity.being import lease
from singularity.models import Being, Cycle, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import make_being, make_runtime, manage, manage_env

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


def spawn_call(name: str, **extra: str) -> tuple[str, dict[str, str]]:
    return ("self__spawn_child", {"name": name, "prompt": "Sell lemonade.", **extra})


def run_cycle(fake_gateway, catalogue, being: Being, *calls) -> list[tuple[str, str]]:
    """Run one cycle whose first reply makes ``calls``; return each call's (status, error or result)."""
    fake_gateway.script(Reply(tool_calls=list(calls)), Reply(content="done"))
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
    runtime.run_cycle()
    lease.release(being, runtime.owner)
    being.refresh_from_db()
    tool_messages = [m for m in Cycle.objects.get(being=being, number=being.cycle).messages if m["role"] == "tool"]
    shown = [json.loads(m["content"]) for m in tool_messages]
    return [(s["status"], s.get("error") or s["result"]) for s in shown]


def transfers(being: Being) -> list[dict]:
    return [e.data for e in Event.objects.filter(being=being, kind="transfer").order_by("seq")]


def test_a_child_is_funded_by_a_transfer_the_parent_names_journaled_on_both_sides(fake_gateway, catalogue):
    parent = make_being("ada")
    [(status, result)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("ada-jr", balance_usd="3.25"))
    assert status == "success" and result == {"child": "ada-jr", "starting_usd": "3.25", "remaining_usd": "6.75"}
    child = Being.objects.get(name="ada-jr")
    assert (child.parent, child.starting, child.remaining, child.status) == (
        parent,
        Decimal("3.25"),
        Decimal("3.25"),
        "created",
    )
    assert parent.remaining == Decimal("6.75") and parent.earned == 0
    assert transfers(parent) == [{"direction": "out", "to": "ada-jr", "amount": "3.25", "remaining": "6.75"}]
    assert transfers(child) == [{"direction": "in", "from": "ada", "amount": "3.25", "remaining": "3.25"}]
    # The lineage holds exactly what it started with.
    assert parent.remaining + child.remaining == parent.starting
    # The transfer comes before the tool's own line in the parent's journal, in one numbered sequence.
    kinds = list(Event.objects.filter(being=parent).order_by("seq").values_list("kind", flat=True))
    assert kinds.index("transfer") == kinds.index("tool_finished") - 1
    seqs = list(Event.objects.filter(being=parent).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize(
    ("amount", "problem"),
    [
        ("10.01", "cannot pay 10.01 USD: your balance is 10.00 USD"),
        ("0", "balance_usd: must be positive"),
        ("-1", "balance_usd: must be positive"),
        ("lots", "balance_usd: 'lots' is not a decimal amount"),
        ("0.0000000000001", "balance_usd: more than 12 decimal places"),
        (None, "balance_usd: required"),
    ],
)
def test_a_transfer_the_parent_cannot_make_is_refused_and_nothing_moves(fake_gateway, catalogue, amount, problem):
    parent = make_being("ada")
    extra = {} if amount is None else {"balance_usd": amount}
    [(status, error)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("ada-jr", **extra))
    assert status == "failed" and problem in error
    assert not Being.objects.filter(name="ada-jr").exists()
    assert parent.remaining == Decimal(10) and transfers(parent) == []


def test_the_whole_balance_may_be_given_and_the_parent_is_then_exhausted(fake_gateway, catalogue):
    parent = make_being("ada")
    [(status, _)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("ada-jr", balance_usd="10"))
    assert status == "success"
    assert parent.remaining == 0 and parent.status == "exhausted"
    assert len(fake_gateway.requests) == 1  # no round after the balance reached zero


def test_live_children_are_capped_and_an_exhausted_child_frees_its_place(fake_gateway, catalogue, settings):
    settings.SINGULARITY_MAX_LIVE_CHILDREN = 2
    parent = make_being("ada")
    results = run_cycle(
        fake_gateway,
        catalogue,
        parent,
        spawn_call("kid-1", balance_usd="1"),
        spawn_call("kid-2", balance_usd="1"),
        spawn_call("kid-3", balance_usd="1"),
    )
    assert [status for status, _ in results] == ["success", "success", "failed"]
    assert "already has 2 live children" in results[2][1] and "SINGULARITY_MAX_LIVE_CHILDREN" not in results[2][1]
    assert parent.remaining == Decimal(8) and not Being.objects.filter(name="kid-3").exists()

    Being.objects.filter(name="kid-1").update(remaining=0, status="exhausted")
    [(status, _)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("kid-3", balance_usd="1"))
    assert status == "success" and parent.remaining == Decimal(7)


def test_a_parent_that_lost_its_lease_spawns_nothing(fake_gateway, catalogue):
    parent = make_being("ada")
    fake_gateway.script(Reply(tool_calls=[spawn_call("ada-jr", balance_usd="1")]), Reply(content="done"))
    runtime = make_runtime(parent, fake_gateway.gateway(), catalogue)
    Being.objects.filter(pk=parent.pk).update(lease_owner="cli:elsewhere:1:dddd")
    with pytest.raises(lease.LeaseLost):
        runtime.run_cycle()
    assert not Being.objects.filter(name="ada-jr").exists()
    parent.refresh_from_db()
    assert parent.remaining == Decimal(10) and transfers(parent) == []


def test_with_fresh_balances_configured_a_child_starts_with_the_configured_amount(fake_gateway, catalogue, settings):
    settings.SINGULARITY_CHILD_FRESH_BALANCE = True
    settings.SINGULARITY_CHILD_STARTING_BALANCE_USD = Decimal("2.5")
    parent = make_being("ada")
    [(status, result)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("ada-jr"))
    assert status == "success" and result == {"child": "ada-jr", "starting_usd": "2.50", "remaining_usd": "10.00"}
    child = Being.objects.get(name="ada-jr")
    assert (child.starting, child.remaining) == (Decimal("2.5"), Decimal("2.5"))
    assert parent.remaining == Decimal(10) and transfers(parent) == [] and transfers(child) == []
    # Naming an amount here would pretend to pay: it is refused.
    [(status, error)] = run_cycle(fake_gateway, catalogue, parent, spawn_call("ada-jr2", balance_usd="1"))
    assert status == "failed" and "SINGULARITY_CHILD_FRESH_BALANCE" in error


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SINGULARITY_CHILD_FRESH_BALANCE", "sometimes", "SINGULARITY_CHILD_FRESH_BALANCE: expected a boolean"),
        ("SINGULARITY_MAX_LIVE_CHILDREN", "-1", "SINGULARITY_MAX_LIVE_CHILDREN: must be at least 0"),
        ("SINGULARITY_MAX_LIVE_CHILDREN", "many", "SINGULARITY_MAX_LIVE_CHILDREN: expected a whole number"),
    ],
)
def test_bad_child_settings_fail_at_boot_naming_the_variable(tmp_path, variable, value, message):
    proc = manage("being", "once", "--name", "ada", env=manage_env(**{variable: value}))
    assert proc.returncode == 2
    assert message in proc.stderr
