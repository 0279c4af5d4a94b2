"""Turning received OTLP traces into runs: one trace, one run, recorded and graded as a reported run.

``sweep`` (on the beat, ``grading.tasks.grading.assemble_traces``) takes
every pending trace whose root span arrived ``OTLP_GRACE_SECS`` ago or more,
and every trace whose root never arrived ``OTLP_ORPHAN_SECS`` after its first
span, builds each one's run (``run_of``) and records them through the report
path itself (``grading.executions.report_many``: validated, inserted in one
statement, then sampled, judged, measured and handed to the trigger like any
run reported through ``POST /api/runs/report/``). The sweep is idempotent:
a trace is taken under a row lock and marked assembled in the same
transaction, and its pending spans are deleted then. The trace's row itself
(trace id → run) stays ``OTLP_KEEP_SECS`` after assembly, so a late span or
a retried export attaches to its run; then the sweep removes it (``prune``).
A trace that breaks its batch (a value the database refuses, stored bytes
that do not read) is found by taking the batch again apart, and set aside
with its error (``OtlpTrace.assembly_error``) for a person; the others
become runs in the same sweep (``sweep_once``).

The root span is the run: its times, its status (error → failed, with its
status message), its input and output (``gen_ai.input.messages`` /
``gen_ai.output.messages``, or OpenInference's ``input.value`` /
``output.value``). The other spans are the run's tree, a child of the root
shown as a root (issue 28: the execution is the root). A root that is itself
a model or tool call is kept in the tree too, so its tokens and cost are not
lost. The run's cost is the sum of every span's ``singularity.cost_usd``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError, connections, router, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from grading import spans
from grading.executions import report_many, validate_report
from grading.grade import json_rows, recordset
from grading.models import Entity, OtlpSpan, OtlpTrace
from grading.otlp_decode import INPUT_VALUE, OUTPUT_VALUE, json_or_text, most_stored_bytes, stored_span
from grading.otlp_ingest import tree_span
from grading.spans import TraceRefused
from singularity.errors import ConfigError
from singularity.longlived import collector_paused
from singularity.nul import replaced

logger = logging.getLogger("grading.otlp")

#: Traces assembled in one transaction (one ``report_many``).
BATCH = 1000
#: Assembled traces' rows removed in one transaction.
PRUNE_BATCH = 5000


def grace() -> timedelta:
    return timedelta(seconds=float(settings.OTLP_GRACE_SECS))


def orphan_deadline() -> timedelta:
    return timedelta(seconds=float(settings.OTLP_ORPHAN_SECS))


def keep() -> timedelta:
    """How long an assembled trace's row stays (``OTLP_KEEP_SECS``) for its late spans and retries."""
    return timedelta(seconds=float(settings.OTLP_KEEP_SECS))


def _value(attributes: dict[str, Any], messages: str, value: str) -> Any:
    if messages in attributes:
        return {"messages": attributes[messages]}
    if value in attributes:
        return json_or_text(attributes[value])
    return None


def run_of(trace: OtlpTrace, received: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the report of one trace's run (``grading.executions.validate_report``'s fields) from its spans."""
    root = next((span for span in received if span["spanId"] == trace.root_span_id), None)
    kept = [span for span in received if span is not root or root["kind"] != spans.OTHER]
    ids = {span["spanId"] for span in kept}
    tree = sorted((tree_span(span, ids) for span in kept), key=lambda span: (span["startTime"], span["spanId"]))
    cost = spans.trace_cost(received)
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
    return run


def checked(run: dict[str, Any]) -> dict[str, Any]:
    """Return a run the report path accepts: as it is, else with its times brought back to now, else without spans.

    For the rare run the report refuses though each span was read: times
    past the server's clock (an agent's clock ahead), or its spans together
    over ``TRACE_MAX_BYTES``. The run is kept, and its error says what was
    changed and why.
    """
    try:
        validate_report(run)
        return run
    except ConfigError as exc:
        why = str(exc)
    now = timezone.now()
    started, completed = spans.parse_instant(run["started_at"]), spans.parse_instant(run["completed_at"])
    if completed is not None and started is not None and completed > now:
        run = {
            **run,
            "started_at": spans.instant_text(min(started, now)),
            "completed_at": spans.instant_text(now),
            "error": f"{run.get('error') or ''}; its times were not kept: {why}".lstrip("; "),
        }
        try:
            validate_report(run)
            return run
        except ConfigError as exc:
            why = str(exc)
    return {**run, "trace": [], "error": f"{run.get('error') or ''}; its spans were not kept: {why}".lstrip("; ")}


def _read(raw: bytes, trace_id: str) -> dict[str, Any] | None:
    """A pending span in our stored form; None (logged) for one the export's check let by that ``convert`` refuses."""
    try:
        return stored_span(raw, trace_id)
    except TraceRefused as exc:
        logger.warning("OTLP trace %s: a span left out of its run: %s", trace_id, exc)
        return None


def _report(rows: list[tuple[Any, dict[str, Any]]], user: Any) -> list[Any]:
    """``report_many`` of the rows, their traces checked (``_assembled``); when it refuses one, every row is
    checked first (nothing was written)."""
    try:
        return report_many(rows, user=user, trace_checked=True)
    except ConfigError:
        return report_many([(entity, checked(run)) for entity, run in rows], user=user, trace_checked=True)


def _assembled(trace: OtlpTrace, received: list[dict[str, Any]], most_bytes: int) -> dict[str, Any]:
    """The trace's run (``run_of``), its trace checked whole (``grading.spans.check_assembled``), else ``checked``.

    Each span was checked at its export as the report path checks it
    (``grading.otlp_decode.check``), so only what the whole can break is
    checked again; ``most_bytes`` bounds the size of its spans as stored.
    """
    run = run_of(trace, received)
    try:
        spans.check_assembled(run["trace"], most_bytes=most_bytes)
    except TraceRefused:
        return checked(run)
    return run


def _mark_assembled(traces: list[OtlpTrace], now: datetime) -> None:
    """Note each trace's run and the time, in one statement (on PostgreSQL one JSON parameter, as the inserts)."""
    connection = connections[router.db_for_write(OtlpTrace)]
    if connection.vendor != "postgresql":
        OtlpTrace.objects.bulk_update(traces, ["execution", "assembled_at"])
        return
    quote = connection.ops.quote_name
    fields = [OtlpTrace._meta.pk, OtlpTrace._meta.get_field("execution")]
    table, key, run = quote(OtlpTrace._meta.db_table), quote(fields[0].column), quote(fields[1].column)
    sql = (
        f"UPDATE {table} SET {run} = v.{run}, {quote('assembled_at')} = %s "
        f"FROM {recordset(connection, fields)} WHERE {table}.{key} = v.{key}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, json_rows(traces, fields)])


def _due(now: datetime) -> Q:
    return Q(assembled_at=None) & (
        Q(root_received_at__lte=now - grace())
        | Q(root_received_at=None, first_received_at__lte=now - orphan_deadline())
    )


def _locked_due(now: datetime, limit: int) -> list[OtlpTrace]:
    """Up to ``limit`` due traces, oldest first, locked (a trace another sweep holds is skipped)."""
    return list(
        OtlpTrace.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(_due(now))
        .order_by("first_received_at")[:limit]
    )


def _take(traces: list[OtlpTrace], now: datetime) -> None:
    """Make the traces' runs (``report_many``), mark the traces assembled and delete their pending spans.

    The caller holds the traces locked, in a transaction: anything one trace
    breaks (a value the database refuses, stored bytes that do not read)
    raises, and the caller rolls back.
    """
    # Each entity and person read once for the batch (a batch is mostly one agent's), not joined to each trace.
    entities = Entity.objects.in_bulk({trace.entity_id for trace in traces})
    people = get_user_model().objects.in_bulk({trace.started_by_id for trace in traces} - {None})
    received: dict[int, list[dict[str, Any]]] = {trace.pk: [] for trace in traces}
    most_bytes = dict.fromkeys(received, 0)
    trace_ids = {trace.pk: trace.trace_id for trace in traces}
    pending = OtlpSpan.objects.filter(trace_id__in=list(received)).values_list("trace_id", "span", "raw")
    for trace_pk, span, raw in pending:
        if raw is not None:
            span = _read(bytes(raw), trace_ids[trace_pk])
            most_bytes[trace_pk] += most_stored_bytes(raw)
        elif span is not None:  # kept as JSON (before migration 0015)
            most_bytes[trace_pk] += spans.span_bytes(span)
        if span is not None:
            received[trace_pk].append(span)
    traces = [trace for trace in traces if received[trace.pk]]
    rows = [(entities[t.entity_id], _assembled(t, received[t.pk], most_bytes[t.pk])) for t in traces]
    by_user: dict[Any, list[int]] = {}
    for index, trace in enumerate(traces):
        by_user.setdefault(people.get(trace.started_by_id), []).append(index)
    executions: dict[int, Any] = {}
    for user, indexes in by_user.items():
        for index, execution in zip(indexes, _report([rows[i] for i in indexes], user), strict=True):
            executions[index] = execution
    for index, trace in enumerate(traces):
        trace.execution = executions[index]
        trace.assembled_at = now
    _mark_assembled(traces, now)
    OtlpSpan.objects.filter(trace_id__in=list(received)).delete()
    OtlpTrace.objects.filter(pk__in=[pk for pk, got in received.items() if not got]).update(assembled_at=now)


#: Errors that say nothing of a trace (the database gone, a deadlock, a statement cancelled): the batch is left
#: for the next sweep, never set aside.
PASSING = (OperationalError, InterfaceError)
#: How much of an error's text is kept on its trace.
ERROR_CHARS = 2000


def _error_text(exc: BaseException) -> str:
    """``"<class>: <message>"``, bounded, any NUL as U+FFFD (PostgreSQL's text cannot hold one: ``singularity.nul``)."""
    return replaced(f"{type(exc).__name__}: {exc}")[:ERROR_CHARS]


def _set_aside(trace: OtlpTrace, exc: BaseException, now: datetime) -> None:
    """Settle a trace that could not become a run with its error: never taken again, its spans kept, and shown."""
    error = _error_text(exc)
    OtlpTrace.objects.filter(pk=trace.pk).update(assembled_at=now, assembly_error=error)
    logger.warning("OTLP trace %s could not become a run; set aside with its spans kept: %s", trace.trace_id, error)


def _take_apart(traces: list[OtlpTrace], now: datetime) -> None:
    """Take traces whose batch failed in halves, each in a savepoint, down to each trace that fails alone: set aside.

    A batch with one bad trace of n is taken in about 2·log2(n) parts; every
    good trace becomes its run, as in the one transaction it failed in.
    """
    half = max(1, len(traces) // 2)
    for part in (traces[:half], traces[half:]):
        if not part:
            continue
        try:
            with transaction.atomic():
                _take(part, now)
        except PASSING:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a trace breaks, it is isolated and set aside, not lost
            if len(part) == 1:
                _set_aside(part[0], exc, now)
            else:
                _take_apart(part, now)


def sweep_once(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Assemble up to ``limit`` due traces into runs in one transaction; return how many were taken.

    When the batch fails for something one trace holds (not a ``PASSING``
    error), it is rolled back and taken again apart (``_take_apart``): the
    trace that fails alone is set aside with its error (``set_aside``), and
    the others become runs, so no trace waits behind a bad one.
    """
    now = now or timezone.now()
    # A batch's objects live until it ends: the collector would walk them again and again for nothing.
    with collector_paused():
        try:
            with transaction.atomic():
                traces = _locked_due(now, limit)
                if traces:
                    _take(traces, now)
                return len(traces)
        except PASSING:
            raise
        except Exception as exc:  # noqa: BLE001 - one trace broke the batch: found below, not retried whole for ever
            logger.info("OTLP sweep: a batch failed (%s); taking it again apart", _error_text(exc).split("\n")[0])
        with transaction.atomic():
            traces = _locked_due(now, limit)
            _take_apart(traces, now)
            return len(traces)


def set_aside() -> QuerySet[OtlpTrace]:
    """The traces that could not become runs, newest first (``sweep_once``), their entities joined."""
    return OtlpTrace.objects.exclude(assembly_error="").select_related("entity").order_by("-assembled_at", "-pk")


def take_again(traces: QuerySet[OtlpTrace]) -> int:
    """Make traces set aside due again (their spans were kept): the next sweep takes them as it took them first, and
    sets aside again one that still fails. Return how many."""
    return traces.exclude(assembly_error="").update(assembly_error="", assembled_at=None)


def error_in_short(error: str) -> str:
    """A set-aside trace's error as a person reads it first: its first line, and the database's DETAIL when it has one
    (PostgreSQL's message goes on with the statement it refused)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    detail = next((line for line in lines[1:] if line.startswith("DETAIL:")), "")
    return f"{lines[0]} ({detail.removeprefix('DETAIL:').strip()})" if detail else lines[0]


def prune(*, now: datetime | None = None, limit: int = PRUNE_BATCH) -> int:
    """Remove the rows of traces assembled ``OTLP_KEEP_SECS`` ago or more, a batch at a time; return how many.

    A span arriving for a trace after its row is gone opens a new trace,
    closed as an orphan (its root is in the run already) after its deadline.
    """
    cutoff = (now or timezone.now()) - keep()
    total = 0
    while True:
        done = OtlpTrace.objects.filter(assembled_at__lte=cutoff, assembly_error="")  # one set aside waits for a person
        pks = list(done.order_by().values_list("pk", flat=True)[:limit])
        if pks:
            with transaction.atomic():
                OtlpSpan.objects.filter(trace_id__in=pks).delete()
                OtlpTrace.objects.filter(pk__in=pks).delete()
        total += len(pks)
        if len(pks) < limit:
            return total


def sweep(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Assemble every due trace, a batch at a time, then ``prune``; return how many were taken. Idempotent."""
    total = 0
    while True:
        done = sweep_once(now=now, limit=limit)
        total += done
        if done < limit:
            break
    prune(now=now)
    return total
