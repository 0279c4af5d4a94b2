"""The demo's finance MCP server: a simulated shop whose sales the demo being checks every cycle.

Run as a script (``python singularity/demo_servers/finance.py``), it speaks MCP
over stdio. Its one tool, ``check_sales``, reports the orders since the last
check: most checks find none; some find one to three orders, with their
revenue under ``revenue_usd`` (a decimal string), which the being's ledger
credits because the tool is ``finance__*``. The shop is a simulation, and says
so in its results. ``DEMO_FINANCE_SEED`` makes its draws repeatable.
"""

from __future__ import annotations

import os
import random
from decimal import Decimal
from typing import Any

#: The chance that a check finds at least one order.
SALE_CHANCE = 0.35
#: The price of one order: at make run's prices a demo cycle costs about $0.0015, so the shop pays a little more on average.
PRICE_USD = Decimal("0.004")
ITEMS = ("postcard pack", "sticker sheet", "wallpaper download", "recipe card", "tiny poem")


def sales(rng: random.Random) -> dict[str, Any]:
    """Return one check's result: ``{"orders": 0, ...}`` or the orders with their ``revenue_usd``."""
    if rng.random() >= SALE_CHANCE:
        return {"orders": 0, "note": "no sales since the last check", "simulated": True}
    orders = rng.randint(1, 3)
    item = rng.choice(ITEMS)
    return {
        "orders": orders,
        "item": item,
        "unit_price_usd": str(PRICE_USD),
        "revenue_usd": str(PRICE_USD * orders),
        "simulated": True,
    }


def _rng() -> random.Random:
    seed = os.environ.get("DEMO_FINANCE_SEED")
    return random.Random(seed) if seed else random.Random()


def main() -> None:
    from mcp.server.fastmcp import FastMCP

    rng = _rng()
    server = FastMCP(
        "finance",
        instructions="A simulated shop for the demo being: check_sales reports orders and revenue since the last check.",
        log_level="WARNING",
    )

    @server.tool()
    def check_sales() -> dict[str, Any]:
        """Collect the shop's orders since the last check; when there are some, their revenue is in revenue_usd."""
        return sales(rng)

    server.run("stdio")


if __name__ == "__main__":
    main()
