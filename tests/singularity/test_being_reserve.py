"""Reserve before, settle after (issue 34): the balance cannot cross zero, and a crash loses no cost."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from singularity.being import lease
from singularity.being.reserve import call_deadline_ns, prompt_tokens_bound
from singularity.being.runtime import Prices, Runtime
from singularity.demo_model import Reply, render_completion
from singularity.gateway import parse_completion
from singularity.models import Being, Event
from singularity.money import EXACT
from singularity.tools import build_catalogue
from singularity.tools.builtin import BUILTINS, Builtin
from singularity.tools.catalogue import ToolCatalogue
from tests.singularity.helpers import make_being, make_runtime

REMEMBER = ("self__remember", {"key": "k", "value": "v"})
PRICES = Prices(Decimal(3), Decimal(15), Decimal(2))  # $/M in, $/M out, $/h instance


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


def kinds(being: Being) -> list[str]:
    return list(Event.objects.filter(being=being).order_by("seq").values_list("kind", flat=True))


def assert_ledger_identity(being: Being) -> None:
    being.refresh_from_db()
    assert being.starting - being.remaining == EXACT.subtract(
        EXACT.add(being.api_spent, being.instance_spent), being.earned
    )


@pytest.mark.django_db
def test_a_call_is_reserved_before_and_settled_after_to_the_seeds_last_decimal(fake_gateway, catalogue):
    fake_gateway.script(
        Reply(tool_calls=[REMEMBER], usage=usage(1200, 300)), Reply(content="done", usage=usage(1500, 100))
    )
    being = make_being()
    runtime = make_runtime(
        being, fake_gateway.gateway(), catalogue, prices=Prices(Decimal(3), Decimal(15), Decimal(0)), reserve=True
    )
    runtime.run_cycle()
    assert kinds(being) == [
        "cycle_started",
        "cost_reserved",
        "model_completed",
        "cost_debited",
        "tool_finished",
        "cost_reserved",
        "model_completed",
        "cost_debited",
    ]
    being.refresh_from_db()
    # The seed's arithmetic, unchanged by the reservation: 0.0081 + 0.006.
    assert being.remaining == Decimal("9.9859")
    assert being.reserved_api == being.reserved_instance == 0
    reserved = Event.objects.filter(being=being, kind="cost_reserved").order_by("seq")
    debited = Event.objects.filter(being=being, kind="cost_debited").order_by("seq")
    for hold, debit in zip(reserved, debited, strict=True):
        assert debit.data["released"] == hold.data["amount"]
        assert Decimal(debit.data["amount"]) <= Decimal(hold.data["amount"])
    # The worst case: every byte of the request a token at $3/M, plus 4096 tokens at $15/M.
    first = fake_gateway.requests[0].json
    bound = prompt_tokens_bound(first["messages"], first["tools"])
    assert reserved[0].data["amount"] == str(EXACT.divide(Decimal(bound * 3 + 4096 * 15), Decimal(1_000_000)))
    assert all(request.json["max_tokens"] == 4096 for request in fake_gateway.requests)
    assert_ledger_identity(being)


@pytest.mark.django_db
def test_with_reservations_off_no_max_tokens_is_sent_and_the_journal_is_the_seeds(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="done", usage=usage(10, 2)))
    being = make_being()
    make_runtime(being, fake_gateway.gateway(), catalogue, reserve=False).run_cycle()
    assert "max_tokens" not in fake_gateway.requests[0].json
    assert kinds(being) == ["cycle_started", "model_completed", "cost_debited"]


@pytest.mark.django_db
def test_a_call_whose_worst_case_exceeds_the_balance_is_not_made(fake_gateway, catalogue):
    # 4096 output tokens at $15/M is $0.06144; the being has a cent.
    being = make_being(starting="0.01")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=PRICES, reserve=True)
    report = runtime.run_cycle()
    assert fake_gateway.requests == []
    assert report.status == "budget_exhausted"
    being.refresh_from_db()
    assert being.status == Being.Status.EXHAUSTED and being.remaining == Decimal("0.01")
    warning = Event.objects.get(being=being, kind="warning")
    assert "more than the balance of 0.01 USD" in warning.data["message"]


@pytest.mark.django_db
def test_a_failed_call_releases_its_reservation_and_debits_nothing(fake_gateway, catalogue):
    fake_gateway.script(Reply(status=503, error_message="overloaded"))
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=PRICES, reserve=True)
    with pytest.raises(Exception, match="overloaded"):
        runtime.run_cycle()
    being.refresh_from_db()
    assert being.remaining == Decimal(10) and being.reserved_api == being.reserved_instance == 0
    warning = Event.objects.get(being=being, kind="warning")
    assert Decimal(warning.data["released"]) > 0


@pytest.mark.django_db
def test_a_gateway_that_breaks_the_bounds_is_debited_in_full_and_warned_about(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="done", usage=usage(10, 100_000)))  # far past max_tokens
    being = make_being()
    make_runtime(being, fake_gateway.gateway(), catalogue, prices=PRICES, reserve=True, max_tokens=16).run_cycle()
    being.refresh_from_db()
    assert being.api_spent == Decimal("1.50003")
    assert "more than the" in Event.objects.filter(being=being, kind="warning").get().data["message"]
    assert_ledger_identity(being)


# --- the property: random prices, usages, balances and kill points ----------------------------------------------


class Killed(BaseException):
    """The process died here: nothing after this point is written (not an Exception, so nothing records it)."""


@dataclass
class BoundedGateway:
    """A gateway that keeps within the bounds a reservation assumes, drawing usage as fractions of them.

    Answers are rendered and parsed as on the wire. ``kill_during`` kills the
    process while the n-th call is in flight (after the gateway answered it).
    """

    draws: list[tuple[float, float, float, str]]
    deadline_ns: int
    kill_during: int | None = None
    answered: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def complete(self, *, model: str, messages: list[dict], tools: list[dict], max_tokens: int) -> Any:
        prompt_share, completion_share, time_share, action = self.draws[self.answered % len(self.draws)]
        calls = {"rest": [], "remember": [REMEMBER], "sell": [("finance__sell", {})]}[action]
        request = {"model": model, "messages": messages, "tools": tools, "max_tokens": max_tokens}
        self.requests.append(request)
        prompt = int(prompt_tokens_bound(messages, tools) * prompt_share)
        completion = int(max_tokens * completion_share)
        reply = Reply(
            content=None if calls else "rest",
            tool_calls=calls,
            usage=usage(prompt, completion),
        )
        body = json.dumps(render_completion(reply, request)).encode()
        self.answered += 1
        if self.answered == self.kill_during:
            raise Killed
        return parse_completion(body, requested_model=model, elapsed_ns=int(self.deadline_ns * time_share))


def killing_saves(runtime: Runtime, kill_at: int | None) -> None:
    """Make the runtime's ``kill_at``-th durable save die before it writes anything."""
    save = runtime.journal.save
    count = {"n": 0}

    def dying_save(**kwargs: Any) -> None:
        count["n"] += 1
        if count["n"] == kill_at:
            raise Killed
        save(**kwargs)

    runtime.journal.save = dying_save  # type: ignore[method-assign]


def resumed(being: Being, gateway: Any, catalogue: Any, prices: Prices, deadline_ns: int, max_tokens: int) -> Runtime:
    """A fresh process taking the dead one's being over, as ``being run --resume`` does."""
    Being.objects.filter(pk=being.pk).update(lease_owner="", lease_until=None)
    fresh = Being.objects.get(pk=being.pk)
    owner = lease.owner_id("test")
    assert lease.acquire(fresh, owner)
    return Runtime(
        fresh,
        gateway=gateway,
        catalogue=catalogue,
        owner=owner,
        prices=prices,
        reserve=True,
        deadline_ns=deadline_ns,
        max_tokens=max_tokens,
    )


money_prices = st.decimals(min_value=0, max_value=50, places=3)
share = st.floats(min_value=0, max_value=1)


@pytest.mark.django_db
@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # A positive input price: a zero reservation holds nothing, so a kill under it has nothing to settle.
    prices=st.builds(Prices, st.decimals(min_value="0.001", max_value=50, places=3), money_prices, money_prices),
    starting=st.decimals(min_value=0, max_value=2, places=6),
    draws=st.lists(
        st.tuples(share, share, share, st.sampled_from(["rest", "remember", "sell"])), min_size=1, max_size=6
    ),
    revenue=st.decimals(min_value="0.000001", max_value=1, places=6),
    max_tokens=st.integers(min_value=1, max_value=20_000),
    kill_save=st.one_of(st.none(), st.integers(min_value=1, max_value=25)),
    kill_call=st.one_of(st.none(), st.integers(min_value=1, max_value=6)),
)
def test_the_balance_never_goes_below_zero_and_the_ledger_identity_holds(
    prices, starting, draws, max_tokens, kill_save, kill_call, revenue
):
    sell = Builtin(
        "finance__sell",
        "Sell.",
        {"type": "object", "properties": {}, "required": []},
        lambda being, args: {"revenue_usd": str(revenue)},
    )
    catalogue = ToolCatalogue((*BUILTINS, sell))
    deadline_ns = call_deadline_ns(timeout_secs=2, retries=0)
    being = make_being(f"p{Being.objects.count()}", starting=str(starting))
    gateway = BoundedGateway(draws=draws, deadline_ns=deadline_ns, kill_during=kill_call)
    runtime = make_runtime(
        being, gateway, catalogue, prices=prices, reserve=True, max_tokens=max_tokens, deadline_ns=deadline_ns
    )
    killing_saves(runtime, kill_save)
    try:
        for _ in range(4):
            if runtime.run_cycle().status == "budget_exhausted":
                break
    except Killed:
        gateway.kill_during = None  # one death per run
        runtime = resumed(being, gateway, catalogue, prices, deadline_ns, max_tokens)
        runtime.run_cycle()
    being.refresh_from_db()
    assert being.remaining >= 0
    assert being.reserved_api == being.reserved_instance == 0
    assert_ledger_identity(being)
    # Every balance the journal ever recorded was at or above zero.
    assert all(Decimal(e.data["remaining"]) >= 0 for e in Event.objects.filter(being=being, kind="cost_debited"))
    # Every call the gateway answered is debited, or its reservation is.
    debits = Event.objects.filter(being=being, kind="cost_debited").count()
    assert debits >= gateway.answered
    assert debits == Event.objects.filter(being=being, kind="cost_reserved").count()


@pytest.mark.django_db(transaction=True)
def test_sigkill_at_random_points_loses_no_answered_call_and_never_reads_below_zero(fake_gateway, tmp_path):
    import os
    import random
    import signal
    import threading
    import time

    from tests.singularity.helpers import manage, manage_env, spawn

    chance = random.Random(34)
    lock = threading.Lock()

    def answer(request, headers):
        with lock:
            tool = chance.random() < 0.5
            delay = chance.random() * 0.08
        call = [("self__remember", {"key": "k", "value": str(time.monotonic())})] if tool else []
        return Reply(content=None if tool else "rest", tool_calls=call, usage=usage(300, 40), delay_s=delay)

    fake_gateway.handler = answer
    env = manage_env(
        BRAMA_BASE_URL=fake_gateway.base_url,
        BRAMA_MAX_RETRIES="0",
        BRAMA_TIMEOUT_SECS="1",
        BRAMA_MAX_TOKENS="64",
        BRAMA_INPUT_PRICE_USD_PER_MILLION="3",
        BRAMA_OUTPUT_PRICE_USD_PER_MILLION="15",
        SINGULARITY_INSTANCE_USD_PER_HOUR="0.36",
        SINGULARITY_STARTING_BALANCE_USD="1",
        SINGULARITY_COST_RESERVATION="true",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
    )
    kills = int(os.environ.get("BEING_SIGKILLS", "6"))  # the 30: BEING_SIGKILLS=30
    for attempt in range(kills):
        args = ["being", "run", "--name", "ada"] + (["--resume"] if attempt else [])
        seen = len(fake_gateway.requests)
        proc = spawn(*args, env=env)
        deadline = time.monotonic() + 60
        target = seen + chance.randint(1, 4)
        while len(fake_gateway.requests) < target and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(chance.random() * 0.12)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    fake_gateway.handler = lambda request, headers: Reply(content="rest", usage=usage(300, 40))
    settle = manage("being", "once", "--name", "ada", "--resume", env=env)
    assert settle.returncode == 0, settle.stderr

    being = Being.objects.get(name="ada")
    assert being.remaining >= 0 and being.reserved_api == being.reserved_instance == 0
    assert_ledger_identity(being)
    debits = Event.objects.filter(being=being, kind="cost_debited")
    assert all(Decimal(e.data["remaining"]) >= 0 for e in debits)
    settled = [e for e in debits if e.data.get("settled") == "reservation"]
    assert settled, "no kill landed between a reservation and its debit"
    # Every call the gateway saw is debited, or its reservation is: one debit for each reservation.
    assert debits.count() == Event.objects.filter(being=being, kind="cost_reserved").count()
    assert debits.count() >= len(fake_gateway.requests)


@pytest.mark.django_db
def test_the_sweep_settles_a_reservation_whose_process_died_and_leaves_a_live_one(fake_gateway, catalogue):
    from singularity.being.sweep import settle_abandoned_reservations

    dead, live = make_being("dead"), make_being("live")
    Being.objects.filter(pk__in=[dead.pk, live.pk]).update(
        reserved_api=Decimal("0.25"), reserved_instance=Decimal("0.5")
    )
    # "dead" was held by a process on this host that is gone; "live" by this very process.
    Being.objects.filter(pk=dead.pk).update(lease_owner=f"cli:{socket.gethostname()}:999999999:beef", lease_until=None)
    assert lease.acquire(live, lease.owner_id("test"))
    assert settle_abandoned_reservations() == ["dead"]
    dead.refresh_from_db()
    live.refresh_from_db()
    assert dead.remaining == Decimal("9.25") and dead.reserved_api == dead.reserved_instance == 0
    assert (dead.api_spent, dead.instance_spent) == (Decimal("0.25"), Decimal("0.5"))
    assert dead.lease_owner == ""
    settled = Event.objects.get(being=dead, kind="cost_debited")
    assert settled.data["settled"] == "reservation" and settled.data["amount"] == "0.75"
    assert live.reserved_instance == Decimal("0.5") and live.remaining == Decimal(10)
    assert_ledger_identity(dead)


@pytest.mark.django_db(transaction=True)
def test_being_once_with_a_balance_below_the_worst_case_makes_no_call_and_ends_exhausted(fake_gateway, tmp_path):
    from tests.singularity.helpers import manage, manage_env

    env = manage_env(
        BRAMA_BASE_URL=fake_gateway.base_url,
        BRAMA_MAX_RETRIES="0",
        BRAMA_OUTPUT_PRICE_USD_PER_MILLION="15",
        SINGULARITY_STARTING_BALANCE_USD="0.01",
        SINGULARITY_COST_RESERVATION="true",
        SINGULARITY_WORKSPACE=str(tmp_path / "ws"),
    )
    proc = manage("being", "once", "--name", "ada", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "budget_exhausted"
    assert fake_gateway.requests == []
    being = Being.objects.get(name="ada")
    assert being.status == "exhausted" and being.remaining == Decimal("0.01")
    assert Event.objects.get(being=being, kind="stopped").data["status"] == "exhausted"


def counted_saves(runtime: Runtime) -> list[int]:
    """Count the runtime's durable saves (each one database commit; the journal is the event table)."""
    count = [0]
    save = runtime.journal.save

    def counting(**kwargs: Any) -> None:
        count[0] += 1
        save(**kwargs)

    runtime.journal.save = counting  # type: ignore[method-assign]
    return count


@pytest.mark.django_db
def test_the_reservation_rides_in_the_save_before_its_call_costing_no_save_of_its_own(fake_gateway, catalogue):
    # Two tool rounds and a reply: with the reservation on, each call's worst case is held in the save that
    # came before it (the cycle's start, the round's last tool), so a round pays as many durable saves as off.
    saves = {}
    for reserve in (False, True):
        fake_gateway.script(
            Reply(tool_calls=[REMEMBER, REMEMBER], usage=usage(100, 10)),
            Reply(tool_calls=[REMEMBER], usage=usage(120, 10)),
            Reply(content="done", usage=usage(150, 5)),
        )
        being = make_being(name=f"saves-{reserve}")
        runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=PRICES, reserve=reserve)
        count = counted_saves(runtime)
        runtime.run_cycle()
        saves[reserve] = count[0]
        assert_ledger_identity(being)
    assert saves[True] == saves[False]
    held = list(Event.objects.filter(being__name="saves-True", kind="cost_reserved").order_by("seq"))
    assert [e.data["round"] for e in held] == [1, 2, 3]
    for request, hold in zip(fake_gateway.requests[-3:], held, strict=True):  # each held what its call could cost
        body = request.json
        assert hold.data["prompt_tokens_max"] >= prompt_tokens_bound(body["messages"], body["tools"])


@pytest.mark.django_db
def test_a_reservation_held_for_a_call_a_stop_prevented_is_released_not_debited(fake_gateway, catalogue):
    fake_gateway.script(Reply(tool_calls=[REMEMBER], usage=usage(100, 10)), Reply(content="never", usage=usage(1, 1)))
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=PRICES, reserve=True)
    calls = [0]

    def stop_after_the_tool() -> bool:
        calls[0] += 1
        return calls[0] > 1  # the first round runs; asked to stop before the second

    runtime.should_stop = stop_after_the_tool
    report = runtime.run_cycle()
    assert report.status == "interrupted" and len(fake_gateway.requests) == 1
    being.refresh_from_db()
    assert being.reserved_api == being.reserved_instance == 0
    (debit,) = Event.objects.filter(being=being, kind="cost_debited")
    assert being.remaining == Decimal(10) - Decimal(debit.data["amount"])  # only the call made is paid
    released = Event.objects.filter(being=being, kind="warning").order_by("-seq").first()
    assert "not made" in released.data["message"] and Decimal(released.data["released"]) > 0
    assert_ledger_identity(being)


def test_the_bound_is_the_same_with_the_tools_measured_once():
    """The tools' size measured once a cycle gives the very bound the whole request's JSON gives."""
    import json

    from singularity.being.reserve import json_bytes

    messages = [{"role": "system", "content": "Zażółć gęślą jaźń"}, {"role": "user", "content": "ok", "n": 3}]
    tools = [{"type": "function", "function": {"name": "self__echo", "parameters": {"type": "object"}}}]
    whole = len(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False).encode())
    assert prompt_tokens_bound(messages, tools) == whole
    assert prompt_tokens_bound(messages, tools, tools_bytes=json_bytes(tools)) == whole


@pytest.mark.django_db
def test_the_calls_check_reuses_the_worst_case_held_ahead_for_equal_messages_only(catalogue, monkeypatch):
    # The last tool's save measured the next call's messages; the call's own check, given equal messages, takes
    # that answer, and measures again whatever differs (here a system message rewritten in between).
    from singularity.being import runtime as runtime_module

    measured = []
    real = runtime_module.prompt_tokens_bound
    monkeypatch.setattr(runtime_module, "prompt_tokens_bound", lambda *a, **kw: measured.append(1) or real(*a, **kw))
    runtime = make_runtime(make_being(), None, catalogue, prices=PRICES, reserve=True)
    tools = catalogue.openai_tools()
    conversation = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]
    held = runtime._worst_case([{"role": "system", "content": "be"}, *conversation], tools)
    again = runtime._worst_case([{"role": "system", "content": "be"}, *conversation], tools)
    assert again == held and len(measured) == 1
    grown = runtime._worst_case([{"role": "system", "content": "be é"}, *conversation], tools)
    assert len(measured) == 2 and grown[0] == held[0] + len(" é".encode())
    assert grown[1].total > held[1].total
