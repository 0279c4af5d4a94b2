"""hitl's figures for /metrics, read at scrape time: cards waiting on a person, by kind."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from hitl.models import Card


def cards() -> Iterable[Metric]:
    """singularity_cards_pending by kind."""
    family = GaugeMetricFamily("singularity_cards_pending", "Cards waiting on a person, by kind.", labels=["kind"])
    counted = dict(
        Card.objects.filter(status=Card.Status.PENDING).order_by().values_list("kind").annotate(n=Count("pk"))
    )
    for kind in Card.Kind.values:
        family.add_metric([kind], counted.get(kind, 0))
    yield family
