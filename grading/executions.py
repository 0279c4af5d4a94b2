"""Executions: one run of an entity, from start to terminal, and runs reported already finished.

``start_execution`` opens a running row recording the commit and definition
hash the run is made of; ``finish_execution`` makes it terminal exactly once
and, once the transaction commits, hands it to the sampler and booking
(``grading.booking.on_terminal``). Runs a script reports through the API
arrive terminal: ``report_execution`` / ``report_many`` validate them strictly
and book them the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from grading.models import Entity, Execution
from grading.spans import COST, ERROR, TOOL, trace_cost, validate_trace
from singularity.errors import ConfigError, StateError
from singularity.fields import check_storable
from singularity.money import MoneyError, parse_money, quantize
from singularity.nul import holds_nul, replaced

logger = logging.getLogger("grading.executions")

RUN_KIND_OF = {
    Entity.Kind.WORKFLOW: Execution.RunKind.WORKFLOW,
    Entity.Kind.PIPELINE: Execution.RunKind.PIPELINE,
    Entity.Kind.HEARTBEAT: Execution.RunKind.HEARTBEAT,
    Entity.Kind.ROLE: Execution.RunKind.EPISODE,
}
TERMINAL = (Execution.Status.SUCCEEDED, Execution.Status.FAILED)
#: The most tool failures one run reports (the column is a 32-bit integer on Postgres).
MAX_TOOL_FAILURES = 2**31 - 1

#: What a reported run may carry; anything else is refused by name.
REPORT_FIELDS = frozenset(
    {"status", "started_at", "completed_at", "cost_usd", "tool_failures", "input", "output", "error", "trace"}
)
#: A reported run may not claim to end later than this past the server's clock.
MAX_CLOCK_SKEW = timedelta(minutes=5)


def run_kind_for(entity: Entity) -> str:
    """Return the run kind of an entity's executions (a role's runs are episodes)."""
    return RUN_KIND_OF[Entity.Kind(entity.kind)]


def plan_terms(entity: Entity) -> dict[str, Any] | None:
    """What a run's plan freezes of the loop when it starts (seed 003, R5.19): a workflow scenario's
    ``loop.enabled`` and ``loop.threshold`` — they decide something about that run, so an edit reaches runs
    planned afterwards, not runs in flight. None for a pipeline, a heartbeat or a role: they read both live.
    ``trigger:`` and the check, watch and deadline knobs are never frozen."""
    if entity.kind != Entity.Kind.WORKFLOW:
        return None
    loop = (entity.terms or {}).get("loop") or {}
    return {"enabled": bool(entity.loop_enabled and loop.get("enabled", True)), "threshold": loop.get("threshold")}


def start_execution(
    entity: Entity,
    *,
    input: dict[str, Any] | None,
    source: str,
    loop_launched: bool = False,
    user: Any = None,
) -> Execution:
    """Create and return a running execution of ``entity`` at the entity's commit and definition hash."""
    if source not in Execution.Source.values:
        raise ConfigError(f"execution source: {source!r} is not one of {', '.join(Execution.Source.values)}")
    return Execution.objects.create(
        entity=entity,
        run_kind=run_kind_for(entity),
        status=Execution.Status.RUNNING,
        source=source,
        input=input if input is not None else {},
        commit=entity.commit,
        definition_hash=entity.definition_hash,
        loop_launched=loop_launched,
        started_by=user if user is not None and getattr(user, "is_authenticated", False) else None,
        started_at=timezone.now(),
        plan_terms=plan_terms(entity),
    )


def storable(evidence: dict[str, Any]) -> dict[str, Any]:
    """Return a run's evidence (its input, output, error, trace) with each NUL of a string or a key as U+FFFD.

    PostgreSQL refuses U+0000 in text and jsonb, SQLite keeps it: a run is
    kept, not refused, the same on both. One pass of the JSON encoder looks;
    only evidence holding a NUL is walked (``singularity.nul``).
    """
    return replaced(evidence) if holds_nul(evidence) else evidence


def finish_execution(
    execution: Execution,
    *,
    status: str,
    output: Any = None,
    error: str = "",
    cost_usd: Decimal = Decimal(0),
    tool_failures: int = 0,
    trace: list[dict[str, Any]] | None = None,
    completed_at: datetime | None = None,
) -> Execution:
    """Make a running execution terminal and return it; booking runs once the transaction commits.

    Raises ``StateError`` when the execution is not running any more (it is
    finished exactly once), ``ConfigError`` for a status that is not terminal.
    A NUL in its output, error or trace is kept as U+FFFD (``storable``).
    """
    if status not in TERMINAL:
        raise ConfigError(f"execution {execution.pk}: status {status!r} is not succeeded or failed")
    cost = quantize(parse_money(cost_usd, what="cost_usd", allow_negative=False))
    completed = completed_at or timezone.now()
    duration_ms = max(0, int((completed - execution.started_at).total_seconds() * 1000))
    fields = {
        "status": status,
        **storable({"output": output, "error": error, "trace": trace if trace is not None else []}),
        "cost_usd": cost,
        "tool_failures": tool_failures,
        "completed_at": completed,
        "duration_ms": duration_ms,
    }
    with transaction.atomic():
        updated = Execution.objects.filter(pk=execution.pk, status=Execution.Status.RUNNING).update(**fields)
        if updated != 1:
            current = Execution.objects.filter(pk=execution.pk).values_list("status", flat=True).first()
            raise StateError(f"execution {execution.pk}: cannot finish it, it is {current or 'gone'}")
        for name, value in fields.items():
            setattr(execution, name, value)
        _book_on_commit(execution)
    return execution


def _book_on_commit(execution: Execution) -> None:
    transaction.on_commit(lambda: book(execution))


def book(execution: Execution) -> Any:
    """Hand a terminal execution to ``grading.booking.on_terminal`` and return what it returns.

    Until the booking module exists the run is left unbooked, with a warning.
    """
    try:
        from grading.booking import on_terminal
    except ModuleNotFoundError as exc:
        if exc.name != "grading.booking":
            raise
        logger.warning("execution %s: not booked, grading.booking is not installed", execution.pk)
        return None
    return on_terminal(execution)


# --- runs reported through the API -------------------------------------------------


def _field(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _instant(data: dict[str, Any], name: str, where: str) -> datetime:
    value = data.get(name)
    label = _field(where, name)
    if value is None:
        raise ConfigError(f"{label}: required (an ISO-8601 instant with a UTC offset)")
    if isinstance(value, datetime):
        parsed: datetime | None = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
    else:
        raise ConfigError(f"{label}: expected an ISO-8601 instant, got {type(value).__name__}")
    if parsed is None:
        raise ConfigError(f"{label}: {value!r} is not an ISO-8601 instant")
    if timezone.is_naive(parsed):
        raise ConfigError(f"{label}: {value!r} has no UTC offset; write it as e.g. 2026-01-01T12:00:00Z")
    return parsed


def validate_report(data: Any, *, where: str = "", trace_checked: bool = False) -> dict[str, Any]:
    """Return the model fields of one reported run, or raise ``ConfigError`` naming the field at fault.

    Required: ``status`` (succeeded|failed), ``started_at`` and ``completed_at``
    (ISO-8601 with an offset, completed ≥ started, not in the future). Optional:
    ``cost_usd`` (a non-negative decimal string or number, read exactly),
    ``tool_failures`` (an integer ≥ 0), ``input`` (a JSON object), ``output``
    (any JSON), ``error`` (text), ``trace`` (a list of spans, ``grading.spans``;
    refused over its limits). Without ``cost_usd`` the run costs what its spans
    cost; without ``tool_failures`` it counts its failed tool spans. With ``trace_checked`` the trace is taken
    as it is: stored spans its caller has checked already (``grading.otlp_assemble``). A NUL in a string or a key
    of ``input``, ``output``, ``error`` or ``trace`` is returned as U+FFFD (``storable``): every run reported, or
    assembled from OTLP, is built here, so both databases store the same run.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'run'}: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - REPORT_FIELDS)
    if unknown:
        raise ConfigError(
            f"{_field(where, unknown[0])}: unknown field; a run carries {', '.join(sorted(REPORT_FIELDS))}"
        )
    status = data.get("status")
    if status not in TERMINAL:
        raise ConfigError(f"{_field(where, 'status')}: expected 'succeeded' or 'failed', got {status!r}")
    started = _instant(data, "started_at", where)
    completed = _instant(data, "completed_at", where)
    if completed < started:
        raise ConfigError(f"{_field(where, 'completed_at')}: {completed.isoformat()} is before started_at")
    if completed > timezone.now() + MAX_CLOCK_SKEW:
        raise ConfigError(f"{_field(where, 'completed_at')}: {completed.isoformat()} is in the future")
    try:
        cost = parse_money(data.get("cost_usd", "0"), what=_field(where, "cost_usd"), allow_negative=False)
        check_storable(cost, what=_field(where, "cost_usd"))
    except MoneyError as exc:
        raise ConfigError(str(exc)) from None
    if quantize(cost) != cost:
        raise ConfigError(f"{_field(where, 'cost_usd')}: {cost} has more than 12 decimal places")
    failures = data.get("tool_failures", 0)
    if isinstance(failures, bool) or not isinstance(failures, int) or not 0 <= failures <= MAX_TOOL_FAILURES:
        raise ConfigError(
            f"{_field(where, 'tool_failures')}: expected an integer from 0 to {MAX_TOOL_FAILURES}, got {failures!r}"
        )
    run_input = data.get("input", {})
    if run_input is None:
        run_input = {}
    if not isinstance(run_input, dict):
        raise ConfigError(f"{_field(where, 'input')}: expected a JSON object, got {type(run_input).__name__}")
    error = data.get("error", "")
    if not isinstance(error, str):
        raise ConfigError(f"{_field(where, 'error')}: expected text, got {type(error).__name__}")
    if trace_checked:
        trace = data.get("trace") or []
    else:
        trace = validate_trace(data.get("trace"), where=_field(where, "trace"))
    if "cost_usd" not in data:
        spent = trace_cost(trace)
        if spent is not None:
            try:
                check_storable(spent, what=_field(where, "trace"))
            except MoneyError as exc:
                raise ConfigError(f"{exc} (the sum of its spans' {COST})") from None
            cost = quantize(spent)
    if "tool_failures" not in data:
        failures = sum(1 for span in trace if span["kind"] == TOOL and span["status"] == ERROR)
    evidence = storable({"input": run_input, "output": data.get("output"), "error": error, "trace": trace})
    return {
        "status": status,
        "started_at": started,
        "completed_at": completed,
        "duration_ms": int((completed - started).total_seconds() * 1000),
        "cost_usd": cost,
        "tool_failures": failures,
        **evidence,
    }


def _reported(entity: Entity, fields: dict[str, Any], user: Any) -> Execution:
    return Execution(
        entity=entity,
        run_kind=run_kind_for(entity),
        source=Execution.Source.API,
        commit=entity.commit,
        definition_hash=entity.definition_hash,
        started_by=user if user is not None and getattr(user, "is_authenticated", False) else None,
        plan_terms=plan_terms(entity),  # a reported run's plan is frozen when the engine records it
        **fields,
    )


def report_execution(entity: Entity, data: dict[str, Any], *, user: Any) -> Execution:
    """Validate one run reported already terminal, record it, book it on commit; return the execution.

    Raises ``ConfigError`` naming the field at fault; nothing is written then.
    """
    execution = _reported(entity, validate_report(data), user)
    with transaction.atomic():
        execution.save(force_insert=True)
        _book_on_commit(execution)
    return execution


def report_many(
    entity_rows: Iterable[tuple[Entity, dict[str, Any]]], *, user: Any, trace_checked: bool = False
) -> list[Execution]:
    """Validate a batch of reported runs, record them in one transaction, book them together on commit.

    ``entity_rows`` is ``(entity, data)`` pairs. Every row is validated
    before anything is written (``ConfigError`` names ``runs[<index>].<field>``),
    so a batch is recorded whole or not at all. The inserts are one
    ``bulk_create`` (on PostgreSQL one ``INSERT … SELECT`` of a JSON
    parameter, ``grading.grade.insert_rows``): the number of queries does not grow with the rows
    (beyond the database's own limit on parameters per statement). Once it
    commits the batch is booked in one pass (``grading.booking.on_terminal_many``). ``trace_checked``: the
    rows' traces are checked already (``validate_report``).
    """
    executions = [
        _reported(entity, validate_report(data, where=f"runs[{index}]", trace_checked=trace_checked), user)
        for index, (entity, data) in enumerate(entity_rows)
    ]
    if not executions:
        return []
    from grading.grade import insert_rows

    with transaction.atomic():
        insert_rows(Execution, executions)
        transaction.on_commit(lambda: book_many(executions))
    return executions


def book_many(executions: list[Execution]) -> Any:
    """Hand a batch of terminal executions to ``grading.booking.on_terminal_many``; return what it returns."""
    from grading.booking import on_terminal_many

    return on_terminal_many(executions)
