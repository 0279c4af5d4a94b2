"""The demo pricing pipeline: a seeded market simulation priced by the constants below.

The constants are the pipeline's parameters: the loop's proposer edits them
and the graded revenue says whether the edit helped. The simulation writes
nothing anywhere, so a loop-launched run (``ctx.loop_launched``) needs no
different path.
"""

from __future__ import annotations

import random
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

# --- Parameters -------------------------------------------------------------
#: List price in USD.
PRICE = 22.0
#: Share taken off the list price, 0..1.
DISCOUNT = 0.0

# --- The market (not a parameter: changing it changes what is measured) ----
CUSTOMERS = 200
#: Willingness to pay is uniform between nothing and this, in USD: demand falls in a straight line.
WTP_MAX = 30.0
#: What one sale costs us, in USD: the margin is what a sale keeps of its price.
UNIT_COST = 7.0

CENT = Decimal("0.01")


def charged_price() -> Decimal:
    """Return the price a customer pays, in USD to the cent: PRICE less DISCOUNT."""
    if not 0 <= DISCOUNT < 1:
        raise ValueError(f"pricing: DISCOUNT must be in [0, 1), not {DISCOUNT!r}")
    if PRICE <= 0:
        raise ValueError(f"pricing: PRICE must be positive, not {PRICE!r}")
    return (Decimal(str(PRICE)) * (1 - Decimal(str(DISCOUNT)))).quantize(CENT, rounding=ROUND_HALF_EVEN)


def simulate(seed: int, price: Decimal) -> int:
    """Return how many of CUSTOMERS buy at ``price`` in the market drawn from ``seed``."""
    rng = random.Random(seed)
    return sum(1 for _ in range(CUSTOMERS) if Decimal(str(rng.uniform(0, WTP_MAX))) >= price)


def margin(price: Decimal) -> Decimal:
    """Return the share of ``price`` a sale keeps after UNIT_COST, to four places (negative below cost)."""
    return ((price - Decimal(str(UNIT_COST))) / price).quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)


def run(ctx: Any, input: dict[str, Any] | None) -> dict[str, Any]:
    """Return {"revenue", "price" (decimal strings, USD), "buyers", "customers" (ints), "margin" (decimal string)}.

    ``input["seed"]`` (an integer, default 0) picks the market.
    """
    seed = (input or {}).get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"pricing: input.seed must be an integer, not {seed!r}")
    price = charged_price()
    buyers = simulate(seed, price)
    return {
        "revenue": str(price * buyers),
        "buyers": buyers,
        "customers": CUSTOMERS,
        "price": str(price),
        "margin": str(margin(price)),
    }
