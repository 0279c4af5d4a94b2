"""grading's figures for /metrics, read from the database at scrape time (``singularity.ops.metrics``).

Runs ingested by source; grades landed, failed and lost (counters: a grade
settles once); bookings waiting and in flight; the judge's latency (from a
grading's start to its landing) and spend, over the grades a model judged.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from grading.booking import LOST
from grading.models import Execution, Grade
from grading.pin import NONE

Status = Grade.Status


def runs() -> Iterable[Metric]:
    """singularity_runs_ingested_total by source."""
    family = CounterMetricFamily(
        "singularity_runs_ingested", "Runs recorded, by where they came from.", labels=["source"]
    )
    counted = dict(Execution.objects.order_by().values_list("source").annotate(n=Count("pk")))
    for source in Execution.Source.values:
        family.add_metric([source], counted.get(source, 0))
    yield family


def grades() -> Iterable[Metric]:
    """Grades by outcome, bookings by state, and the judge's latency and spend (one pass over the grades)."""
    judged = Q(status=Status.GRADED) & ~Q(judge__method=NONE) & Q(started_at__isnull=False)
    took = ExpressionWrapper(F("graded_at") - F("started_at"), output_field=DurationField())
    row = Grade.objects.order_by().aggregate(
        landed=Count("pk", filter=Q(status=Status.GRADED)),
        failed=Count("pk", filter=Q(status=Status.FAILED) & ~Q(error=LOST)),
        lost=Count("pk", filter=Q(status=Status.FAILED, error=LOST)),
        booked=Count("pk", filter=Q(status=Status.BOOKED)),
        grading=Count("pk", filter=Q(status=Status.GRADING)),
        judged=Count("pk", filter=judged),
        judge_time=Sum(took, filter=judged),
        spend=Sum("cost_usd"),
    )
    outcome = CounterMetricFamily("singularity_grades", "Grades settled, by outcome.", labels=["outcome"])
    for name in ("landed", "failed", "lost"):
        outcome.add_metric([name], row[name])
    yield outcome
    pending = GaugeMetricFamily("singularity_grades_pending", "Bookings not yet settled, by state.", labels=["state"])
    pending.add_metric(["booked"], row["booked"])
    pending.add_metric(["grading"], row["grading"])
    yield pending
    seconds = row["judge_time"].total_seconds() if row["judge_time"] is not None else 0.0
    latency = CounterMetricFamily(
        "singularity_judge_seconds", "Seconds from a judged grading's start to its landing (rate sum/count: mean)."
    )
    latency.add_metric([], seconds)
    yield latency
    judged_count = CounterMetricFamily("singularity_judge_grades", "Grades a model judged (latency's count).")
    judged_count.add_metric([], row["judged"])
    yield judged_count
    spend = CounterMetricFamily("singularity_judge_spend_usd", "What grading spent on the judge, in USD.")
    spend.add_metric([], float(row["spend"] or 0))
    yield spend
