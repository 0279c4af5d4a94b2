"""``/metrics``: Prometheus' text format, for a bearer of METRICS_TOKEN or an address in METRICS_ALLOW.

Two kinds of figures (docs/decisions.md, issue 37):

- **request latency** is observed in the web process that served it
  (``observe_request``): under ``up`` gunicorn's workers share it through
  prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), summed
  at scrape time;
- **everything that counts work** (runs ingested, grades landed, failed and
  lost, judge latency and spend, cycles, cards, beings' money, queue depth)
  is read at scrape time from where it is recorded — the database and the
  broker — so it is the same whichever process, on whichever host, did the
  work, and survives restarts. The apps above register their collectors
  here (``register``) in their ``AppConfig.ready``.

Labels carry only fixed names (a view's URL name, a status, a queue, a
being's id): never a secret, a path a caller typed or a person's text.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

log = logging.getLogger(__name__)

#: Seconds: a page is meant to answer within 100 ms; the tail shows how far past it goes.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUEST_LATENCY = Histogram(
    "singularity_http_request_duration_seconds",
    "How long the web took to answer a request, by view (its URL name), method and status.",
    ["view", "method", "status"],
    buckets=BUCKETS,
)

#: A collector yields metric families read at scrape time.
Source = Callable[[], Iterable[Metric]]
_sources: dict[str, Source] = {}


def register(name: str, source: Source) -> None:
    """Add ``source``'s families to every scrape under ``name`` (replacing one of that name)."""
    _sources[name] = source


def observe_request(view: str, method: str, status: int, started: float) -> None:
    """Record one request's latency since ``started`` (``time.perf_counter``)."""
    method = method if method in {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} else "other"
    REQUEST_LATENCY.labels(view=view, method=method, status=str(status)).observe(time.perf_counter() - started)


class _Scraped(Collector):
    """Every registered source, each in its own try: one that fails is reported, the rest still answer."""

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "singularity_metrics_source_up", "Whether a metrics source answered this scrape.", labels=["source"]
        )
        for name, source in list(_sources.items()):
            try:
                yield from list(source())
                up.add_metric([name], 1)
            except Exception:
                log.exception("metrics source %s failed", name)
                up.add_metric([name], 0)
        yield up


def _queues() -> Iterable[Metric]:
    from singularity.queues import depths

    family = GaugeMetricFamily(
        "singularity_queue_depth",
        "Messages waiting in each Celery queue (absent: broker unreachable).",
        labels=["queue"],
    )
    for queue, depth in depths().items():
        if depth is not None:
            family.add_metric([queue], depth)
    yield family


def _beings() -> Iterable[Metric]:
    from singularity.models import Being

    balance = GaugeMetricFamily("singularity_being_balance_usd", "A being's remaining balance.", labels=["being"])
    spent = GaugeMetricFamily(
        "singularity_being_spent_usd", "What a being has spent (model calls and instance time).", labels=["being"]
    )
    earned = GaugeMetricFamily("singularity_being_earned_usd", "What a being has earned.", labels=["being"])
    for pk, remaining, api, instance, won in Being.objects.values_list(
        "pk", "remaining", "api_spent", "instance_spent", "earned"
    ):
        balance.add_metric([str(pk)], float(remaining))
        spent.add_metric([str(pk)], float(api + instance))
        earned.add_metric([str(pk)], float(won))
    yield from (balance, spent, earned)


register("queues", _queues)
register("beings", _beings)


def registry() -> CollectorRegistry:
    """What a scrape reads: the request histograms (every web process's, in multiprocess mode) and the sources."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        scraped = CollectorRegistry()
        multiprocess.MultiProcessCollector(scraped)
    else:
        scraped = CollectorRegistry()
        scraped.register(_Default())
    scraped.register(_Scraped())
    return scraped


class _Default(Collector):
    """This process's own metrics (the request histogram), outside multiprocess mode."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def allowed(headers: Any, remote_addr: str) -> bool:
    """Whether a scrape may read: the bearer of METRICS_TOKEN, or (no token offered) an address in METRICS_ALLOW."""
    from django.conf import settings

    given = headers.get("Authorization", "")
    if given:
        scheme, _, token = given.partition(" ")
        return (
            bool(settings.METRICS_TOKEN)
            and scheme.lower() == "bearer"
            and hmac.compare_digest(token.strip().encode(), settings.METRICS_TOKEN.encode())
        )
    return remote_addr in settings.METRICS_ALLOW


def render() -> bytes:
    """The text a scrape answers."""
    return generate_latest(registry())
