"""A fake MCP server over stdio (or streamable HTTP through ``http_server.py``) for the tool tests.

With ``--stubborn`` it ignores SIGTERM and keeps running after stdin ends.

``write_marker`` and ``crash`` append a line to a file so tests can count
how many times a tool really ran; ``read_marker`` (annotated read-only)
only counts them, so a test can see a read answer live under a replay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations


def _mark(path: str, what: str) -> None:
    with open(path, "a", encoding="utf-8") as marker:
        marker.write(what + "\n")


def build(server: FastMCP) -> FastMCP:
    """Register the echo tools on ``server`` and return it."""

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def fail() -> str:
        """Always raise, which the client sees as isError."""
        raise ValueError("the tool failed on purpose")

    @server.tool()
    def crash(marker: str = "") -> str:
        """Exit the whole server process in the middle of the call."""
        if marker:
            _mark(marker, "crash")
        os._exit(1)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep without blocking the server, then answer."""
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    def write_marker(path: str) -> dict[str, int]:
        """Append a line to ``path`` and return how many lines it has."""
        _mark(path, "ran")
        with open(path, encoding="utf-8") as marker:
            return {"lines": sum(1 for _ in marker)}

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def read_marker(path: str) -> dict[str, int]:
        """A read-only tool: return how many lines ``path`` has."""
        with open(path, encoding="utf-8") as marker:
            return {"lines": sum(1 for _ in marker)}

    return server


if __name__ == "__main__":
    stubborn = "--stubborn" in sys.argv
    if stubborn:
        # Only SIGKILL ends this server: it ignores SIGTERM and outlives the end of stdin.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    build(FastMCP("echo", log_level="WARNING")).run("stdio")
    while stubborn:
        time.sleep(1)
