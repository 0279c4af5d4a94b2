"""The tool catalogue a being thinks with: its built-in self tools and every MCP server's tools."""

from __future__ import annotations

import json
import time
from typing import Any

from django.conf import settings

from singularity.errors import ConfigError
from singularity.tools.boundary import cross_boundary
from singularity.tools.builtin import BUILTINS, Builtin, ToolFailure, validate_arguments
from singularity.tools.mcp_config import load_mcp_config
from singularity.tools.mcp_host import McpHost
from singularity.tools.outcome import FAILED, SUCCESS, ToolOutcome, ToolSpec

#: What the OpenAI function-calling API accepts as a function name.
MAX_TOOL_NAME = 64

#: The self tools that only read. Every other built-in writes (the being's mind, its workspace, a child).
READ_ONLY_BUILTINS = frozenset({"self__recall", "self__list_files", "self__read_file"})

#: What a write answers under a loop-launched run: success, marked dry-run, nothing performed.
DRY_RUN_RESULT = {"dry_run": True, "status": "success"}


def check_names(specs: list[ToolSpec]) -> None:
    """Raise ``ConfigError`` when two tools share a name or a name is not a valid function name."""
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            raise ConfigError(f"tools: {spec.name}: offered by both {seen[spec.name]} and {spec.source}")
        if len(spec.name) > MAX_TOOL_NAME or not all(c.isascii() and (c.isalnum() or c in "_-") for c in spec.name):
            raise ConfigError(
                f"tools: {spec.name!r} from {spec.source}: a tool name is at most {MAX_TOOL_NAME} letters, digits, '_' or '-'"
            )
        seen[spec.name] = spec.source


class ToolCatalogue:
    """Built-in tools first, then MCP tools in config order; ``call`` never raises for tool problems."""

    def __init__(self, builtins: tuple[Builtin, ...] = BUILTINS, host: McpHost | None = None) -> None:
        self._builtins = {tool.name: tool for tool in builtins}
        self._host = host
        self._specs = [
            ToolSpec(t.name, t.description, t.parameters, "builtin", read_only=t.name in READ_ONLY_BUILTINS)
            for t in builtins
        ]
        if host is not None:
            self._specs.extend(host.specs())
        check_names(self._specs)
        self._by_name = {spec.name: spec for spec in self._specs}
        #: Servers found down: (failed restarts, monotonic time of the next attempt).
        self._backoff: dict[str, tuple[int, float]] = {}

    def specs(self) -> list[ToolSpec]:
        """Return every tool's spec in the catalogue's stable order."""
        return list(self._specs)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Return the tools in the OpenAI chat-completions ``tools`` format, in stable order.

        The tools of an MCP server known to be down are left out: the model is
        not offered what cannot answer.
        """
        down = {f"mcp:{name}" for name in self._host.down()} if self._host is not None else set()
        return [
            {"type": "function", "function": {"name": s.name, "description": s.description, "parameters": s.parameters}}
            for s in self._specs
            if s.source not in down
        ]

    def revive(self) -> list[str]:
        """Restart the MCP servers found down whose backoff has passed; return one line per server seen down.

        The first restart is tried at once; after each failed one the next
        waits twice as long, from ``SINGULARITY_MCP_RESTART_BACKOFF_SECS`` up
        to 64 times it. Costs no model call.
        """
        if self._host is None:
            return []
        notes = []
        down = self._host.down()
        now = time.monotonic()
        for name, why in down.items():
            failures, next_at = self._backoff.get(name, (0, 0.0))
            if now < next_at:
                notes.append(f"server {name} is down ({why}); next restart in {next_at - now:.1f}s")
                continue
            problem = self._host.restart(name)
            if problem:
                wait = settings.SINGULARITY_MCP_RESTART_BACKOFF_SECS * 2 ** min(failures, 6)
                self._backoff[name] = (failures + 1, time.monotonic() + wait)
                notes.append(f"server {name} is down ({why}); restart failed: {problem}; next try in {wait:g}s")
            else:
                self._backoff.pop(name, None)
                notes.append(f"server {name} was down ({why}) and has been restarted")
        for name in set(self._backoff) - set(down):
            del self._backoff[name]
        self._refresh_specs()
        return notes

    def _refresh_specs(self) -> None:
        """Take the tool lists of restarted servers (they may have changed); keep the old ones if they now clash."""
        assert self._host is not None
        builtins = [spec for spec in self._specs if spec.source == "builtin"]
        specs = builtins + self._host.specs()
        try:
            check_names(specs)
        except ConfigError:
            return
        self._specs = specs
        self._by_name = {spec.name: spec for spec in specs}

    def writes(self, name: str) -> bool:
        """True unless the tool is declared read-only; an unknown tool counts as a write."""
        spec = self._by_name.get(name)
        return spec is None or not spec.read_only

    def call(self, being: Any, name: str, arguments: str | dict[str, Any], *, dry_run: bool = False) -> ToolOutcome:
        """Run one tool call and return its outcome, timed, with ``result`` past the output boundary.

        Failed and indeterminate outcomes show the model ``{"error": <error>}``;
        a rejected success keeps status ``success`` and its ``raw``. Under
        ``dry_run`` (a loop-launched run) a tool that writes — every built-in
        but the reads, every MCP tool not annotated ``readOnlyHint: true`` —
        answers ``DRY_RUN_RESULT`` with ``dry_run`` set and performs nothing;
        a call that would be refused anyway (unknown tool, bad arguments) is
        refused the same way. Reads run live.
        """
        started = time.monotonic()
        outcome = self._dispatch(being, name, arguments, dry_run=dry_run)
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        shown = outcome.raw if outcome.status == SUCCESS else {"error": outcome.error}
        _accepted, outcome.result = cross_boundary(shown)
        return outcome

    def _dispatch(self, being: Any, name: str, arguments: str | dict[str, Any], *, dry_run: bool) -> ToolOutcome:
        if name not in self._by_name:
            return _failed(name, f"unknown_tool: {name}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return _failed(name, f"invalid arguments: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
        if not isinstance(arguments, dict):
            return _failed(name, f"invalid arguments: expected a JSON object, got {type(arguments).__name__}")
        replay = dry_run and self.writes(name)
        builtin = self._builtins.get(name)
        if builtin is not None:
            return _run_builtin(builtin, being, arguments, dry_run=replay)
        if replay:
            return _dry_run(name)
        assert self._host is not None
        server, tool = name.split("__", 1)
        return self._host.call(server, tool, arguments)

    def close(self) -> None:
        """Stop the MCP servers within the shutdown grace."""
        if self._host is not None:
            self._host.close()

    def __enter__(self) -> ToolCatalogue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _failed(name: str, error: str) -> ToolOutcome:
    return ToolOutcome(name, FAILED, None, None, error=error)


def _dry_run(name: str) -> ToolOutcome:
    result = dict(DRY_RUN_RESULT)
    return ToolOutcome(name, SUCCESS, result, result, dry_run=True)


def _run_builtin(builtin: Builtin, being: Any, arguments: dict[str, Any], *, dry_run: bool = False) -> ToolOutcome:
    problem = validate_arguments(builtin.parameters, arguments)
    if problem:
        return _failed(builtin.name, f"invalid arguments: {problem}")
    if dry_run:
        return _dry_run(builtin.name)
    try:
        raw = builtin.run(being, arguments)
    except ToolFailure as exc:
        return _failed(builtin.name, str(exc))
    return ToolOutcome(builtin.name, SUCCESS, raw, raw)


def build_catalogue(
    *,
    mcp_config_path: str | None = None,
    call_timeout: float | None = None,
    shutdown_grace: float | None = None,
    include_builtins: bool = True,
) -> ToolCatalogue:
    """Return a started catalogue: built-ins plus the servers of the MCP config (none when no config is set).

    ``include_builtins=False`` leaves out the being's self tools (a workflow
    run has no being: it gets the MCP tools only).

    Raises ``ConfigError`` for a bad config or clashing tool names, and
    ``UpstreamError(permanent=True)`` when a server fails to start; nothing is
    left running in either case.
    """
    path = settings.SINGULARITY_MCP_CONFIG if mcp_config_path is None else mcp_config_path
    timeout = settings.SINGULARITY_TOOL_TIMEOUT_SECS if call_timeout is None else call_timeout
    grace = settings.SINGULARITY_SHUTDOWN_GRACE_SECS if shutdown_grace is None else shutdown_grace
    builtins = BUILTINS if include_builtins else ()
    servers = load_mcp_config(path) if path else []
    if not servers:
        return ToolCatalogue(builtins)
    host = McpHost(servers, call_timeout=timeout, shutdown_grace=grace)
    host.start()
    try:
        return ToolCatalogue(builtins, host=host)
    except ConfigError:
        host.close()
        raise
