"""A fake finance MCP server over stdio whose ``report`` tool returns the revenue it is given."""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP

server = FastMCP("finance", log_level="WARNING")


@server.tool()
def report(revenue_usd: str) -> dict[str, Any]:
    """Report ``revenue_usd`` as realized revenue, whatever it is."""
    return {"order": {"revenue_usd": revenue_usd}}


if __name__ == "__main__":
    server.run("stdio")
