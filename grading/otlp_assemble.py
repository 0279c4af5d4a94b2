"""Turning received OTLP traces into runs: one trace, one run, recorded and graded as a reported run.

``sweep`` (on the beat, ``grading.tasks.grading.assemble_traces``) takes
every pending trace whose root span arrived ``OTLP_GRACE_SECS`` ago or more,
and every trace whose root never arrived ``OTLP_ORPHAN_SECS`` after its first
span, builds each one's run (``run_of``) and records them through the report
path itself (``grading.executions.report_many``: validated, inserted in one
statement, then sampled, judged, measured and handed to the trigger like any
run reported through ``POST /api/runs/report/``). The sweep is idempotent:
a trace is taken under a row lock and marked assembled in the same
transaction, and its pending spans are deleted then.

The root span is the run: its times, its status (error → failed, with its
status message), its input and output (``gen_ai.input.messages`` /
``gen_ai.output.messages``, or OpenInference's ``input.value`` /
``output.value``). The other spans are the run's tree, a child of the root
shown as a root (issue 28: the execution is the root). A root that is itself
a model or tool call is kept in the tree too, so its tokens and cost are not
lost. The run's cost is the sum of every span's ``singularity.cost_usd``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from grading import spans
from grading.executions import report_many, validate_report
from grading.models import OtlpSpan, OtlpTrace
from grading.otlp_decode import INPUT_VALUE, OUTPUT_VALUE
from grading.otlp_ingest import tree_span
from singularity.errors import ConfigError

#: Traces assembled in one transaction (one ``report_many``).
BATCH = 1000


def grace() -> timedelta:
    return timedelta(seconds=float(settings.OTLP_GRACE_SECS))


def orphan_deadline() -> timedelta:
    return timedelta(seconds=float(settings.OTLP_ORPHAN_SECS))


def _value(attributes: dict[str, Any], messages: str, value: str) -> Any:
    if messages in attributes:
        return {"messages": attributes[messages]}
    if value in attributes:
        raw = attributes[value]
        if isinstance(raw, str):
            try:
                return json.loads(raw)
            except json.JSONDecodeError:
                return raw
        return raw
    return None


def run_of(trace: OtlpTrace, received: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the report of one trace's run (``grading.executions.validate_report``'s fields) from its spans."""
    root = next((span for span in received if span["spanId"] == trace.root_span_id), None)
    kept = [span for span in received if span is not root or root["kind"] != spans.OTHER]
    ids = {span["spanId"] for span in kept}
    tree = sorted((tree_span(span, ids) for span in kept), key=lambda span: (span["startTime"], span["spanId"]))
    cost = spans.totals(received)["cost_usd"]
    if root is None:
        run: dict[str, Any] = {
            "status": "failed",
            "started_at": min(span["startTime"] for span in received),
            "completed_at": max(span["endTime"] for span in received),
            "error": (
                f"trace {trace.trace_id}: its root span never arrived within {orphan_deadline().total_seconds():g} s "
                "of its first span (OTLP_ORPHAN_SECS); closed as failed with the spans that did"
            ),
            "input": {},
        }
    else:
        attributes = root["attributes"]
        failed = root["status"] == spans.ERROR
        run_input = _value(attributes, spans.INPUT_MESSAGES, INPUT_VALUE)
        run = {
            "status": "failed" if failed else "succeeded",
            "started_at": root["startTime"],
            "completed_at": root["endTime"],
            "error": (root["statusMessage"] or "the root span's status is ERROR") if failed else "",
            "input": run_input if isinstance(run_input, dict) else ({"input": run_input} if run_input else {}),
            "output": _value(attributes, spans.OUTPUT_MESSAGES, OUTPUT_VALUE),
        }
    run["trace"] = tree
    if cost is not None:
        run["cost_usd"] = str(cost)
    try:
        validate_report(run)
    except ConfigError as exc:  # the whole is over a limit no single span is: keep the run, say why the tree is not
        run["trace"] = []
        run["error"] = f"{run['error']}; its spans were not kept: {exc}".lstrip("; ")
        run["cost_usd"] = str(cost or Decimal(0))
    return run


def _due(now: datetime) -> Q:
    return Q(assembled_at=None) & (
        Q(root_received_at__lte=now - grace())
        | Q(root_received_at=None, first_received_at__lte=now - orphan_deadline())
    )


def sweep_once(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Assemble up to ``limit`` due traces into runs in one transaction; return how many were taken."""
    now = now or timezone.now()
    with transaction.atomic():
        traces = list(
            OtlpTrace.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(_due(now))
            .select_related("entity", "started_by")
            .order_by("first_received_at")[:limit]
        )
        if not traces:
            return 0
        received: dict[int, list[dict[str, Any]]] = {trace.pk: [] for trace in traces}
        for trace_pk, span in OtlpSpan.objects.filter(trace_id__in=list(received)).values_list("trace_id", "span"):
            received[trace_pk].append(span)
        traces = [trace for trace in traces if received[trace.pk]]
        rows = [(trace.entity, run_of(trace, received[trace.pk])) for trace in traces]
        by_user: dict[Any, list[int]] = {}
        for index, trace in enumerate(traces):
            by_user.setdefault(trace.started_by, []).append(index)
        executions: dict[int, Any] = {}
        for user, indexes in by_user.items():
            for index, execution in zip(indexes, report_many([rows[i] for i in indexes], user=user), strict=True):
                executions[index] = execution
        for index, trace in enumerate(traces):
            trace.execution = executions[index]
            trace.assembled_at = now
        OtlpTrace.objects.bulk_update(traces, ["execution", "assembled_at"])
        OtlpSpan.objects.filter(trace_id__in=list(received)).delete()
        OtlpTrace.objects.filter(pk__in=[pk for pk, got in received.items() if not got]).update(assembled_at=now)
    return len(received)


def sweep(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Assemble every due trace, a batch at a time; return how many were taken. Idempotent."""
    total = 0
    while True:
        done = sweep_once(now=now, limit=limit)
        total += done
        if done < limit:
            return total
