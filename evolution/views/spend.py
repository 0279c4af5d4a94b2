"""The entity page's Spend section: what the loop cost per month and what it moved (issue 16).

Read by ``pages.entity_cycles_context``; the numbers are ``evolution.reads.economics``'s.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone

from evolution.reads import economics
from grading.models import Entity
from singularity.display import usd_text
from singularity.plots import HLine, Series, line_chart


def spend_context(entity: Entity) -> dict[str, Any]:
    """{months, ceiling, refused, this_month, plot}: the section's facts and its plot of the months' spend."""
    facts = economics.entity_months(entity)
    months = list(reversed(facts["months"]))  # oldest first, as the plot reads
    labels = {Decimal(n): f"{timezone.localtime(m.start):%b %Y}" for n, m in enumerate(months, start=1)}
    points = [(n, m.spent_usd) for n, m in enumerate(months, start=1)]
    hlines = [HLine(facts["ceiling"], "Monthly ceiling", fit=True)] if facts["ceiling"] is not None else []
    plot = ""
    if any(m.cycles for m in months):
        plot = line_chart(
            [Series("Loop spend", points, color="#0072B2")],
            width=640,
            height=220,
            y_label="USD",
            x_label="month",
            hlines=hlines,
            title=f"{entity.name or entity.slug}: what the loop spent each month",
            y_format=usd_text,
            x_format=lambda x: labels.get(Decimal(x), ""),
        )
    return {**facts, "plot": plot}
