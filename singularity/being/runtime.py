"""One cycle of the being, step by step as the seed's anatomy (seed 000).

Solvency gate, framing, up to ``max_rounds`` model rounds with every tool call
executed in order, the round limit. Each completion is debited exactly once,
in the same transaction that journals it; state is saved after every tool, so
a crash loses at most the round in flight.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone

from singularity.being.framing import framing_message, system_message
from singularity.being.ledger import apply_credit, apply_debit
from singularity.being.revenue import find_revenue
from singularity.being.store import Journal
from singularity.errors import UpstreamError
from singularity.models import RECENT_ACTIONS, Being, Cycle, Event
from singularity.money import debit_for, money_str

ROUND_LIMIT_WARNING = "maximum tool rounds reached"


class GatewayLike(Protocol):
    def complete(self, *, model: str, messages: list[dict], tools: list[dict]) -> Any: ...


class CatalogueLike(Protocol):
    def openai_tools(self) -> list[dict]: ...
    def call(self, being: Being, name: str, arguments: str | dict) -> Any: ...


@dataclass(frozen=True)
class Prices:
    input_per_million: Decimal
    output_per_million: Decimal
    instance_per_hour: Decimal

    @classmethod
    def from_settings(cls) -> Prices:
        return cls(
            input_per_million=settings.BRAMA_INPUT_PRICE_USD_PER_MILLION,
            output_per_million=settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION,
            instance_per_hour=settings.SINGULARITY_INSTANCE_USD_PER_HOUR,
        )


@dataclass
class CycleReport:
    cycle: int
    status: str
    final_content: str
    balance: Decimal
    earned: Decimal
    net_profit: Decimal
    total_tokens: int
    actions: list[dict[str, str]] = field(default_factory=list)

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
    ) -> None:
        self.being = being
        self.gateway = gateway
        self.catalogue = catalogue
        self.owner = owner
        self.max_rounds = max_rounds or settings.SINGULARITY_MAX_TOOL_ROUNDS
        self.prices = prices or Prices.from_settings()
        self.should_stop = should_stop
        self.journal = Journal(being)

    # -- reporting ---------------------------------------------------------
    def _report(self, cycle: Cycle | None, status: str, actions: list[dict[str, str]]) -> CycleReport:
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
        Being.objects.filter(pk=self.being.pk).update(status=Being.Status.EXHAUSTED)
        self.being.status = Being.Status.EXHAUSTED

    def _finish(self, cycle: Cycle, status: str) -> None:
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
        """Run one cycle. Raises UpstreamError for a gateway failure after recording the cycle as failed."""
        being = self.being
        actions: list[dict[str, str]] = []
        if not being.solvent:
            self._mark_exhausted()
            return self._report(None, Cycle.Status.BUDGET_EXHAUSTED, actions)

        Cycle.objects.filter(being=being, status=Cycle.Status.RUNNING).update(
            status=Cycle.Status.INTERRUPTED, finished_at=timezone.now()
        )
        being.cycle += 1
        framing = framing_message(being, stimulus=being.stimulus)
        cycle = Cycle(being=being, number=being.cycle, started_at=timezone.now())
        self.journal.emit(Event.Kind.CYCLE_STARTED, {"balance": money_str(being.remaining), "model": being.model})
        self.journal.save(owner=self.owner, cycle=cycle)
        tools = self.catalogue.openai_tools()

        status = Cycle.Status.TOOL_ROUND_LIMIT
        for round_number in range(1, self.max_rounds + 1):
            if not being.solvent:
                status = Cycle.Status.BUDGET_EXHAUSTED
                self._mark_exhausted()
                break
            if self.should_stop():
                status = Cycle.Status.INTERRUPTED
                break
            messages = [system_message(being), framing, *cycle.messages]
            try:
                completion = self.gateway.complete(model=being.model, messages=messages, tools=tools)
            except UpstreamError as exc:
                cycle.error = str(exc)
                self.journal.emit(Event.Kind.WARNING, {"message": str(exc), "permanent": exc.permanent})
                self._finish(cycle, Cycle.Status.FAILED)
                raise
            self._debit(cycle, completion, round_number)
            if not completion.tool_calls:
                cycle.final_content = completion.content or ""
                status = Cycle.Status.COMPLETED
                break
            for call in completion.tool_calls:
                actions.append(self._run_tool(cycle, call))
        else:
            self.journal.emit(Event.Kind.WARNING, {"message": ROUND_LIMIT_WARNING, "rounds": self.max_rounds})

        self._finish(cycle, status)
        return self._report(cycle, status, actions)

    def _debit(self, cycle: Cycle, completion: Any, round_number: int) -> None:
        usage = completion.usage
        debit = debit_for(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            elapsed_ns=completion.elapsed_ns,
            input_price_per_million=self.prices.input_per_million,
            output_price_per_million=self.prices.output_per_million,
            instance_usd_per_hour=self.prices.instance_per_hour,
        )
        apply_debit(self.being, debit, usage.prompt_tokens + usage.completion_tokens)
        cycle.rounds = round_number
        cycle.spent += debit.total
        cycle.messages.append(completion.message)
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
        self.journal.emit(
            Event.Kind.COST_DEBITED,
            {
                "amount": money_str(debit.total),
                "api": money_str(debit.api),
                "instance": money_str(debit.instance),
                "remaining": money_str(self.being.remaining),
            },
        )
        self.journal.save(owner=self.owner, cycle=cycle, cycle_fields=("rounds", "spent", "messages"))

    def _run_tool(self, cycle: Cycle, call: Any) -> dict[str, str]:
        being = self.being
        outcome = self.catalogue.call(being, call.name, call.arguments)
        action = f"{call.name}:{outcome.status}"
        being.recent_actions = [*being.recent_actions, action][-RECENT_ACTIONS:]
        cycle.tool_calls += 1
        shown: dict[str, Any] = {"status": outcome.status, "result": outcome.result}
        if outcome.error:
            shown["error"] = outcome.error
        cycle.messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(shown, ensure_ascii=False, default=str)}
        )
        finished: dict[str, Any] = {"tool": call.name, "status": outcome.status, "duration_ms": outcome.duration_ms}
        if outcome.error:
            finished["error"] = outcome.error
        self.journal.emit(Event.Kind.TOOL_FINISHED, finished)
        if outcome.status == "success":
            self._credit(cycle, call.name, outcome.raw)
        self.journal.save(owner=self.owner, cycle=cycle, cycle_fields=("tool_calls", "messages", "earned"))
        return {"tool": call.name, "status": outcome.status}

    def _credit(self, cycle: Cycle, tool: str, raw: Any) -> None:
        finding = find_revenue(tool, raw)
        if finding is None:
            return
        if finding.amount is None:
            self.journal.emit(Event.Kind.WARNING, {"message": finding.problem, "tool": tool, "key": finding.key})
            return
        apply_credit(self.being, finding.amount)
        cycle.earned += finding.amount
        self.journal.emit(
            Event.Kind.REVENUE_CREDITED,
            {"amount": money_str(finding.amount), "source": tool, "key": finding.key},
        )
