"""Send an agent's runs to Singularity as OpenTelemetry traces: one trace, one run.

::

    import singularity_client as sg

    sg.configure("https://singularity.example.com", token="sg_…")

    @sg.observe(entity="scenario:triage")
    def triage(ticket): ...

    with sg.trace("scenario:triage", input={"ticket": t}) as run:
        with sg.llm("gpt-4o", input_messages=[...]) as call:
            call.usage(input_tokens=120, output_tokens=30, cost_usd="0.0015")
        with sg.tool("crm_lookup", arguments={"customer": 42}) as lookup:
            lookup.result({"plan": "pro"})
        run.output({"label": "billing"})

Built on the OpenTelemetry SDK and its OTLP/HTTP exporter (so it works
pointed at any collector too), with its own tracer provider (a program's
global OpenTelemetry setup is left alone). Spans are sent from a background
thread by the SDK's batch processor with a bounded queue: recording a span
never waits for the network, and when the server is slow or down the caller
goes on; a span that cannot be sent (the queue full, an export that failed
after the exporter's retries) is counted in ``dropped_spans()``, never raised.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Status, StatusCode, Tracer

__all__ = [
    "configure",
    "observe",
    "trace",
    "llm",
    "tool",
    "span",
    "flush",
    "shutdown",
    "dropped_spans",
]

ENTITY = "singularity.entity"
COST = "singularity.cost_usd"
F = TypeVar("F", bound=Callable[..., Any])

_entity: contextvars.ContextVar[str | None] = contextvars.ContextVar("singularity_entity", default=None)
_lock = threading.Lock()
_state: dict[str, Any] = {"provider": None, "tracer": None, "dropped": 0}


def _count_dropped(count: int) -> None:
    with _lock:
        _state["dropped"] += count


class _CountingExporter(SpanExporter):
    """The OTLP/HTTP exporter, counting the spans of an export that failed (after its own retries)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - an export never takes the caller down; its spans are counted lost
            result = SpanExportResult.FAILURE
        if result != SpanExportResult.SUCCESS:
            _count_dropped(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _CountingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting the span its full queue drops for each span that arrives."""

    def on_end(self, span: ReadableSpan) -> None:
        inner = getattr(self, "_batch_processor", None)
        queue = getattr(inner, "_queue", None)
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            _count_dropped(1)
        super().on_end(span)


def configure(
    url: str,
    token: str,
    *,
    service_name: str = "singularity-client",
    max_queue_size: int = 2048,
    max_export_batch_size: int = 512,
    schedule_delay_millis: float = 1000,
    timeout: float = 5.0,
    gzip: bool = True,
) -> TracerProvider:
    """Send runs to the server at ``url`` (its base URL; ``/v1/traces`` is added) with an API token.

    Replaces an earlier configuration (its queued spans are flushed first).
    ``max_queue_size`` bounds the spans held while the server is slow or
    down; ``timeout`` bounds one export, retries included (seconds).
    """
    exporter = OTLPSpanExporter(
        endpoint=url.rstrip("/") + "/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}), shutdown_on_exit=True)
    provider.add_span_processor(
        _CountingBatchProcessor(
            _CountingExporter(exporter),
            max_queue_size=max_queue_size,
            max_export_batch_size=min(max_export_batch_size, max_queue_size),
            schedule_delay_millis=schedule_delay_millis,
        )
    )
    with _lock:
        previous = _state["provider"]
        _state["provider"] = provider
        _state["tracer"] = provider.get_tracer("singularity_client")
    if previous is not None:
        previous.shutdown()
    return provider


def _tracer() -> Tracer:
    tracer = _state["tracer"]
    if tracer is None:
        raise RuntimeError("singularity_client: call configure(url, token) first")
    return tracer


def dropped_spans() -> int:
    """How many spans were not sent: dropped from the full queue, or in an export that failed."""
    return int(_state["dropped"])


def flush(timeout_millis: int = 30000) -> bool:
    """Send what is queued now; return whether it was done within the time (never raises)."""
    provider = _state["provider"]
    return True if provider is None else bool(provider.force_flush(timeout_millis))


def shutdown() -> None:
    """Flush and stop sending (also done when the program exits)."""
    with _lock:
        provider, _state["provider"], _state["tracer"] = _state["provider"], None, None
    if provider is not None:
        provider.shutdown()


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


class Handle:
    """A span being recorded: set what it returned, its usage, or any attribute."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def set(self, key: str, value: Any) -> Handle:
        """Set an attribute (a value that is no text, number or boolean is sent as its JSON)."""
        if not isinstance(value, str | bool | int | float):
            value = _json(value)
        self.span.set_attribute(key, value)
        return self

    def output(self, value: Any) -> Handle:
        """What the run or step returned (any JSON); a run's output is what its grading reads."""
        return self.set("output.value", _json(value))

    def usage(self, *, input_tokens: int = 0, output_tokens: int = 0, cost_usd: str | None = None) -> Handle:
        """A model call's tokens and cost (USD as a decimal string, e.g. "0.0015")."""
        self.span.set_attribute("gen_ai.usage.input_tokens", int(input_tokens))
        self.span.set_attribute("gen_ai.usage.output_tokens", int(output_tokens))
        if cost_usd is not None:
            self.span.set_attribute(COST, str(cost_usd))
        return self

    def messages(self, messages: Sequence[dict[str, Any]]) -> Handle:
        """A model call's answer: GenAI messages (``{role, parts}``) or chat-completions ones."""
        return self.set("gen_ai.output.messages", _json(_genai(messages)))

    def result(self, value: Any) -> Handle:
        """A tool call's result (any JSON)."""
        return self.set("gen_ai.tool.call.result", _json(value))

    def fail(self, message: str) -> Handle:
        """Mark the span (a run's root: the run) failed, saying why."""
        self.span.set_status(Status(StatusCode.ERROR, message))
        return self


def _genai(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions messages (``{role, content}``) as the GenAI conventions' ``{role, parts}``."""
    shaped = []
    for message in messages:
        if "parts" in message or not isinstance(message.get("content"), str):
            shaped.append(dict(message))
        else:
            shaped.append(
                {"role": message.get("role", "user"), "parts": [{"type": "text", "content": message["content"]}]}
            )
    return shaped


@contextmanager
def span(name: str, attributes: dict[str, Any] | None = None, *, entity: str | None = None) -> Iterator[Handle]:
    """Record a span (a child of the current one, or a trace's root: a run); an exception marks it failed."""
    entity = entity or _entity.get()
    token = _entity.set(entity)
    try:
        with _tracer().start_as_current_span(name, record_exception=True, set_status_on_exception=True) as current:
            handle = Handle(current)
            if entity:
                current.set_attribute(ENTITY, entity)
            for key, value in (attributes or {}).items():
                handle.set(key, value)
            yield handle
    finally:
        _entity.reset(token)


@contextmanager
def trace(entity: str, *, input: Any = None, name: str | None = None) -> Iterator[Handle]:
    """Record one run of ``entity`` (``scenario:triage``): the block is the root span, its steps are children."""
    with span(name or f"invoke_agent {entity.rpartition(':')[2]}", entity=entity) as root:
        root.set("gen_ai.operation.name", "invoke_agent")
        if input is not None:
            root.set("input.value", _json(input))
        yield root


@contextmanager
def llm(
    model: str, *, input_messages: Sequence[dict[str, Any]] | None = None, name: str | None = None
) -> Iterator[Handle]:
    """Record a model call in the current run."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if input_messages is not None:
        attributes["gen_ai.input.messages"] = _json(_genai(input_messages))
    with span(name or f"chat {model}", attributes) as call:
        yield call


@contextmanager
def tool(tool_name: str, *, arguments: Any = None) -> Iterator[Handle]:
    """Record a tool call in the current run."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool_name}
    if arguments is not None:
        attributes["gen_ai.tool.call.arguments"] = _json(arguments)
    with span(f"execute_tool {tool_name}", attributes) as call:
        yield call


def _arguments(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs)
    except TypeError:
        return {"args": list(args), **kwargs}
    return dict(bound.arguments)


def observe(entity: str | None = None, *, name: str | None = None, kind: str = "run") -> Callable[[F], F]:
    """Record each call of the function: a run of ``entity`` when none is open, else a step within it.

    ``kind`` is ``run`` (an agent step, or the run), ``llm`` or ``tool``. The
    arguments are the input, the return value the output; an exception marks
    the span failed and is raised on as it was.
    """

    def decorate(function: F) -> F:
        label = name or function.__name__

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _state["tracer"] is None:  # not configured: the function runs as if undecorated
                return function(*args, **kwargs)
            arguments = _arguments(function, args, kwargs)
            if kind == "tool":
                opened = tool(label, arguments=arguments)
            elif kind == "llm":
                opened = span(label, {"gen_ai.operation.name": "chat", "input.value": _json(arguments)})
            elif entity and _entity.get() is None:
                opened = trace(entity, input=arguments, name=label)
            else:
                opened = span(label, {"input.value": _json(arguments)}, entity=entity)
            with opened as handle:
                value = function(*args, **kwargs)
                if kind == "tool":
                    handle.result(value)
                else:
                    handle.output(value)
                return value

        return wrapper  # type: ignore[return-value]

    return decorate
