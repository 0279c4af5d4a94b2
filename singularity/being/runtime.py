"""One cycle of the being, step by step as the seed's anatomy (seed 000).

Solvency gate, framing, up to ``max_rounds`` model rounds with every tool call
executed in order, the round limit. Each completion is debited exactly once,
in the same transaction that journals it; state is saved after every tool, so
a crash loses at most the round in flight.

With ``SINGULARITY_COST_RESERVATION`` each model call's worst case is
reserved first (``cost_reserved``, saved before the call), a call the
balance cannot cover is not made, and the debit releases it; a reservation
a crash left behind is debited in full when the being next runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from singularity.agent import COMPLETED, ROUND_LIMIT, AgentHooks, AgentLoop, CatalogueLike, GatewayLike, Prices
from singularity.being.framing import framing_message, system_message
from singularity.being.lease import LeaseLost
from singularity.being.ledger import CreditRefused, apply_credit, apply_debit
from singularity.being.model_choice import SWITCH_MODEL, switch_refusal
from singularity.being.reserve import call_deadline_ns, json_bytes, prompt_tokens_bound, reservation
from singularity.being.revenue import find_revenue
from singularity.being.storable import StorableGateway, storable, storable_outcome, storable_text
from singularity.being.store import JOURNAL_FIELDS, RUNTIME_FIELDS, Journal
from singularity.errors import UpstreamError
from singularity.models import RECENT_ACTIONS, Being, Cycle, Event
from singularity.money import EXACT, Debit, debit_for, money_str
from singularity.tools.outcome import FAILED, ToolOutcome

__all__ = ["ROUND_LIMIT_WARNING", "CatalogueLike", "CycleReport", "GatewayLike", "Prices", "Runtime"]

ROUND_LIMIT_WARNING = "maximum tool rounds reached"

#: What a reservation changes on the being: the amounts held and the journal's counter and head.
RESERVATION_FIELDS = ("reserved_api", "reserved_instance", *JOURNAL_FIELDS)
#: What a model round's debit changes on the being: the budget it spends, the reservation it releases, the journal.
DEBIT_FIELDS = ("remaining", "api_spent", "instance_spent", "total_tokens", *RESERVATION_FIELDS)

log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    cycle: int
    status: str
    final_content: str
    balance: Decimal
    earned: Decimal
    net_profit: Decimal
    total_tokens: int
    #: The tool names invoked this cycle, in order (the origin CLI's ``actions``).
    actions: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The origin CLI's once report; money as decimal strings."""
        return {
            "cycle": self.cycle,
            "status": self.status,
            "final_content": self.final_content,
            "balance_usd": money_str(self.balance),
            "earned_usd": money_str(self.earned),
            "net_profit_usd": money_str(self.net_profit),
            "total_tokens": self.total_tokens,
            "actions": self.actions,
        }


class Runtime:
    """Runs cycles of one being while ``owner`` holds its lease."""

    def __init__(
        self,
        being: Being,
        *,
        gateway: GatewayLike,
        catalogue: CatalogueLike,
        owner: str,
        max_rounds: int | None = None,
        prices: Prices | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        reserve: bool | None = None,
        max_tokens: int | None = None,
        deadline_ns: int | None = None,
    ) -> None:
        self.being = being
        self.gateway = gateway
        self.catalogue = catalogue
        self.owner = owner
        self.max_rounds = max_rounds or settings.SINGULARITY_MAX_TOOL_ROUNDS
        self.prices = prices or Prices.from_settings()
        self.should_stop = should_stop
        self.journal = Journal(being)
        #: Reserve each call's worst case first (the setting unless given); ``max_tokens`` is sent with the call.
        self.reserve = settings.SINGULARITY_COST_RESERVATION if reserve is None else reserve
        self.max_tokens = max_tokens or settings.BRAMA_MAX_TOKENS
        self.deadline_ns = call_deadline_ns() if deadline_ns is None else deadline_ns
        #: The current cycle's tools and the bytes of their JSON (``_bound``).
        self._sized_tools: tuple[list[dict], int] | None = None
        #: The last worst case computed: the tools and messages it was for, their bound and the reservation.
        self._worst: tuple[list[dict], list[dict[str, Any]], int, Debit] | None = None
        #: A cycle that failed before its failure could be recorded: (number, error), recorded first thing next cycle.
        self.unrecorded: tuple[int, Exception] | None = None

    # -- reporting ---------------------------------------------------------
    def _report(self, cycle: Cycle | None, status: str, actions: list[str]) -> CycleReport:
        being = self.being
        return CycleReport(
            cycle=being.cycle,
            status=status,
            final_content=cycle.final_content if cycle else "",
            balance=being.remaining,
            earned=being.earned,
            net_profit=being.net_profit,
            total_tokens=being.total_tokens,
            actions=actions,
        )

    def _mark_exhausted(self) -> None:
        if not Being.objects.filter(pk=self.being.pk, lease_owner=self.owner).update(status=Being.Status.EXHAUSTED):
            raise LeaseLost(self.being)
        self.being.status = Being.Status.EXHAUSTED

    def _finish(self, cycle: Cycle, status: str) -> None:
        released = self._release()
        if released is not None:  # held ahead for a call the cycle did not make (a stop, the round limit)
            message = (
                f"the next model call was not made ({status}); its reservation of {money_str(released)} USD is released"
            )
            self.journal.emit(Event.Kind.WARNING, {"message": message, "released": money_str(released)})
        cycle.status = status
        cycle.finished_at = timezone.now()
        cycle.balance_after = self.being.remaining
        self.journal.save(
            owner=self.owner,
            cycle=cycle,
            cycle_fields=("status", "finished_at", "balance_after", "final_content", "error"),
        )

    # -- the cycle ---------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        """Run one cycle.

        Raises UpstreamError for a gateway failure after recording the cycle as
        failed, and LeaseLost (nothing written) when another process took the
        being over. Any other error is recorded first — the round in flight
        dropped, the cycle ``failed``, a ``warning`` journaled — and raised
        again; when even that cannot be written (the database is away) it is
        recorded at the start of the next cycle.
        """
        if self.unrecorded is not None:
            self._record_failure()
        self._settle_interrupted()
        number = self.being.cycle + 1
        try:
            return self._run_cycle()
        except (UpstreamError, LeaseLost):
            self.journal.discard()
            raise
        except Exception as exc:
            self.unrecorded = (number, exc)
            try:
                self._record_failure()
            except DatabaseError as again:
                log.warning("being %s: cycle %d failed and cannot be recorded yet: %s", self.being.name, number, again)
            raise

    def _record_failure(self) -> None:
        """Forget the unsaved step, reload the being as stored, mark the cycle failed and journal a warning."""
        assert self.unrecorded is not None
        number, exc = self.unrecorded
        self.journal.discard()
        self.being.refresh_from_db(fields=list(RUNTIME_FIELDS))
        message = storable_text(f"cycle {number} failed: {type(exc).__name__}: {exc}")[:2000]
        self.journal.emit(Event.Kind.WARNING, {"message": message}, cycle=number)
        with transaction.atomic():
            self.journal.save(owner=self.owner)
            Cycle.objects.filter(being=self.being, number=number, status=Cycle.Status.RUNNING).update(
                status=Cycle.Status.FAILED, error=message, finished_at=timezone.now()
            )
        self.unrecorded = None

    def _run_cycle(self) -> CycleReport:
        being = self.being
        actions: list[str] = []
        if not being.solvent:
            self._mark_exhausted()
            return self._report(None, Cycle.Status.BUDGET_EXHAUSTED, actions)

        being.cycle += 1
        framing = framing_message(being, stimulus=being.stimulus)
        cycle = Cycle(being=being, number=being.cycle, started_at=timezone.now())
        self.journal.emit(Event.Kind.CYCLE_STARTED, {"balance": money_str(being.remaining), "model": being.model})
        # Dead MCP servers are restarted (with a backoff) before the model sees the catalogue; a down one is left out.
        revive = getattr(self.catalogue, "revive", None)
        for note in revive() if revive is not None else []:
            self.journal.emit(Event.Kind.WARNING, {"message": storable_text(note)[:2000]})
        tools = self.catalogue.openai_tools()
        hooks = _CycleHooks(self, cycle, actions, tools)
        loop = AgentLoop(
            gateway=StorableGateway(self.gateway),
            tools=tools,
            call_tool=self._call_tool,
            model=lambda: being.model,
            system=lambda: system_message(being),
            prices=self.prices,
            max_rounds=self.max_rounds,
            hooks=hooks,
            max_tokens=self.max_tokens if self.reserve else None,
        )
        hooks.next_messages = lambda: loop.messages([framing], cycle.messages)
        if self.max_rounds >= 1:
            self._hold_ahead(hooks.next_messages(), tools, 1)  # the first call's worst case rides in this save
        with transaction.atomic():
            self.journal.save(owner=self.owner, cycle=cycle)
            # A cycle a crashed process left running; its completions were debited and are never debited again.
            Cycle.objects.filter(being=being, status=Cycle.Status.RUNNING).exclude(pk=cycle.pk).update(
                status=Cycle.Status.INTERRUPTED, finished_at=timezone.now()
            )

        result = loop.run([framing], cycle.messages)
        if result.status == COMPLETED:
            cycle.final_content = result.final_content
            status = Cycle.Status.COMPLETED
        elif result.status == ROUND_LIMIT:
            self.journal.emit(Event.Kind.WARNING, {"message": ROUND_LIMIT_WARNING, "rounds": self.max_rounds})
            status = Cycle.Status.TOOL_ROUND_LIMIT
        else:
            status = result.status

        self._finish(cycle, status)
        return self._report(cycle, status, actions)

    # -- the being's side of each step, called by the agent loop's hooks ------
    def _before_round(self) -> str | None:
        if not self.being.solvent:
            self._mark_exhausted()
            return Cycle.Status.BUDGET_EXHAUSTED
        if self.should_stop():
            return Cycle.Status.INTERRUPTED
        return None

    def _call_tool(self, name: str, arguments: str | dict[str, Any]) -> Any:
        """Run one tool through the catalogue; a switch to a model the gateway does not serve is refused first."""
        if name == SWITCH_MODEL:
            refusal = switch_refusal(self.gateway, arguments)
            if refusal:
                return storable_outcome(ToolOutcome(name, FAILED, {"error": refusal}, None, error=refusal))
        return storable_outcome(self.catalogue.call(self.being, name, arguments))

    # -- the reservation ---------------------------------------------------
    def _hold_ahead(self, messages: list[dict[str, Any]], tools: list[dict], round_number: int) -> None:
        """Hold the next call's worst case now, to be written by the save about to happen (the cycle's start, the
        round's last tool): the call then needs no durable save of its own (``_reserve`` finds it held). A worst
        case the balance cannot cover is left to ``_reserve``, which refuses the call at its time."""
        if not self.reserve:
            return
        being = self.being
        bound, hold = self._worst_case(messages, tools)
        if hold.total > being.remaining or being.reserved_api or being.reserved_instance:
            return
        self._held(hold, bound, round_number)

    def _worst_case(self, messages: list[dict[str, Any]], tools: list[dict]) -> tuple[int, Debit]:
        """The prompt's token bound for ``messages`` and ``tools`` and the reservation it makes.

        The call's own check (``_reserve``) asks again for the messages the last tool's save held ahead for: equal
        messages (the same conversation's dicts, which the agent loop only appends to, and a system message that
        reads the same) have the same bound, so it is taken from the last answer instead of measured again.
        """
        last = self._worst
        if last is not None and last[0] is tools and last[1] == messages:
            return last[2], last[3]
        bound = self._bound(messages, tools)
        hold = reservation(self.prices, prompt_tokens=bound, max_tokens=self.max_tokens, deadline_ns=self.deadline_ns)
        self._worst = (tools, messages, bound, hold)
        return bound, hold

    def _bound(self, messages: list[dict[str, Any]], tools: list[dict]) -> int:
        """``prompt_tokens_bound`` with the tools' size measured once a cycle (the cycle's tools are one list that
        does not change while it runs; a different list is measured again)."""
        if self._sized_tools is None or self._sized_tools[0] is not tools:
            self._sized_tools = (tools, json_bytes(tools))
        return prompt_tokens_bound(messages, tools, tools_bytes=self._sized_tools[1])

    def _held(self, hold: Debit, bound: int, round_number: int) -> None:
        """Set ``hold`` on the being and journal it (``cost_reserved``); the caller saves."""
        being = self.being
        being.reserved_api, being.reserved_instance = hold.api, hold.instance
        self.journal.emit(
            Event.Kind.COST_RESERVED,
            {
                "round": round_number,
                "amount": money_str(hold.total),
                "api": money_str(hold.api),
                "instance": money_str(hold.instance),
                "prompt_tokens_max": bound,
                "max_tokens": self.max_tokens,
                "deadline_ns": self.deadline_ns,
                "remaining": money_str(being.remaining),
            },
        )

    def _reserve(
        self, cycle: Cycle, messages: list[dict[str, Any]], tools: list[dict], round_number: int
    ) -> str | None:
        """Hold the call's worst case against the balance, durably, or end the cycle when the balance cannot cover it.

        A hold already written for this call (``_hold_ahead``) that covers the messages as sent is kept: no save.
        """
        if not self.reserve:
            return None
        being = self.being
        bound, hold = self._worst_case(messages, tools)
        held = EXACT.add(being.reserved_api, being.reserved_instance)
        if held and held >= hold.total and being.reserved_api >= hold.api and being.reserved_instance >= hold.instance:
            return None  # held ahead, in the save before this call, and it covers it
        if held:
            self._release()  # held ahead for messages that grew since (the new hold replaces it in this save)
        if hold.total > being.remaining:
            message = (
                f"the next model call could cost up to {money_str(hold.total)} USD, more than the balance of "
                f"{money_str(being.remaining)} USD; not made"
            )
            self.journal.emit(Event.Kind.WARNING, {"message": message, "reserve": money_str(hold.total)})
            self._mark_exhausted()
            return Cycle.Status.BUDGET_EXHAUSTED
        self._held(hold, bound, round_number)
        # Nothing else changed since the last save (the previous tool's, or the cycle's start).
        self.journal.save(owner=self.owner, fields=RESERVATION_FIELDS)
        return None

    def _release(self) -> Decimal | None:
        """Forget the reservation in flight (the caller journals it); return its amount, None when there was none."""
        being = self.being
        held = EXACT.add(being.reserved_api, being.reserved_instance)
        if not held:
            return None
        being.reserved_api = being.reserved_instance = Decimal(0)
        return held

    def settle_interrupted(self) -> None:
        """Debit in full a reservation a crash left behind (the sweep's entry; a cycle does it first thing)."""
        self._settle_interrupted()

    def _settle_interrupted(self) -> None:
        """Debit in full a reservation whose call never reached its debit (the process died or failed in between)."""
        being = self.being
        if not (being.reserved_api or being.reserved_instance):
            return
        held = Debit(api=being.reserved_api, instance=being.reserved_instance)
        apply_debit(being, held, 0)
        self._release()
        self.journal.emit(
            Event.Kind.COST_DEBITED,
            {
                "amount": money_str(held.total),
                "api": money_str(held.api),
                "instance": money_str(held.instance),
                "remaining": money_str(being.remaining),
                "released": money_str(held.total),
                "settled": "reservation",
                "reason": "the call in flight was interrupted before its debit; its reservation is debited in full",
            },
        )
        self.journal.save(owner=self.owner)

    def _gateway_failed(self, cycle: Cycle, exc: UpstreamError) -> None:
        cycle.error = storable_text(str(exc))
        warning: dict[str, Any] = {"message": cycle.error, "permanent": exc.permanent}
        released = self._release()
        if released is not None:
            warning["released"] = money_str(released)
        elapsed_ns = getattr(exc, "elapsed_ns", None)
        if elapsed_ns is not None:
            # A completion refused for its usage block: what the call cost is recorded, nothing debited (its
            # tokens cannot be trusted, and DESIGN decision 2 debits nothing for a refused block).
            instance = debit_for(
                prompt_tokens=0,
                completion_tokens=0,
                elapsed_ns=elapsed_ns,
                input_price_per_million=self.prices.input_per_million,
                output_price_per_million=self.prices.output_per_million,
                instance_usd_per_hour=self.prices.instance_per_hour,
            ).instance
            warning |= {
                "usage": storable(getattr(exc, "usage", None)),
                "elapsed_ns": elapsed_ns,
                "instance_usd": money_str(instance),
                "debited": money_str(Decimal(0)),
            }
        self.journal.emit(Event.Kind.WARNING, warning)
        self._finish(cycle, Cycle.Status.FAILED)

    def _debit(self, cycle: Cycle, completion: Any, debit: Debit, round_number: int) -> None:
        usage = completion.usage
        released = self._release()
        apply_debit(self.being, debit, usage.prompt_tokens + usage.completion_tokens)
        cycle.rounds = round_number
        cycle.spent = EXACT.add(cycle.spent, debit.total)
        self.journal.emit(
            Event.Kind.MODEL_COMPLETED,
            {
                "round": round_number,
                "model": completion.model,
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
                "elapsed_ns": completion.elapsed_ns,
                "tool_calls": len(completion.tool_calls),
            },
        )
        debited = {
            "amount": money_str(debit.total),
            "api": money_str(debit.api),
            "instance": money_str(debit.instance),
            "remaining": money_str(self.being.remaining),
        }
        if released is not None:
            debited["released"] = money_str(released)
        self.journal.emit(Event.Kind.COST_DEBITED, debited)
        if released is not None and debit.total > released:
            # The gateway broke the bounds the reservation assumed; the seed's debit is still made in full.
            message = f"the call cost {money_str(debit.total)} USD, more than the {money_str(released)} USD reserved"
            self.journal.emit(Event.Kind.WARNING, {"message": message})
        # Only the model call happened since the last save (a tool's, the cycle's start, the reservation's): the
        # mind is as saved, so the round writes what its debit changed.
        self.journal.save(
            owner=self.owner, cycle=cycle, cycle_fields=("rounds", "spent", "messages"), fields=DEBIT_FIELDS
        )

    def _tool_finished(self, cycle: Cycle, call: Any, outcome: Any, *, ahead: tuple[Any, ...] | None = None) -> str:
        """Record a finished tool call in one durable save; ``ahead`` (the next call's messages, the tools and its
        round), when this was the round's last tool, also holds that call's worst case in the same save."""
        being = self.being
        action = f"{call.name}:{outcome.status}"
        being.recent_actions = [*being.recent_actions, action][-RECENT_ACTIONS:]
        cycle.tool_calls += 1
        finished: dict[str, Any] = {"tool": call.name, "status": outcome.status, "duration_ms": outcome.duration_ms}
        if outcome.error:
            finished["error"] = outcome.error
        self.journal.emit(Event.Kind.TOOL_FINISHED, finished)
        if outcome.status == "success":
            self._credit(cycle, call.name, outcome.raw)
        if ahead is not None:
            next_messages, tools, round_number = ahead
            self._hold_ahead(next_messages(), tools, round_number)
        self.journal.save(owner=self.owner, cycle=cycle, cycle_fields=("tool_calls", "messages", "earned"))
        return call.name

    def _credit(self, cycle: Cycle, tool: str, raw: Any) -> None:
        finding = find_revenue(tool, raw)
        if finding is None:
            return
        if finding.amount is None:
            self.journal.emit(Event.Kind.WARNING, {"message": finding.problem, "tool": tool, "key": finding.key})
            return
        try:
            credited = apply_credit(self.being, finding.amount)
        except CreditRefused as exc:
            message = f"{tool}: {finding.key}: {exc}"
            self.journal.emit(Event.Kind.WARNING, {"message": message, "tool": tool, "key": finding.key})
            return
        cycle.earned = EXACT.add(cycle.earned, credited)
        self.journal.emit(
            Event.Kind.REVENUE_CREDITED,
            {"amount": money_str(credited), "source": tool, "key": finding.key},
        )


class _CycleHooks(AgentHooks):
    """The being-specific steps of a cycle: solvency and stop before each round, ledger and journal after each step."""

    def __init__(self, runtime: Runtime, cycle: Cycle, actions: list[str], tools: list[dict]) -> None:
        self.runtime = runtime
        self.cycle = cycle
        self.actions = actions
        self.tools = tools
        #: The messages the next call will send (set once the agent loop exists).
        self.next_messages: Callable[[], list[dict[str, Any]]] = list
        #: Tool calls of the current round not yet finished: the last one's save holds the next call's worst case.
        self.tools_left = 0

    def before_round(self, round_number: int) -> str | None:
        return self.runtime._before_round()

    def reserve(self, model: str, messages: list[dict[str, Any]], round_number: int) -> str | None:
        return self.runtime._reserve(self.cycle, messages, self.tools, round_number)

    def after_completion(self, completion: Any, debit: Debit, round_number: int) -> None:
        self.runtime._debit(self.cycle, completion, debit, round_number)
        self.tools_left = len(completion.tool_calls)

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        self.tools_left -= 1
        runtime = self.runtime
        ahead = None
        if self.tools_left == 0 and round_number < runtime.max_rounds:
            ahead = (self.next_messages, self.tools, round_number + 1)
        self.actions.append(runtime._tool_finished(self.cycle, call, outcome, ahead=ahead))

    def gateway_failed(self, error: UpstreamError, round_number: int) -> None:
        self.runtime._gateway_failed(self.cycle, error)
