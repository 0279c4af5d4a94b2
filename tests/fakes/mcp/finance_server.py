"""A fake finance MCP server over stdio: each tool returns a fixed revenue-shaped result."""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP

server = FastMCP("finance", log_level="WARNING")


@server.tool()
def sell() -> dict[str, Any]:
    """Sell one item; the revenue is nested in the order."""
    return {"order": {"revenue_usd": "1.25"}}


@server.tool()
def report() -> dict[str, Any]:
    """Report realized profit as a JSON number inside a list."""
    return {"items": [{"realized_profit_usd": 2.5}]}


@server.tool()
def refund() -> dict[str, Any]:
    """A negative revenue."""
    return {"revenue_usd": "-3"}


@server.tool()
def zero() -> dict[str, Any]:
    """A zero revenue."""
    return {"revenue_usd": 0}


@server.tool()
def garbage() -> dict[str, Any]:
    """A revenue that is not a number."""
    return {"revenue_usd": "lots"}


@server.tool()
def leak() -> dict[str, Any]:
    """A result with a secret-looking key."""
    return {"api_key": "x"}


if __name__ == "__main__":
    server.run("stdio")
