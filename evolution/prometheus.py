"""evolution's figures for /metrics, read at scrape time: the loop's cycles by phase and outcome, and the needs-you
count the dashboard shows."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from evolution.models import Cycle
from evolution.steering import needs_you


def cycles() -> Iterable[Metric]:
    """singularity_loop_cycles by phase and outcome (an empty outcome: not settled yet)."""
    family = GaugeMetricFamily(
        "singularity_loop_cycles", "The loop's cycles, by phase and outcome.", labels=["phase", "outcome"]
    )
    rows = Cycle.objects.order_by().values_list("phase", "status").annotate(n=Count("pk"))
    for phase, status, n in rows:
        family.add_metric([phase, status or "open"], n)
    yield family
    waiting = GaugeMetricFamily("singularity_needs_you", 'Waits on a person (the dashboard\'s "N need you").')
    waiting.add_metric([], needs_you.count())
    yield waiting
