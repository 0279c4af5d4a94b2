"""Grading one booked run: claim it, measure it, judge it (or not, under ``method: none``), record the result.

The database decides who grades: a worker claims the booking with a
conditional ``UPDATE … WHERE status = 'booked'``, so two workers never grade
one run, and writes the result only if its claim still stands (a booking
failed as lost meanwhile keeps that verdict). Any failure settles the grade
``failed`` with the reason — never a score of zero.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import connections, router, transaction
from django.db.models import F
from django.utils import timezone

from grading import judge as judging
from grading.judge import JudgeError
from grading.loop_modules import Measured, MeasureError, measure, measured_ids, measurer, owed_ids, run_info
from grading.loop_modules import _check_unchanged as check_loop_module_unchanged
from grading.loop_modules import _parse as parse_measured
from grading.methods import method_name, resolve_method
from grading.metrics import (
    MetricError,
    catalog_values,
    combine_quality,
    floors_failed,
    judged_ids,
    normalize,
    specs,
)
from grading.models import Entity, Execution, Grade
from grading.pin import changed, snapshot
from singularity.brain import deadline
from singularity.brain.deadline import BrainDeadline
from singularity.brain.sandbox import SandboxError
from singularity.errors import SingularityError
from singularity.gateway import Gateway
from singularity.queue import enqueue

log = logging.getLogger(__name__)

#: The Celery task that grades one booking (grading.tasks.grading), enqueued by name: it imports this module.
GRADE_TASK = "grading.tasks.grading.grade_execution"

#: Asked before grading: a check returning a frozen judge snapshot makes the grade refuse a different judge.
FrozenJudge = Callable[[Grade], "dict[str, Any] | None"]
_frozen_sources: list[FrozenJudge] = []


def register_frozen_judge(source: FrozenJudge) -> FrozenJudge:
    """Register where a cycle's frozen judge is found (the loop uses it); return the source.

    A grade with a frozen snapshot dispatches under its model and fails with
    "judge: <what> changed since the freeze" when the method, the loop module
    or the evaluator role moved.
    """
    if source not in _frozen_sources:
        _frozen_sources.append(source)
    return source


def unregister_frozen_judge(source: FrozenJudge) -> None:
    if source in _frozen_sources:
        _frozen_sources.remove(source)


#: Told, after commit, the ids of grades that just settled (graded or failed); the loop's trigger and watch listen.
Landed = Callable[[list[Any]], None]
_landed: list[Landed] = []


def register_landed(listener: Landed) -> Landed:
    """Register a listener called after commit with the execution ids of grades that just settled."""
    if listener not in _landed:
        _landed.append(listener)
    return listener


def unregister_landed(listener: Landed) -> None:
    if listener in _landed:
        _landed.remove(listener)


def _announce(grade_ids: list[Any]) -> None:
    """Tell every listener, once the settle has committed, which grades landed."""
    if not grade_ids or not _landed:
        return
    ids = list(grade_ids)

    def tell() -> None:
        for listener in list(_landed):
            listener(ids)

    transaction.on_commit(tell)


class GradingFailed(SingularityError):
    """The grading settles failed with ``str(self)``; what was spent and who judged are kept."""

    def __init__(self, message: str, *, judge: dict[str, Any] | None = None, cost: Decimal = Decimal(0)) -> None:
        super().__init__(message)
        self.judge = judge or {}
        self.cost = cost


@dataclass
class Outcome:
    metrics: dict[str, Any]
    judge: dict[str, str]
    passed: bool
    score: float | None = None
    failure_category: str = ""
    criteria: list[dict[str, Any]] = field(default_factory=list)
    feedback: str = ""
    cost: Decimal = Decimal(0)


def _frozen(grade: Grade) -> dict[str, Any] | None:
    for source in list(_frozen_sources):
        frozen = source(grade)
        if frozen:
            return dict(frozen)
    return None


def _refuse_moved(frozen: dict[str, Any] | None, current: dict[str, str]) -> None:
    if frozen is None:
        return
    moved = [word for word in changed(frozen, current) if word != "model"]
    if moved:
        raise GradingFailed(f"judge: {' and '.join(moved)} changed since the freeze", judge=current)


def _without_judge(entity: Entity, execution: Execution, vector: dict[str, Any], loop_hash: str) -> Outcome:
    """Method none: the grade is the measurements; passed when every measured objective and guard is on its floor."""
    metrics = specs(entity.terms)
    below = floors_failed(entity.terms, vector)
    criteria = [
        {
            "criterion": f"{metric_id} on its floor ({'≥' if spec.get('direction', 'max') == 'max' else '≤'} {spec['floor']})",
            "scope": "run",
            "passed": metric_id not in below,
            "score": None,
            "reasoning": f"measured {vector[metric_id]}",
            "evidence": "",
        }
        for metric_id, spec in metrics.items()
        if spec.get("role") in ("objective", "guard") and spec.get("floor") is not None and metric_id in vector
    ]
    return Outcome(
        metrics=vector,
        judge=snapshot(entity, None, loop_hash, ""),
        passed=not below,
        failure_category=("below floor: " + ", ".join(below)) if below else "",
        criteria=criteria,
    )


def _with_judge(
    entity: Entity,
    execution: Execution,
    vector: dict[str, Any],
    loop_hash: str,
    *,
    frozen: dict[str, Any] | None,
    checkout: Any | None,
    gateway: Gateway | None,
) -> Outcome:
    """Ask the judge and fold its answer into the vector: quality, per-criterion verdicts, declared judged metrics."""
    method = resolve_method(entity, checkout=checkout)
    role = judging.resolve_role(entity, checkout=checkout)
    model = (frozen or {}).get("model") or judging.model_for(entity)
    pin = snapshot(entity, method, loop_hash, role.sha256, model=model)
    _refuse_moved(frozen, pin)
    try:
        call = judging.call_judge(entity, execution, method, role, model=model, gateway=gateway)
    except SingularityError as exc:
        raise GradingFailed(str(exc), judge=pin) from exc
    try:
        answer = judging.parse_answer(call.content)
        task_scores = _task_scores(entity, answer.tasks)
        quality = combine_quality(answer.overall_score, task_scores, entity.terms, kind=entity.kind)
        declared = specs(entity.terms)
        for metric_id in judged_ids(entity.terms):
            if metric_id not in answer.metrics:
                raise JudgeError(f"judge: no value for the declared metric {metric_id!r}")
            vector[metric_id] = normalize(metric_id, declared[metric_id], answer.metrics[metric_id])
    except (JudgeError, MetricError) as exc:
        raise GradingFailed(str(exc), judge=pin, cost=call.cost_usd) from exc
    vector["quality"] = quality
    return Outcome(
        metrics=vector,
        judge=pin,
        passed=answer.passed,
        score=quality,
        failure_category="" if answer.passed else (answer.failure_category or "unspecified"),
        criteria=answer.criteria,
        feedback=answer.feedback,
        cost=call.cost_usd,
    )


def _task_scores(entity: Entity, tasks: list[dict[str, Any]]) -> list[float]:
    """Return the judge's score of every task a workflow declares; JudgeError naming a task it did not score."""
    declared = [str(task.get("id")) for task in (entity.frontmatter or {}).get("tasks") or [] if isinstance(task, dict)]
    if entity.kind != Entity.Kind.WORKFLOW or not declared:
        return []
    scored = {task["id"]: float(task["score"]) for task in tasks}
    missing = [task_id for task_id in declared if task_id not in scored]
    if missing:
        raise JudgeError(f"judge: no score for task {', '.join(missing)}")
    return [scored[task_id] for task_id in declared]


def evaluate(
    entity: Entity,
    execution: Execution,
    *,
    frozen: dict[str, Any] | None = None,
    checkout: Any | None = None,
    gateway: Gateway | None = None,
) -> Outcome:
    """Return the outcome of grading ``execution``; GradingFailed (or a SingularityError) when it cannot be graded."""
    measured = measure(entity, execution, checkout=checkout)
    vector: dict[str, Any] = {**catalog_values(execution), **measured.values}
    if method_name(entity) == "none":
        return _unjudged(entity, execution, vector, measured.loop_hash, frozen)
    return _with_judge(entity, execution, vector, measured.loop_hash, frozen=frozen, checkout=checkout, gateway=gateway)


def _unjudged(
    entity: Entity, execution: Execution, vector: dict[str, Any], loop_hash: str, frozen: dict[str, Any] | None
) -> Outcome:
    """Return method none's outcome; GradingFailed when a frozen judge's loop module moved."""
    outcome = _without_judge(entity, execution, vector, loop_hash)
    _refuse_moved(frozen, outcome.judge)
    return outcome


#: A failed grade carries no verdict: whatever an earlier attempt measured is cleared.
_NO_VERDICT: dict[str, Any] = {
    "status": Grade.Status.FAILED,
    "score": None,
    "passed": None,
    "failure_category": "",
    "criteria": [],
    "feedback": "",
    "metrics": {},
}


def _claim(grade: Grade) -> bool:
    """Move the booking to ``grading`` if it is still booked; return whether this caller got it."""
    claimed = Grade.objects.filter(pk=grade.pk, status=Grade.Status.BOOKED).update(
        status=Grade.Status.GRADING, started_at=timezone.now(), attempts=F("attempts") + 1
    )
    return claimed == 1


def _settle(grade: Grade, attempt: int, **fields: Any) -> bool:
    """Write the result if this attempt's claim still stands; return whether it was written."""
    written = Grade.objects.filter(pk=grade.pk, status=Grade.Status.GRADING, attempts=attempt).update(
        graded_at=timezone.now(), **fields
    )
    if not written:
        log.warning("grading of %s finished after its claim was lost; result dropped", grade.execution_id)
    else:
        _announce([grade.pk])
    return written == 1


def _grade(grade: Grade, *, checkout: Any | None = None, gateway: Gateway | None = None) -> bool:
    """Grade one booking if this caller claims it; return whether it did."""
    if not _claim(grade):
        return False
    grade.refresh_from_db()
    attempt = grade.attempts
    entity = Entity.objects.get(pk=grade.entity_id)
    execution = Execution.objects.select_related("entity").get(pk=grade.execution_id)
    try:
        outcome = evaluate(entity, execution, frozen=_frozen(grade), checkout=checkout, gateway=gateway)
    except GradingFailed as failure:
        _settle(grade, attempt, **_NO_VERDICT, error=str(failure), judge=failure.judge, cost_usd=failure.cost)
        return True
    except SingularityError as exc:
        _settle(grade, attempt, **_NO_VERDICT, error=str(exc), judge={}, cost_usd=Decimal(0))
        return True
    except Exception as exc:
        # A bug, not a verdict: record it on the row (so it is not read as lost) and let the task fail loudly.
        _settle(grade, attempt, **_NO_VERDICT, error=f"grading error: {type(exc).__name__}: {exc}", judge={})
        raise
    _settle(
        grade,
        attempt,
        status=Grade.Status.GRADED,
        error="",
        score=outcome.score,
        passed=outcome.passed,
        failure_category=outcome.failure_category,
        criteria=outcome.criteria,
        feedback=outcome.feedback,
        metrics=outcome.metrics,
        judge=outcome.judge,
        cost_usd=outcome.cost,
    )
    return True


def grade_now(grade: Grade, *, checkout: Any | None = None, gateway: Gateway | None = None) -> Grade:
    """Grade a booked run now and return its grade as stored (graded or failed).

    When another worker holds it, or it is no longer booked, nothing is done
    and the stored grade is returned. ``checkout`` and ``gateway`` default to
    the engine's brain checkout and the configured gateway.
    """
    _grade(grade, checkout=checkout, gateway=gateway)
    grade.refresh_from_db()
    return grade


# --- Many at once (method none) -------------------------------------------------

#: What a settled grade writes; ``grade_many`` writes every one for every row.
_RESULT_FIELDS = (
    "status",
    "error",
    "score",
    "passed",
    "failure_category",
    "criteria",
    "feedback",
    "metrics",
    "judge",
    "cost_usd",
    "graded_at",
)


def returns_rows(connection: Any) -> bool:
    """Return True when the database answers ``UPDATE … RETURNING`` (PostgreSQL, SQLite 3.35+)."""
    return bool(connection.features.can_return_columns_from_insert)


def _claim_many(grade_ids: list[Any], now: Any) -> dict[Any, int]:
    """Move the due bookings among ``grade_ids`` to ``grading`` in one UPDATE; return the ones won → their attempt.

    ``UPDATE … RETURNING`` where the database has it; otherwise the claim is
    re-read in the same transaction by the claim's own ``started_at``.
    """
    connection = connections[router.db_for_write(Grade)]
    pk = Grade._meta.pk
    if not returns_rows(connection):
        with transaction.atomic():
            Grade.objects.filter(pk__in=grade_ids, status=Grade.Status.BOOKED, due_at__lte=now).update(
                status=Grade.Status.GRADING, started_at=now, attempts=F("attempts") + 1
            )
            return dict(
                Grade.objects.filter(pk__in=grade_ids, status=Grade.Status.GRADING, started_at=now).values_list(
                    "pk", "attempts"
                )
            )
    quote = connection.ops.quote_name
    column = {
        name: quote(Grade._meta.get_field(name).column) for name in ("status", "started_at", "attempts", "due_at")
    }
    sql = (
        f"UPDATE {quote(Grade._meta.db_table)} SET {column['status']} = %s, {column['started_at']} = %s, "
        f"{column['attempts']} = {column['attempts']} + 1 "
        f"WHERE {quote(pk.column)} IN ({', '.join(['%s'] * len(grade_ids))}) "
        f"AND {column['status']} = %s AND {column['due_at']} <= %s "
        f"RETURNING {quote(pk.column)}, {column['attempts']}"
    )
    when = connection.ops.adapt_datetimefield_value(now)
    params = [Grade.Status.GRADING, when, *(pk.get_db_prep_value(i, connection) for i in grade_ids)]
    params += [Grade.Status.BOOKED, when]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {pk.to_python(row[0]): row[1] for row in cursor.fetchall()}


def _measure_many(
    entity: Entity, executions: list[Execution], checkout: Any | None
) -> dict[Any, Measured | SingularityError]:
    """Return each execution's measurement (or the MeasureError failing it), the loop module loaded once.

    The rules of ``grading.loop_modules.measure`` for a batch of one entity's
    runs, with the check that the module did not move made once, after
    every ``measure()`` of the batch ran.
    """
    wanted, owed = measured_ids(entity), owed_ids(entity)
    try:
        who = measurer(entity, checkout)
    except MeasureError as failure:
        return dict.fromkeys((execution.pk for execution in executions), failure)
    if who.function is None:
        return {execution.pk: Measured(loop_hash=who.loop_hash) for execution in executions}
    function, path, loop_hash, loaded, repo = who.function, who.path, who.loop_hash, who.loaded, who.repo
    results: dict[Any, Measured | SingularityError] = {}
    raw: dict[Any, Any] = {}
    # One thread for the batch's calls, each under its own deadline (a thread a call cost ~1 ms under load).
    answers = deadline.call_each(
        function, [(run_info(execution),) for execution in executions], path=path, name="measure"
    )
    for execution, (value, error) in zip(executions, answers, strict=True):
        if error is None:
            raw[execution.pk] = value
        elif isinstance(error, BrainDeadline | SandboxError):
            results[execution.pk] = MeasureError(str(error))  # the sandbox names the file and what it did
        elif isinstance(error, Exception):
            # The brain's own code: any failure fails this measurement, named.
            results[execution.pk] = MeasureError(f"{path}: measure() raised {type(error).__name__}: {error}")
        else:
            raise error  # a KeyboardInterrupt or SystemExit inside measure() is not the measurement's failure
    if raw and loaded is not None:
        try:
            check_loop_module_unchanged(entity, repo, loaded)
        except MeasureError as failure:
            results.update(dict.fromkeys(raw, failure))
            return results
    for execution in executions:
        if execution.pk not in raw:
            continue
        try:
            values = parse_measured(path, raw[execution.pk], wanted)
        except MeasureError as failure:
            results[execution.pk] = failure
            continue
        missing = [metric_id for metric_id in owed if metric_id not in values]
        if missing and not execution.loop_launched:
            results[execution.pk] = MeasureError(f"{path}: measure() did not return {', '.join(missing)}")
        else:
            results[execution.pk] = Measured(values=values, loop_hash=loop_hash)
    return results


def _result_fields(grade: Grade, entity: Entity, execution: Execution, measured: Measured | SingularityError) -> dict:
    """Return what grading one booking under method none writes: the verdict, or the failure (never a zero)."""
    try:
        if isinstance(measured, SingularityError):
            raise measured
        vector: dict[str, Any] = {**catalog_values(execution), **measured.values}
        outcome = _unjudged(entity, execution, vector, measured.loop_hash, _frozen(grade))
    except GradingFailed as failure:
        return {**_NO_VERDICT, "error": str(failure), "judge": failure.judge, "cost_usd": failure.cost}
    except SingularityError as exc:
        return {**_NO_VERDICT, "error": str(exc), "judge": {}, "cost_usd": Decimal(0)}
    except Exception as exc:
        # A bug, not a verdict: recorded on the row (so it is not read as lost) and logged with its traceback;
        # the rest of the batch is graded all the same.
        log.exception("grading of %s raised", grade.execution_id)
        error = f"grading error: {type(exc).__name__}: {exc}"
        return {**_NO_VERDICT, "error": error, "judge": {}, "cost_usd": grade.cost_usd}
    return {
        "status": Grade.Status.GRADED,
        "error": "",
        "score": outcome.score,
        "passed": outcome.passed,
        "failure_category": outcome.failure_category,
        "criteria": outcome.criteria,
        "feedback": outcome.feedback,
        "metrics": outcome.metrics,
        "judge": outcome.judge,
        "cost_usd": outcome.cost,
    }


def _settle_many(grades: list[Grade]) -> set[Any]:
    """Write each grade's result if its claim still stands (status grading, same attempt); return the pks written.

    One ``UPDATE … FROM (VALUES …) … RETURNING`` per chunk of rows (the
    database's limit on parameters), on PostgreSQL one ``UPDATE … FROM
    jsonb_to_recordset(…)``: the set-based ``_settle``. Django's
    ``bulk_update`` writes the same rows, but builds a ``CASE`` expression
    per row and field, which costs more than the whole grading; it is the
    fallback where the database cannot return rows.
    """
    if not grades:
        return set()
    connection = connections[router.db_for_write(Grade)]
    if not returns_rows(connection):
        with transaction.atomic():
            standing = set(
                Grade.objects.select_for_update()
                .filter(pk__in=[grade.pk for grade in grades], status=Grade.Status.GRADING)
                .values_list("pk", "attempts")
            )
            kept = [grade for grade in grades if (grade.pk, grade.attempts) in standing]
            Grade.objects.bulk_update(kept, _RESULT_FIELDS)
        return {grade.pk for grade in kept}
    quote = connection.ops.quote_name
    pk = Grade._meta.pk
    attempts = Grade._meta.get_field("attempts")
    fields = [Grade._meta.get_field(name) for name in _RESULT_FIELDS]
    columns = [pk, attempts, *fields]
    table = quote(Grade._meta.db_table)
    if connection.vendor == "postgresql":
        return _settle_many_postgres(connection, grades, table, columns)
    slots = "(" + ", ".join(["%s"] * len(columns)) + ")"
    assignments = ", ".join(f"{quote(field.column)} = v.column{n}" for n, field in enumerate(fields, start=3))
    written: set[Any] = set()
    per_statement = max(1, (connection.features.max_query_params or 65535) // len(columns))
    with connection.cursor() as cursor:
        for start in range(0, len(grades), per_statement):
            chunk = grades[start : start + per_statement]
            sql = (
                f"UPDATE {table} SET {assignments} FROM (VALUES {', '.join([slots] * len(chunk))}) AS v "
                f"WHERE {table}.{quote(pk.column)} = v.column1 AND {table}.{quote(attempts.column)} = v.column2 "
                f"AND {table}.{quote(Grade._meta.get_field('status').column)} = %s "
                f"RETURNING {table}.{quote(pk.column)}"
            )
            params: list[Any] = []
            for grade in chunk:
                params.extend(field.get_db_prep_save(getattr(grade, field.attname), connection) for field in columns)
            params.append(Grade.Status.GRADING)
            cursor.execute(sql, params)
            written.update(pk.to_python(row[0]) for row in cursor.fetchall())
    return written


def _json_scalar(value: Any) -> str:
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, date):  # datetimes too
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_rows(objects: list[Any], fields: list[Any]) -> str:
    """Return ``objects`` as one JSON array of {column: value} for ``fields``, for ``recordset`` to read back typed."""
    return json.dumps(
        [{field.column: getattr(obj, field.attname) for field in fields} for obj in objects], default=_json_scalar
    )


def recordset(connection: Any, fields: list[Any]) -> str:
    """Return ``jsonb_to_recordset(%s::jsonb) AS v(<column> <type>, …)``: a JSON parameter read as typed rows.

    PostgreSQL only. A statement with one parameter per value costs the
    driver more, quoting each one into the text, than the database takes
    to run it; this one has a single parameter whatever the rows.
    """
    quote = connection.ops.quote_name
    typed = ", ".join(f"{quote(field.column)} {field.db_type(connection)}" for field in fields)
    return f"jsonb_to_recordset(%s::jsonb) AS v({typed})"


def insert_rows(model: Any, objects: list[Any]) -> None:
    """Insert new rows of ``model``: ``bulk_create``, or on PostgreSQL one ``INSERT … SELECT`` of a JSON parameter.

    The two write the same rows (every concrete field as the object holds
    it); the second spares the driver quoting a parameter per value (see
    ``recordset``), which on a batch costs more than the insert itself.
    """
    connection = connections[router.db_for_write(model)]
    if connection.vendor != "postgresql" or not objects:
        model.objects.bulk_create(objects)
        return
    quote = connection.ops.quote_name
    fields = list(model._meta.concrete_fields)
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(f"v.{quote(field.column)}" for field in fields)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) SELECT {values} FROM {recordset(connection, fields)}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [json_rows(objects, fields)])
    for obj in objects:
        obj._state.adding = False
        obj._state.db = connection.alias


def _settle_many_postgres(connection: Any, grades: list[Grade], table: str, columns: list[Any]) -> set[Any]:
    """PostgreSQL: ``_settle_many`` with the rows as one JSON parameter (``recordset``)."""
    quote = connection.ops.quote_name
    pk, attempts, status = Grade._meta.pk, columns[1], Grade._meta.get_field("status")
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in columns[2:])
    key, tries = quote(pk.column), quote(attempts.column)
    sql = (
        f"UPDATE {table} SET {assignments} FROM {recordset(connection, columns)} "
        f"WHERE {table}.{key} = v.{key} AND {table}.{tries} = v.{tries} AND {table}.{quote(status.column)} = %s "
        f"RETURNING {table}.{key}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [json_rows(grades, columns), Grade.Status.GRADING])
        return {pk.to_python(row[0]) for row in cursor.fetchall()}


def _grade_many(grades: list[Grade], *, checkout: Any | None = None) -> list[Grade]:
    """Grade due bookings together and return the ones this call graded, as written (graded or failed).

    For ``method: none``, where grading calls no model: one conditional
    ``UPDATE`` claims every booking still booked and due, each vector is
    measured with the loop module loaded once per entity, and the results
    are written in one statement for the claims that still stand. A booking
    whose entity is judged by a model is enqueued to the Celery task
    instead, one by one; one another worker holds, or no longer booked, is
    left alone.
    """
    if not grades:
        return []
    entities = Entity.objects.in_bulk({grade.entity_id for grade in grades})
    ours: dict[Any, Grade] = {}
    for grade in grades:
        entity = entities.get(grade.entity_id)
        if entity is None:
            continue
        if method_name(entity) == "none":
            ours[grade.pk] = grade
        else:
            transaction.on_commit(lambda grade_id=str(grade.pk): enqueue(GRADE_TASK, grade_id))
    if not ours:
        return []
    now = timezone.now()
    won = _claim_many(list(ours), now)
    # Read back as stored, as grade_now reads them (instants in UTC, money as the column holds it).
    known = Execution.objects.defer("trace").in_bulk(list(won))
    claimed = [ours[pk] for pk in ours if pk in won and pk in known]  # a run deleted meanwhile took its grade along
    for grade in claimed:
        grade.status, grade.attempts, grade.started_at = Grade.Status.GRADING, won[grade.pk], now
    by_entity: dict[int, list[Execution]] = {}
    for grade in claimed:
        execution = known[grade.pk]
        execution.entity = entities[grade.entity_id]
        by_entity.setdefault(grade.entity_id, []).append(execution)
    measured: dict[Any, Measured | SingularityError] = {}
    for entity_id, executions in by_entity.items():
        measured.update(_measure_many(entities[entity_id], executions, checkout))
    graded_at = timezone.now()
    written: list[Grade] = []
    for grade in claimed:
        fields = _result_fields(grade, entities[grade.entity_id], known[grade.pk], measured[grade.pk])
        grade.graded_at = graded_at
        for name, value in fields.items():
            setattr(grade, name, value)
        written.append(grade)
    settled = _settle_many(written)
    for grade in written:
        if grade.pk not in settled:
            log.warning("grading of %s finished after its claim was lost; result dropped", grade.execution_id)
    kept = [grade for grade in written if grade.pk in settled]
    _announce([grade.pk for grade in kept])
    return kept


def grade_many(grades: list[Grade], *, checkout: Any | None = None) -> list[Grade]:
    """Grade due bookings together (see ``_grade_many``), the hooks it asks memoized for the batch."""
    from grading import scope

    with scope.batch():
        return _grade_many(grades, checkout=checkout)


def grade_by_id(grade_id: Any) -> bool:
    """Grade the booking ``grade_id`` if it is booked and due; return whether this worker graded it."""
    grade = Grade.objects.filter(pk=grade_id, status=Grade.Status.BOOKED, due_at__lte=timezone.now()).first()
    if grade is None:
        return False
    return _grade(grade)
