"""The demo brain's proposer for the pricing pipeline: move PRICE toward the revenue the runs point at.

The loop calls ``run(ctx, brief)`` with the evolve brief: the pricing
pipeline's files, the window's best and worst runs (each run's output says the
price charged, how many of how many customers bought), the lessons of earlier
rounds. The pricer reads demand off the runs as a straight line — everyone buys
at a price of nothing, the window's share buys at the price charged — so
revenue peaks at half the price where nobody buys; it proposes PRICE halfway
from where it is to that peak. Once the price stands within 5% of the peak it
tries a launch discount instead, once: a 40% DISCOUNT, which sells more but
below the pipeline's margin floor, so the watch regresses it and the loop
reverts it. A discount an earlier round already lost is never tried again.

The answer is the pipeline's whole new file (only its PRICE or DISCOUNT line
changed); None when no run says what the market pays, or nothing is left to
try. It writes nothing anywhere. (Plain functions: the engine builds a brain
module outside ``sys.modules``.)
"""

from __future__ import annotations

import re
import statistics
from decimal import Decimal
from typing import Any

PRICE_LINE = re.compile(r"^PRICE = (?P<value>[0-9.]+)$", re.MULTILINE)
DISCOUNT_LINE = re.compile(r"^DISCOUNT = (?P<value>[0-9.]+)$", re.MULTILINE)
#: How close to the peak the price must stand before the pricer stops moving it.
CLOSE = 0.05
#: The launch discount it tries once at the peak.
LAUNCH_DISCOUNT = 0.4


def pipeline_file(brief: dict[str, Any]) -> dict[str, str] | None:
    """Return the pricing pipeline's file {path, content} from the brief's definition; None without one."""
    for item in (brief.get("definition") or {}).get("files") or []:
        if isinstance(item, dict) and str(item.get("path", "")).endswith(".pipeline.py"):
            return {"path": str(item["path"]), "content": str(item.get("content") or "")}
    return None


def observed(brief: dict[str, Any]) -> list[tuple[Decimal, float]]:
    """Return (price charged, share of customers who bought) for every run of the brief that says both."""
    seen = []
    for run in brief.get("runs") or []:
        output = run.get("output") if isinstance(run, dict) else None
        if not isinstance(output, dict) or not output.get("customers") or output.get("price") is None:
            continue
        seen.append((Decimal(str(output["price"])), int(output["buyers"]) / int(output["customers"])))
    return seen


def peak(price: Decimal, share: float) -> Decimal | None:
    """The revenue-best price under straight-line demand through (0, everyone) and (price, share)."""
    if not 0 < share < 1:
        return None
    nobody = float(price) / (1 - share)
    return Decimal(str(round(nobody / 2, 2)))


def discount_lost(brief: dict[str, Any]) -> bool:
    """Whether an earlier round's discount regressed (or a person turned one down)."""
    for lesson in brief.get("lessons") or []:
        rejected = (lesson.get("rejection") or {}).get("kind") == "human"
        if (lesson.get("outcome") == "regressed" or rejected) and "discount" in (lesson.get("summary") or "").lower():
            return True
    return False


def run(ctx: Any, brief: dict[str, Any]) -> dict[str, Any] | None:
    """Return {summary, hypothesis, files: [the pipeline's whole new file], citedLessons}; None when nothing is to try."""
    file = pipeline_file(brief)
    seen = observed(brief)
    if file is None or not seen:
        return None
    content = file["content"]
    price_match, discount_match = PRICE_LINE.search(content), DISCOUNT_LINE.search(content)
    if price_match is None or discount_match is None:
        return None
    list_price = Decimal(price_match["value"])
    charged = statistics.median(p for p, _ in seen)
    share = statistics.median(s for p, s in seen if p == charged)
    best = peak(charged, share)
    if best is None:
        return None
    if abs(best - list_price) > Decimal(str(CLOSE)) * best:
        target = ((list_price + best) / 2).quantize(Decimal("0.01"))
        new = PRICE_LINE.sub(f"PRICE = {float(target)}", content, count=1)
        summary = f"Move the list price from {list_price} to {target} USD, halfway to the revenue peak near {best}."
        hypothesis = (
            f"At {charged} USD {share:.0%} of customers buy; read as straight-line demand, revenue peaks near "
            f"{best} USD, so a price of {target} should sell enough more to raise the window's median revenue."
        )
    elif Decimal(discount_match["value"]) == 0 and not discount_lost(brief):
        new = DISCOUNT_LINE.sub(f"DISCOUNT = {LAUNCH_DISCOUNT}", content, count=1)
        summary = f"Try a launch discount of {LAUNCH_DISCOUNT:.0%} off the list price of {list_price} USD."
        hypothesis = (
            f"The price stands near the revenue peak ({best} USD); a {LAUNCH_DISCOUNT:.0%} discount should win "
            "enough new buyers to pay for itself."
        )
    else:
        return None
    if ctx is not None and hasattr(ctx, "log"):
        ctx.log(summary)
    return {
        "summary": summary,
        "hypothesis": hypothesis,
        "files": [{"path": file["path"], "content": new}],
        "citedLessons": [],
    }
