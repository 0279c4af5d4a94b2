"""What a run holds while it runs: its recorder (cost, trace, failures) and a pipeline's ``ctx``.

``RunRecorder`` is shared by every runner: agent conversations go through the
being's own round loop (``singularity.agent``) with the MCP tools only, every
completion's exact debit is added to the execution's cost (never to a
being's budget), and every tool call lands in the trace with its arguments,
status, error, duration and dry-run mark — and every model call with the
messages it sent and the reply, as spans (``grading.spans``). Under a loop-launched run the tool
catalogue answers writes dry (see ``ToolCatalogue.call``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from grading import spans
from grading.models import Execution
from singularity.agent import COMPLETED, AgentHooks, AgentLoop, Prices
from singularity.money import Debit, money_str
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
    """Accumulates one execution's cost, spans and tool failures while its runner works.

    ``trace`` is the run's span list (``grading.spans``): each agent
    conversation an ``other`` span (``invoke_agent``), each model call under
    it an ``llm`` span (model, the messages sent, the reply, tokens, cost,
    finish reason), each tool call a ``tool`` span, each log line an
    ``other`` span. It keeps within the trace limits: a value too long is cut
    (``spans.fit``), spans past ``TRACE_MAX_SPANS`` are counted in one last
    span instead of kept. ``cost`` is the sum of the debits, kept apart from
    the spans so no money is lost to a limit.
    """

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
    #: The span new spans nest under (the conversation running), None at the top.
    parent: str | None = None
    dropped: int = 0
    _bytes: int = 0
    _call: dict[str, Any] | None = None
    _tool_started: datetime | None = None

    def __post_init__(self) -> None:
        self.model = self.model or settings.BRAMA_MODEL
        self.max_rounds = self.max_rounds or settings.SINGULARITY_MAX_TOOL_ROUNDS
        self.prices = self.prices or Prices.from_settings()

    # --- spans ---------------------------------------------------------------------

    def add_span(
        self,
        *,
        name: str,
        kind: str,
        start: datetime,
        end: datetime,
        attributes: dict[str, Any],
        status: str = spans.OK,
        message: str = "",
    ) -> dict[str, Any] | None:
        """Append one span under the current parent and return it (None when the span limit kept it out)."""
        span = spans.fit(
            {
                "spanId": spans.new_span_id(),
                "parentSpanId": self.parent,
                "name": name[: spans.MAX_NAME_CHARS],
                "kind": kind,
                "startTime": spans.instant_text(start),
                "endTime": spans.instant_text(max(start, end)),
                "status": status,
                "statusMessage": message,
                "attributes": attributes,
            }
        )
        size = spans.span_bytes(span)
        # One place is kept for the span that says how many were not kept.
        if len(self.trace) >= spans.max_spans() - 1 or self._bytes + size > spans.max_trace_bytes() - 1024:
            self._drop()
            return None
        self._bytes += size
        self.trace.append(span)
        return span

    def _drop(self) -> None:
        self.dropped += 1
        note = f"{self.dropped:,} more spans were not kept: the trace is at its limit"
        if self.dropped == 1:
            now = spans.instant_text(timezone.now())
            self.trace.append(
                {
                    "spanId": spans.new_span_id(),
                    "parentSpanId": None,
                    "name": "spans not kept",
                    "kind": spans.OTHER,
                    "startTime": now,
                    "endTime": now,
                    "status": spans.OK,
                    "statusMessage": "",
                    "attributes": {"singularity.dropped_spans": 1, spans.LOG: note},
                }
            )
        else:
            last = next(span for span in reversed(self.trace) if span["name"] == "spans not kept")
            last["attributes"].update({"singularity.dropped_spans": self.dropped, spans.LOG: note})

    # --- tools ---------------------------------------------------------------

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> Any:
        """Run one MCP tool (dry under a loop-launched run), record it in the trace, return the outcome."""
        started = timezone.now()
        outcome = self.resources.catalogue.call(None, name, arguments, dry_run=self.execution.loop_launched)
        self.record_tool(name, arguments, outcome, started=started)
        return outcome

    def _timed_call(self, name: str, arguments: str | dict[str, Any]) -> Any:
        self._tool_started = timezone.now()
        return self.resources.catalogue.call(None, name, arguments, dry_run=self.execution.loop_launched)

    def record_tool(
        self,
        name: str,
        arguments: str | dict[str, Any],
        outcome: Any,
        *,
        started: datetime | None = None,
        call_id: str = "",
    ) -> None:
        """Record one tool call as a tool span: its arguments, result or error, status and time."""
        end = timezone.now()
        start = started or end - timedelta(milliseconds=outcome.duration_ms or 0)
        failed = outcome.status in (FAILED, INDETERMINATE)
        attributes: dict[str, Any] = {
            spans.OPERATION: "execute_tool",
            spans.TOOL_NAME: name,
            spans.TOOL_ARGUMENTS: _arguments(arguments),
            spans.TOOL_STATUS: outcome.status,
        }
        if call_id:
            attributes[spans.TOOL_CALL_ID] = call_id
        if not failed and outcome.result is not None:
            attributes[spans.TOOL_RESULT] = outcome.result
        if getattr(outcome, "dry_run", False):
            attributes[spans.DRY_RUN] = True
        if self.task:
            attributes[spans.TASK] = self.task
        self.add_span(
            name=f"execute_tool {name}",
            kind=spans.TOOL,
            start=start,
            end=end,
            attributes=attributes,
            status=spans.ERROR if failed else spans.OK,
            message=(outcome.error or outcome.status) if failed else "",
        )
        if failed:
            self.tool_failures += 1

    def log(self, message: str) -> None:
        """Add a log line to the trace (an ``other`` span named log) and to the ``grading.runners`` logger."""
        text = str(message)
        now = timezone.now()
        self.add_span(name="log", kind=spans.OTHER, start=now, end=now, attributes={spans.LOG: text})
        logger.info("%s %s: %s", self.execution.run_kind, self.execution.pk, text)

    # --- model calls -----------------------------------------------------------------

    def model_called(self, model: str, messages: list[dict[str, Any]]) -> None:
        """Note the model call about to be made (its model, messages and start) for the span that follows it."""
        self._call = {"model": model, "messages": spans.genai_messages(messages), "start": timezone.now()}

    def record_completion(self, completion: Any, debit: Debit) -> None:
        """Record the call noted by ``model_called`` as an llm span: reply, tokens, cost, finish reason, latency."""
        self.cost += debit.total
        call = self._call or {"model": completion.model, "messages": [], "start": timezone.now()}
        self._call = None
        start = call["start"]
        end = start + timedelta(microseconds=completion.elapsed_ns // 1000)
        reason = completion.finish_reason or ("tool_calls" if completion.tool_calls else "stop")
        output = spans.genai_messages([completion.message])
        for message in output:
            message["finish_reason"] = reason
        attributes: dict[str, Any] = {
            spans.OPERATION: "chat",
            spans.REQUEST_MODEL: call["model"],
            spans.RESPONSE_MODEL: completion.model,
            spans.INPUT_MESSAGES: call["messages"],
            spans.OUTPUT_MESSAGES: output,
            spans.INPUT_TOKENS: completion.usage.prompt_tokens,
            spans.OUTPUT_TOKENS: completion.usage.completion_tokens,
            spans.FINISH_REASONS: [reason],
            spans.COST: money_str(debit.total),
        }
        if self.task:
            attributes[spans.TASK] = self.task
        self.add_span(name=f"chat {call['model']}", kind=spans.LLM, start=start, end=end, attributes=attributes)

    def record_model_failure(self, error: Exception) -> None:
        """Record the call noted by ``model_called`` as a failed llm span with the gateway's error."""
        call = self._call or {"model": self.model, "messages": [], "start": timezone.now()}
        self._call = None
        attributes = {
            spans.OPERATION: "chat",
            spans.REQUEST_MODEL: call["model"],
            spans.INPUT_MESSAGES: call["messages"],
            spans.ERROR_TYPE: type(error).__name__,
        }
        self.add_span(
            name=f"chat {call['model']}",
            kind=spans.LLM,
            start=call["start"],
            end=timezone.now(),
            attributes=attributes,
            status=spans.ERROR,
            message=str(error),
        )

    # --- agent conversations -----------------------------------------------------

    def converse(self, user_message: str, *, system: str | None = None) -> str:
        """Run one agent conversation to its plain reply and return the reply's text.

        The conversation is one ``invoke_agent`` span; its model and tool
        calls nest under it. Raises ``RunFailed`` at the round limit, and the
        gateway's ``UpstreamError`` when a model call fails; what was spent
        until then is already on the recorder.
        """
        system_message = {"role": "system", "content": system} if system else None
        loop = AgentLoop(
            gateway=self.resources.gateway,
            tools=self.resources.catalogue.openai_tools(),
            call_tool=self._timed_call,
            model=self.model,
            system=lambda: system_message,
            prices=self.prices or Prices.from_settings(),
            max_rounds=self.max_rounds,
            hooks=_RecorderHooks(self),
        )
        start = timezone.now()
        attributes: dict[str, Any] = {spans.OPERATION: "invoke_agent", spans.REQUEST_MODEL: self.model}
        if self.task:
            attributes[spans.TASK] = self.task
        conversation = self.add_span(
            name=f"task {self.task}" if self.task else "conversation",
            kind=spans.OTHER,
            start=start,
            end=start,
            attributes=attributes,
        )
        outer = self.parent
        self.parent = conversation["spanId"] if conversation else outer
        failure = ""
        try:
            result = loop.run([{"role": "user", "content": user_message}])
            if result.status != COMPLETED:
                where = f"task {self.task}: " if self.task else ""
                failure = f"{where}maximum tool rounds reached ({self.max_rounds}) with tool calls still coming"
                raise RunFailed(failure)
        except Exception as exc:
            failure = failure or str(exc)
            raise
        finally:
            self.parent = outer
            if conversation:
                conversation["endTime"] = spans.instant_text(max(start, timezone.now()))
                if failure:
                    conversation.update(status=spans.ERROR, statusMessage=failure)
        return result.final_content


class _RecorderHooks(AgentHooks):
    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder

    def before_completion(self, model: str, messages: list[dict[str, Any]], round_number: int) -> None:
        self.recorder.model_called(model, messages)

    def after_completion(self, completion: Any, debit: Debit, round_number: int) -> None:
        self.recorder.record_completion(completion, debit)

    def gateway_failed(self, error: Exception, round_number: int) -> None:
        self.recorder.record_model_failure(error)

    def after_tool(self, call: Any, outcome: Any, round_number: int) -> None:
        self.recorder.record_tool(
            call.name, call.arguments, outcome, started=self.recorder._tool_started, call_id=call.id
        )


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
        return spans.logs(self._recorder.trace)

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
