"""Run the being's MCP servers (Las): child processes over stdio, or remote servers over streamable HTTP.

One asyncio event loop runs in a background daemon thread; every session
lives in its own task on that loop, and callers in other threads submit
calls with ``asyncio.run_coroutine_threadsafe``. Only this module imports the
MCP SDK. A call is never retried: past its deadline, or when the transport
breaks mid-call, the effect may have happened remotely and the outcome is
``indeterminate``.

Stdio children are spawned here (not by the SDK's ``stdio_client``) so their
pids are known: ``close()`` ends stdin, then sends SIGTERM, then SIGKILL to
the child's process group, all within the shutdown grace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.text import TextReceiveStream
from mcp import ClientSession
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from mcp.types import CONNECTION_CLOSED, CallToolResult, JSONRPCMessage, TextContent, Tool
from pydantic import ValidationError

from singularity.errors import UpstreamError
from singularity.tools.mcp_config import ServerConfig
from singularity.tools.outcome import FAILED, INDETERMINATE, SUCCESS, ToolOutcome, ToolSpec

logger = logging.getLogger("singularity.tools.mcp")

#: How many lines of a child's stderr are kept to explain a failure.
STDERR_TAIL_LINES = 20
#: A server gets at least this long to start, initialize and list its tools, whatever the call timeout.
MIN_START_TIMEOUT_SECS = 30.0
HTTP_CONNECT_TIMEOUT_SECS = 30.0
HTTP_READ_TIMEOUT_SECS = 300.0
#: Extra seconds the calling thread waits beyond a call's own deadline before giving up on the loop.
LOOP_SLACK_SECS = 5.0


@dataclass
class _Connection:
    config: ServerConfig
    stop: asyncio.Event
    ready: asyncio.Future[None]
    task: asyncio.Task[None] | None = None
    session: ClientSession | None = None
    tools: list[Tool] = field(default_factory=list)
    process: Process | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    last_transport_error: str = ""
    transport_errors: int = 0
    #: Set once the transport is known to be gone; later calls are refused without being sent.
    dead: str = ""

    def describe_death(self) -> str:
        """Return what is known about why the transport closed: exit code, last transport error, stderr."""
        parts = []
        if self.process is not None and self.process.returncode is not None:
            parts.append(f"server {self.config.name} exited with code {self.process.returncode}")
        if self.last_transport_error:
            parts.append(self.last_transport_error)
        if not parts:
            parts.append(f"connection to server {self.config.name} closed")
        return "; ".join(parts)


def _leaves(exc: BaseException) -> list[BaseException]:
    """Return the exceptions inside (possibly nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _connection_closed(exc: BaseException) -> bool:
    return any(isinstance(leaf, McpError) and leaf.error.code == CONNECTION_CLOSED for leaf in _leaves(exc))


def _describe(exc: BaseException) -> str:
    """Return ``Type: message`` for an exception, flattening anyio/asyncio exception groups to their leaves."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    if isinstance(exc, McpError):
        return f"McpError: {exc.error.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _kill_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``pid`` (each child leads its own session); ignore a gone group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class McpHost:
    """The MCP servers of one catalogue: ``start()``, then ``specs()`` and ``call()``, then ``close()``."""

    def __init__(
        self,
        servers: list[ServerConfig],
        *,
        call_timeout: float,
        shutdown_grace: float,
        start_timeout: float | None = None,
    ) -> None:
        self._servers = list(servers)
        self._call_timeout = call_timeout
        self._grace = shutdown_grace
        self._start_timeout = start_timeout if start_timeout is not None else max(call_timeout, MIN_START_TIMEOUT_SECS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, _Connection] = {}
        self._pids: set[int] = set()
        self._closed = False
        #: Set once the loop has been stopped; calls still waiting give up then.
        self._stopped = threading.Event()
        #: Held while stopping and closing the loop, and while cancelling a call's future on it.
        self._loop_lock = threading.Lock()

    # --- lifecycle (caller's thread) --------------------------------------

    def start(self) -> None:
        """Connect every server, initialize it and list all its tools.

        Raises ``UpstreamError(permanent=True)`` naming the first server that
        failed and why; servers already started are closed first.
        """
        if not self._servers:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-host", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start_all(), self._loop)
        try:
            failure = future.result(timeout=self._start_timeout + LOOP_SLACK_SECS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            failure = f"servers did not start within {self._start_timeout:g}s"
        if failure:
            self.close()
            raise UpstreamError(f"mcp: {failure}", permanent=True)

    def close(self) -> None:
        """Close every session and stop every child within the shutdown grace; safe to call twice.

        Children still alive when the grace runs out are killed with SIGKILL.
        """
        if self._closed:
            return
        self._closed = True
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        deadline = time.monotonic() + self._grace
        future = asyncio.run_coroutine_threadsafe(self._stop_all(deadline), loop)
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            future.cancel()
            logger.warning("mcp: sessions did not close within the %gs grace; killing children", self._grace)
        for pid in list(self._pids):
            _kill_group(pid, signal.SIGKILL)
        with self._loop_lock:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
            self._stopped.set()
            if not thread.is_alive():
                loop.close()

    def child_pids(self) -> set[int]:
        """Return the pids of the stdio children started and not yet seen to exit."""
        return set(self._pids)

    def specs(self) -> list[ToolSpec]:
        """Return every server's tools as ``<server>__<tool>``, servers in config order, tools in listed order.

        A tool is ``read_only`` only when the server annotates it ``readOnlyHint: true``.
        """
        specs = []
        for name, connection in self._connections.items():
            for tool in connection.tools:
                specs.append(
                    ToolSpec(
                        name=f"{name}__{tool.name}",
                        description=tool.description or "",
                        parameters=tool.inputSchema or {"type": "object", "properties": {}},
                        source=f"mcp:{name}",
                        read_only=bool(tool.annotations is not None and tool.annotations.readOnlyHint is True),
                    )
                )
        return specs

    def call(self, server: str, tool: str, arguments: dict[str, Any], timeout: float | None = None) -> ToolOutcome:
        """Call ``tool`` on ``server`` once and return its outcome; never raises for tool or transport problems.

        ``raw`` is the structured content, else the text content parsed as JSON
        when it parses, else the text. Status is ``failed`` for an isError
        result or a refused call, ``indeterminate`` past the deadline or when
        the transport broke mid-call.
        """
        name = f"{server}__{tool}"
        connection = self._connections.get(server)
        if connection is None or self._loop is None:
            return ToolOutcome(name, FAILED, None, None, error=f"unknown_tool: {name}")
        if self._closed or connection.session is None:
            return ToolOutcome(
                name, FAILED, None, None, error=f"server {server} is not running: the tool was not called"
            )
        if connection.dead:
            return ToolOutcome(
                name, FAILED, None, None, error=f"server {server} is gone ({connection.dead}): the tool was not called"
            )
        deadline = self._call_timeout if timeout is None else timeout
        with self._loop_lock:
            if self._stopped.is_set():
                return ToolOutcome(name, FAILED, None, None, error="the tools are shut down: the tool was not called")
            future = asyncio.run_coroutine_threadsafe(self._call(connection, tool, arguments, deadline), self._loop)
        give_up = time.monotonic() + deadline + LOOP_SLACK_SECS
        while not self._stopped.is_set() and time.monotonic() < give_up:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                return future.result(timeout=0.1)
        if future.done() and not future.cancelled():
            return future.result()
        with self._loop_lock:
            if not self._stopped.is_set():
                future.cancel()
        if self._stopped.is_set():
            return _indeterminate(name, "the tools were shut down during the call; the tool may have run")
        return _indeterminate(name, f"no answer within {deadline:g}s; the tool may have run")

    def down(self) -> dict[str, str]:
        """Return the servers known to be gone (child exited, transport broken, session ended), each with why.

        Learned without calling a tool: a stdio child's exit code, the
        session's task, the transport's last failure.
        """
        gone = {}
        for name, connection in self._connections.items():
            if connection.dead:
                gone[name] = connection.dead
            elif connection.process is not None and connection.process.returncode is not None:
                gone[name] = connection.describe_death()
            elif connection.task is not None and connection.task.done():
                gone[name] = f"server {name} is not running"
        return gone

    def restart(self, name: str) -> str:
        """Stop what is left of server ``name`` and start it afresh; return "" when it is up again, else why not."""
        if self._loop is None or self._closed or name not in self._connections:
            return f"server {name} cannot be restarted: the tools are shut down"
        future = asyncio.run_coroutine_threadsafe(self._restart(name), self._loop)
        try:
            return future.result(timeout=self._start_timeout + self._grace + LOOP_SLACK_SECS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return f"server {name} failed to start: no answer within {self._start_timeout:g}s"

    # --- on the loop ------------------------------------------------------

    async def _restart(self, name: str) -> str:
        old = self._connections[name]
        old.stop.set()
        if old.task is not None and not old.task.done():
            if old.session is None:
                old.task.cancel()
            _done, pending = await asyncio.wait([old.task], timeout=self._grace)
            for task in pending:
                task.cancel()
        connection = _Connection(
            config=old.config, stop=asyncio.Event(), ready=asyncio.get_running_loop().create_future()
        )
        connection.task = asyncio.create_task(self._serve(connection), name=f"mcp:{name}")
        self._connections[name] = connection
        try:
            async with asyncio.timeout(self._start_timeout):
                await asyncio.shield(connection.ready)
        except TimeoutError:
            return f"server {name} failed to start: no answer within {self._start_timeout:g}s"
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who backs off and tries again
            return f"server {name} failed to start: {self._explain(connection, exc)}"
        return ""

    async def _start_all(self) -> str:
        """Start every server concurrently; return the first failure's description, or "" when all started."""
        for config in self._servers:
            connection = _Connection(
                config=config, stop=asyncio.Event(), ready=asyncio.get_running_loop().create_future()
            )
            connection.task = asyncio.create_task(self._serve(connection), name=f"mcp:{config.name}")
            self._connections[config.name] = connection
        failures = []
        for name, connection in self._connections.items():
            try:
                async with asyncio.timeout(self._start_timeout):
                    await asyncio.shield(connection.ready)
            except TimeoutError:
                failures.append(f"server {name} failed to start: no answer within {self._start_timeout:g}s")
            except Exception as exc:  # noqa: BLE001 - any start failure is reported, with its cause, as UpstreamError
                failures.append(f"server {name} failed to start: {self._explain(connection, exc)}")
        return failures[0] if failures else ""

    @staticmethod
    def _explain(connection: _Connection, exc: BaseException) -> str:
        """Return the cause of a failure, with the child's exit code and stderr tail when there are any."""
        text = connection.describe_death() if _connection_closed(exc) else _describe(exc)
        if connection.stderr_tail:
            text += " | stderr: " + " / ".join(connection.stderr_tail)
        return text

    async def _serve(self, connection: _Connection) -> None:
        """Hold one server's transport and session open until asked to stop; resolve ``ready`` either way."""
        config = connection.config
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.transport == "stdio":
                    read, write = await stack.enter_async_context(self._stdio(connection))
                else:
                    client = await stack.enter_async_context(_http_client(connection))
                    read, write, _session_id = await stack.enter_async_context(
                        streamable_http_client(config.url, http_client=client)
                    )
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                connection.tools = await _list_all_tools(session)
                connection.session = session
                if not connection.ready.done():
                    connection.ready.set_result(None)
                await connection.stop.wait()
        except Exception as exc:  # noqa: BLE001 - recorded on the connection and raised to the starter
            if not connection.ready.done():
                connection.ready.set_exception(exc)
            else:
                logger.warning("mcp: server %s closed with an error: %s", config.name, _describe(exc))
        finally:
            connection.session = None
            if not connection.ready.done():
                connection.ready.set_exception(RuntimeError("stopped before it started"))

    async def _stop_all(self, deadline: float) -> None:
        """Ask every session to stop and wait for their tasks until ``deadline``."""
        tasks = []
        for connection in self._connections.values():
            connection.stop.set()
            if connection.task is not None:
                tasks.append(connection.task)
                if connection.session is None:
                    # Still starting (or already gone): nothing to close politely.
                    connection.task.cancel()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            for task in pending:
                task.cancel()

    async def _call(self, connection: _Connection, tool: str, arguments: dict[str, Any], timeout: float) -> ToolOutcome:
        name = f"{connection.config.name}__{tool}"
        session = connection.session
        if session is None:
            return ToolOutcome(name, FAILED, None, None, error=f"server {connection.config.name} is not running")
        errors_before = connection.transport_errors
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            if connection.transport_errors != errors_before:
                # The SDK logs an HTTP failure and leaves the request waiting; say what broke.
                return _indeterminate(name, f"transport failure: {connection.last_transport_error}")
            return _indeterminate(name, f"no answer within {timeout:g}s; the tool may have run")
        except McpError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                if connection.process is not None:
                    # A closed stdio stream usually means the child died: give it a moment to report its exit code.
                    with anyio.move_on_after(0.5):
                        await connection.process.wait()
                connection.dead = connection.describe_death()
                return _indeterminate(name, f"transport failure: {connection.dead}")
            return ToolOutcome(name, FAILED, None, None, error=f"mcp error: {exc.error.message}")
        except RuntimeError as exc:
            # The SDK refuses structured content that does not match the tool's output schema.
            return ToolOutcome(name, FAILED, None, None, error=f"invalid result: {exc}")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx.TransportError, OSError) as exc:
            connection.dead = connection.describe_death()
            return _indeterminate(name, f"transport failure: {_describe(exc)}")
        return _outcome_of(name, result)

    @contextlib.asynccontextmanager
    async def _stdio(
        self, connection: _Connection
    ) -> AsyncIterator[
        tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
    ]:
        """Spawn the server as a child in its own session and yield the SDK's message streams over its stdio."""
        config = connection.config
        process = await anyio.open_process(
            [config.command, *config.args],
            env={**get_default_environment(), **config.env},
            cwd=config.cwd,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        connection.process = process
        self._pids.add(process.pid)
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_stdout() -> None:
            assert process.stdout is not None
            buffer = ""
            async with read_writer:
                try:
                    async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                        lines = (buffer + chunk).split("\n")
                        buffer = lines.pop()
                        for line in lines:
                            if not line.strip():
                                continue
                            try:
                                message = JSONRPCMessage.model_validate_json(line)
                            except ValidationError as exc:
                                logger.warning("mcp: server %s wrote a line that is not JSON-RPC", config.name)
                                await read_writer.send(exc)
                                continue
                            await read_writer.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                    connection.last_transport_error = f"stdout: {_describe(exc)}"

        async def write_stdin() -> None:
            assert process.stdin is not None
            async with write_reader:
                try:
                    async for message in write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_none=True) + "\n"
                        await process.stdin.send(data.encode())
                except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                    connection.last_transport_error = f"stdin: {_describe(exc)}"

        async def read_stderr() -> None:
            assert process.stderr is not None
            buffer = ""
            async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                lines = (buffer + chunk).split("\n")
                buffer = lines.pop()
                for line in lines:
                    if line.strip():
                        connection.stderr_tail.append(line.strip()[:500])
                        logger.debug("mcp %s stderr: %s", config.name, line)

        async def wait_exit() -> None:
            await process.wait()
            self._pids.discard(process.pid)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(read_stdout)
                group.start_soon(write_stdin)
                group.start_soon(read_stderr)
                group.start_soon(wait_exit)
                try:
                    yield read_stream, write_stream
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop_child(process)
                    group.cancel_scope.cancel()
        finally:
            if process.returncode is not None:
                self._pids.discard(process.pid)

    async def _stop_child(self, process: Process) -> None:
        """End the child's stdin, then SIGTERM, then SIGKILL its group, spending at most the grace."""
        if process.returncode is not None:
            return
        if process.stdin is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await process.stdin.aclose()
        for sig, share in ((None, 0.4), (signal.SIGTERM, 0.3), (signal.SIGKILL, 0.2)):
            if sig is not None:
                _kill_group(process.pid, sig)
            with anyio.move_on_after(self._grace * share):
                await process.wait()
            if process.returncode is not None:
                return


def _http_client(connection: _Connection) -> httpx.AsyncClient:
    """Return an httpx client with the server's headers whose transport records the last transport error.

    The SDK reports a refused or reset connection only as "Connection closed";
    the recorded error is what explains it. Reads may stay open for long
    (server-sent events); each call has its own deadline anyway.
    """

    class RecordingTransport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            try:
                return await super().handle_async_request(request)
            except httpx.TransportError as exc:
                connection.last_transport_error = _describe(exc)
                connection.transport_errors += 1
                raise

    return httpx.AsyncClient(
        headers=connection.config.headers,
        timeout=httpx.Timeout(HTTP_CONNECT_TIMEOUT_SECS, read=HTTP_READ_TIMEOUT_SECS),
        transport=RecordingTransport(),
    )


async def _list_all_tools(session: ClientSession) -> list[Tool]:
    """Return every tool of the session, following ``nextCursor`` through all pages."""
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


def _indeterminate(name: str, error: str) -> ToolOutcome:
    return ToolOutcome(name, INDETERMINATE, None, None, error=error)


def _outcome_of(name: str, result: CallToolResult) -> ToolOutcome:
    """Return the outcome of a tool result: ``failed`` with its text when isError, else ``success`` with raw."""
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    others = [f"<{block.type} content>" for block in result.content if not isinstance(block, TextContent)]
    text = "\n".join(texts + others)
    if result.isError:
        return ToolOutcome(name, FAILED, None, None, error=text or "the tool reported an error")
    raw: Any
    if result.structuredContent is not None:
        raw = result.structuredContent
    else:
        try:
            raw = json.loads(text)
        except ValueError:
            raw = text
    return ToolOutcome(name, SUCCESS, raw, raw)
