"""What a run holds while it runs: its recorder (cost, trace, failures) and a pipeline's ``ctx``.

``RunRecorder`` is shared by every runner: agent conversations go through the
being's own round loop (``singularity.agent``) with the MCP tools only, every
completion's exact debit is added to the execution's cost (never to a
being's budget), and every tool call lands in the trace with its arguments,
status, error, duration and dry-run mark. Under a loop-launched run the tool
catalogue answers writes dry (see ``ToolCatalogue.call``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from grading.models import Execution
from singularity.agent import COMPLETED, AgentHooks, AgentLoop, Prices
from singularity.money import Debit
from singularity.tools.outcome import FAILED, INDETERMINATE

logger = logging.getLogger("grading.runners")


class RunFailed(Exception):
    """The run cannot go on; the message is what the execution's ``error`` says."""


class ToolCallFailed(Exception):
    """A pipeline's ``ctx.call_tool`` got a failed or indeterminate outcome; ``status`` says which."""

    def __init__(self, name: str, status: str, error: str) -> None:
        super().__init__(f"{name}: {status}: {error}")
        self.name = name
        self.status = status
        self.error = error


def hide_labels(value: dict[str, Any] | None) -> dict[str, Any]:
    """Return the input without its keys starting with "_" (labels kept for grading, never shown to the run)."""
    return {key: item for key, item in (value or {}).items() if not str(key).startswith("_")}


def input_text(value: dict[str, Any]) -> str:
    """Return the input as the model reads it: indented JSON, or a line saying there is none."""
    if not value:
        return "Input: (none)"
    return "Input:\n" + json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _arguments(arguments: str | dict[str, Any]) -> Any:
    """Return the call's arguments as JSON data when they parse, else the text the model sent."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return arguments


class _Resources:
    """The gateway and tool catalogue of one run, made on first use and closed at the end when the run made them."""

    def __init__(self, gateway: Any = None, catalogue: Any = None) -> None:
        self._gateway = gateway
        self._catalogue = catalogue
        self._owned: list[Any] = []

    @property
    def gateway(self) -> Any:
        if self._gateway is None:
            from singularity.gateway import get_gateway

            self._gateway = get_gateway()
            self._owned.append(self._gateway)
        return self._gateway

    @property
    def catalogue(self) -> Any:
        if self._catalogue is None:
            from singularity.tools import build_catalogue

            self._catalogue = build_catalogue(include_builtins=False)
            self._owned.append(self._catalogue)
        return self._catalogue

    def close(self) -> None:
        while self._owned:
            self._owned.pop().close()


@dataclass
class RunRecorder:
    """Accumulates one execution's cost, trace and tool failures while its runner works."""

    execution: Execution
    resources: _Resources
    model: str = ""
    max_rounds: int = 0
    prices: Prices | None = None
    cost: Decimal = Decimal(0)
    trace: list[dict[str, Any]] = field(default_factory=list)
    tool_failures: int = 0
    #: The task the trace's next tool calls belong to ("" outside tasks).
    task: str = ""

    def __post_init__(self) -> None:
        self.model = self.model or settings.BRAMA_MODEL
        self.max_rounds = self.max_rounds or settings.SINGULARITY_MAX_TOOL_ROUNDS
        self.prices = self.prices or Prices.from_settings()

    # --- tools ---------------------------------------------------------------

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> Any:
        """Run one MCP tool (dry under a loop-launched run), record it in the trace, return the outcome."""
        outcome = self.resources.catalogue.call(None, name, arguments, dry_run=self.execution.loop_launched)
        self.record_tool(name, arguments, outcome)
        return outcome

    def record_tool(self, name: str, arguments: str | dict[str, Any], outcome: Any) -> None:
        entry: dict[str, Any] = {
            "tool": name,
            "arguments": _arguments(arguments),
            "status": outcome.status,
            "error": outcome.error,
            "duration_ms": outcome.duration_ms,
            "dry_run": bool(getattr(outcome, "dry_run", False)),
        }
        if self.task:
            entry["task"] = self.task
        self.trace.append(entry)
        if outcome.status in (FAILED, INDETERMINATE):
            self.tool_failures += 1

    def log(self, message: str) -> None:
        """Add a log line to the trace (``{"log", "at"}``) and to the ``grading.runners`` logger."""
        text = str(message)
        self.trace.append({"log": text, "at": timezone.now().isoformat()})
        logger.info("%s %s: %s", self.execution.run_kind, self.execution.pk, text)

    # --- agent conversations -----------------------------------------------------

    def converse(self, user_message: str, *, system: str | None = None) -> str:
        """Run one agent conversation to its plain reply and return the reply's text.

        Raises ``RunFailed`` at the round limit, and the gateway's
        ``UpstreamError`` when a model call fails; what was spent until then
        is already on the recorder.
        """
        system_message = {"role": "system", "content": system} if system else None
        loop = AgentLoop(
            gateway=self.resources.gateway,
            tools=self.resources.catalogue.openai_tools(),
            call_tool=lambda name, arguments: self.resources.catalogue.call(
                None, name, arguments, dry_run=self.execution.loop_launched
            ),
            model=self.model,
            system=lambda: system_message,
            prices=self.prices or Prices.from_settings(),
            max_rounds=self.max_rounds,
            hooks=_RecorderHooks(self),
        )
        result = loop.run([{"role": "user", "content": user_message}])
        if result.status != COMPLETED:
            where = f"task {self.task}: " if self.task else ""
            raise RunFailed(f"{where}maximum tool rounds reached ({self.max_rounds}) with tool calls still coming")
        return result.final_content


class _RecorderHooks(AgentHooks):
    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder

    def after_completion(self, completion: Any, debit: Debit, round_number: int) -> None:
        self.recorder.cost += debit.total

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        self.recorder.record_tool(call.name, call.arguments, outcome)


class PipelineContext:
    """The ``ctx`` a pipeline's ``run(ctx, input)`` receives.

    ``run_ref`` is this invocation's identity ({"runKind": "pipeline",
    "runId", "definitionHash"}) for the lineage a pipeline records;
    ``loop_launched`` is true under a replay (skip your own writes then);
    ``entity`` is the scenario's slug; ``params`` its frontmatter ``params:``;
    ``demo`` is true while the embedded demo driver runs (``DEMO_DRIVER``), so
    the demo brain's own pipelines may play their part (a proposer that is
    sometimes hasty) without it reaching anyone's brain or tests.
    """

    def __init__(self, recorder: RunRecorder, *, entity: str, params: dict[str, Any]) -> None:
        execution = recorder.execution
        self._recorder = recorder
        self.entity = entity
        self.params = params
        self.loop_launched = execution.loop_launched
        self.demo = bool(getattr(settings, "DEMO_DRIVER", False))
        self.run_ref: dict[str, Any] = {
            "runKind": execution.run_kind,
            "runId": str(execution.pk),
            "definitionHash": execution.definition_hash or None,
        }

    @property
    def logs(self) -> list[str]:
        """Return the lines logged so far, in order."""
        return [step["log"] for step in self._recorder.trace if "log" in step]

    def run_agent(self, prompt: str, input: Any = None, *, instructions: str | None = None) -> str:
        """Run an agent conversation (the run's MCP tools, dry under a replay) and return its final text.

        ``input`` is appended to the prompt as JSON (keys starting with "_" left
        out); ``instructions`` is the system message. Its cost is the run's.
        """
        message = prompt
        if input is not None:
            shown = hide_labels(input) if isinstance(input, dict) else input
            message += "\n\n" + (input_text(shown) if isinstance(shown, dict) else "Input:\n" + json.dumps(shown))
        return self._recorder.converse(message, system=instructions)

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call one MCP tool and return its result; a write answers ``{"dry_run": true, ...}`` under a replay.

        Raises ``ToolCallFailed`` when the tool failed or may not have run.
        """
        outcome = self._recorder.call_tool(name, arguments if arguments is not None else {})
        if outcome.status in (FAILED, INDETERMINATE):
            raise ToolCallFailed(name, outcome.status, outcome.error)
        return outcome.raw

    def log(self, message: str) -> None:
        """Write a line to the run's trace."""
        self._recorder.log(message)
