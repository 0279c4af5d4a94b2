"""The agent round loop the being and the workflow runner share.

One conversation: up to ``max_rounds`` model rounds, each called with the
full tool catalogue; every completion is debited exactly
(``singularity.money.debit_for``) the moment it returns; every tool call runs
in order through the catalogue and its outcome is appended to the
conversation. The loop ends on a plain reply, at the round limit, or when the
caller's ``before_round`` hook says stop. It persists nothing itself: the
caller's hooks, called after each completion and each tool, save what the
caller must (the being its ledger and journal, a runner its trace).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from django.conf import settings

from singularity.errors import UpstreamError
from singularity.money import Debit, debit_for

#: How the loop ended.
COMPLETED = "completed"
ROUND_LIMIT = "round_limit"


class GatewayLike(Protocol):
    def complete(self, *, model: str, messages: list[dict], tools: list[dict]) -> Any: ...


class CatalogueLike(Protocol):
    def openai_tools(self) -> list[dict]: ...
    def call(self, being: Any, name: str, arguments: str | dict) -> Any: ...


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

    def debit(self, completion: Any) -> Debit:
        """Return the exact debit of one completion: its tokens at these prices, its wall time at the hourly rate."""
        usage = completion.usage
        return debit_for(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            elapsed_ns=completion.elapsed_ns,
            input_price_per_million=self.input_per_million,
            output_price_per_million=self.output_per_million,
            instance_usd_per_hour=self.instance_per_hour,
        )


class AgentHooks:
    """What the caller does between the loop's steps; every hook does nothing by default."""

    def before_round(self, round_number: int) -> str | None:
        """Return a status to end the loop before this round's model call, or None to go on."""
        return None

    def before_completion(self, model: str, messages: list[dict[str, Any]], round_number: int) -> None:
        """Called just before each model call with the model asked and the messages sent."""

    def reserve(self, model: str, messages: list[dict[str, Any]], round_number: int) -> str | None:
        """Called just before each model call; return a status to end the loop instead of making it."""
        return None

    def after_completion(self, completion: Any, debit: Debit, round_number: int) -> None:
        """Called once per completion, after it was debited and appended to the conversation."""

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        """Called once per tool call, after its outcome was appended to the conversation."""

    def gateway_failed(self, error: UpstreamError, round_number: int) -> None:
        """Called when the model call raised; the loop raises the error again afterwards."""


@dataclass
class ToolRun:
    """One tool call as the loop ran it: the call the model made and the catalogue's outcome."""

    call: Any
    outcome: Any
    round_number: int


@dataclass
class AgentResult:
    """How one conversation ended: its status, the final reply, what it cost and which tools ran."""

    status: str
    final_content: str = ""
    rounds: int = 0
    cost: Decimal = Decimal(0)
    tool_runs: list[ToolRun] = field(default_factory=list)


def tool_message(call_id: str, outcome: Any) -> dict[str, Any]:
    """Return the ``tool`` message that shows the model one outcome: status, result and any error."""
    shown: dict[str, Any] = {"status": outcome.status, "result": outcome.result}
    if outcome.error:
        shown["error"] = outcome.error
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(shown, ensure_ascii=False, default=str)}


class AgentLoop:
    """Runs one conversation to a plain reply or the round limit.

    ``model`` and ``system`` are read again before every round (a being may
    switch model or rewrite its prompt mid-cycle). ``opening`` follows the
    system message on every call; ``conversation`` is the list the loop
    appends assistant and tool messages to (pass the caller's own list to
    persist it in the hooks). ``call_tool(name, arguments)`` runs one tool
    and returns its outcome (``status``, ``result``, ``error``).
    """

    def __init__(
        self,
        *,
        gateway: GatewayLike,
        tools: list[dict[str, Any]],
        call_tool: Callable[[str, str | dict[str, Any]], Any],
        model: str | Callable[[], str],
        prices: Prices,
        max_rounds: int,
        system: Callable[[], dict[str, Any] | None] | None = None,
        hooks: AgentHooks | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.gateway = gateway
        self.tools = tools
        self.call_tool = call_tool
        self.model = model
        self.prices = prices
        self.max_rounds = max_rounds
        self.system = system
        self.hooks = hooks or AgentHooks()
        #: Sent as the call's ``max_tokens`` when set (a reservation's worst case depends on it).
        self.max_tokens = max_tokens

    def messages(self, opening: list[dict[str, Any]], conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages the next call sends: the system message (as it reads now), ``opening``, ``conversation``."""
        return self._messages(opening, conversation)

    def _messages(self, opening: list[dict[str, Any]], conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        system = self.system() if self.system is not None else None
        return [*([system] if system else []), *opening, *conversation]

    def run(self, opening: list[dict[str, Any]], conversation: list[dict[str, Any]] | None = None) -> AgentResult:
        """Run rounds until a plain reply (COMPLETED), the round limit (ROUND_LIMIT) or a hook's stop status.

        Raises the gateway's ``UpstreamError`` after calling ``gateway_failed``.
        """
        conversation = conversation if conversation is not None else []
        result = AgentResult(status=ROUND_LIMIT)
        for round_number in range(1, self.max_rounds + 1):
            stop = self.hooks.before_round(round_number)
            if stop is not None:
                result.status = stop
                return result
            model = self.model() if callable(self.model) else self.model
            messages = self._messages(opening, conversation)
            self.hooks.before_completion(model, messages, round_number)
            stop = self.hooks.reserve(model, messages, round_number)
            if stop is not None:
                result.status = stop
                return result
            limit: dict[str, Any] = {} if self.max_tokens is None else {"max_tokens": self.max_tokens}
            try:
                completion = self.gateway.complete(model=model, messages=messages, tools=self.tools, **limit)
            except UpstreamError as exc:
                self.hooks.gateway_failed(exc, round_number)
                raise
            debit = self.prices.debit(completion)
            result.rounds = round_number
            result.cost += debit.total
            conversation.append(completion.message)
            self.hooks.after_completion(completion, debit, round_number)
            if not completion.tool_calls:
                result.status = COMPLETED
                result.final_content = completion.content or ""
                return result
            for call in completion.tool_calls:
                outcome = self.call_tool(call.name, call.arguments)
                conversation.append(tool_message(call.id, outcome))
                result.tool_runs.append(ToolRun(call=call, outcome=outcome, round_number=round_number))
                self.hooks.after_tool(call, outcome, round_number)
        return result
