"""``POST /api/runs/report/``: a script reports runs it made itself, already finished.

The body is one run or a list of up to 1000, each naming its entity as
``"<target_kind>:<slug>"``. Every run is validated strictly
(``grading.executions.validate_report``); a batch is recorded whole or not
at all, in a constant number of queries, and each run is then sampled and
booked like any other. An agent token may report: a run's telemetry is not
a judgement.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from drf_spectacular.utils import (
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.decorators import api_view, parser_classes
from rest_framework.request import Request
from rest_framework.response import Response

from grading.executions import report_execution, report_many, validate_report
from grading.models import Entity
from grading.spans import SpanSerializer
from singularity.apikit.camel import CamelJSONParser, camel
from singularity.errors import ConfigError
from singularity.serializers import ErrorSerializer

MAX_RUNS = 1000


class RunReportParser(CamelJSONParser):
    """The API's parser, a NUL let through: a run's evidence is kept, a NUL as U+FFFD (``validate_report``)."""

    nul_allowed = True


@extend_schema_field(
    {"oneOf": [{"type": "string", "format": "decimal"}, {"type": "number"}], "example": "0.0042", "description": "USD"}
)
class CostField(serializers.Field):
    """A non-negative amount as a decimal string or a JSON number (read through its decimal text)."""

    def to_internal_value(self, data: Any) -> Any:
        return data


@extend_schema_serializer(component_name="ReportedRun")
class RunReportSerializer(serializers.Serializer):
    """One run a script made, already terminal: succeeded or failed, with its times, cost and trace."""

    entity = serializers.CharField(
        help_text="The entity the run is of: `<target_kind>:<slug>`, e.g. `scenario:triage`."
    )
    status = serializers.ChoiceField(choices=["succeeded", "failed"])
    started_at = serializers.DateTimeField(help_text="ISO-8601 with a UTC offset.")
    completed_at = serializers.DateTimeField(help_text="ISO-8601 with a UTC offset; not before started_at.")
    cost_usd = CostField(required=False, help_text="What the run cost; default 0. At most 12 decimal places.")
    tool_failures = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False, default=0)
    input = serializers.JSONField(required=False, help_text="A JSON object; keys starting with `_` are labels.")
    output = serializers.JSONField(required=False, allow_null=True)
    error = serializers.CharField(required=False, allow_blank=True)
    trace = SpanSerializer(
        many=True,
        required=False,
        help_text=(
            "The run's spans (a tree by parentSpanId). Without cost_usd the run costs the sum of its spans' "
            "`singularity.cost_usd`. Over TRACE_MAX_SPANS spans, a span over TRACE_MAX_SPAN_BYTES or the whole "
            "over TRACE_MAX_BYTES, the run is refused naming the limit and the span."
        ),
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        """Return ``{"entity": "<target_kind>:<slug>", "run": <the run's fields as sent>}``, or refuse naming the field."""
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        ref = data.get("entity")
        if not isinstance(ref, str) or ":" not in ref:
            raise serializers.ValidationError({"entity": ["expected '<target_kind>:<slug>'"]})
        run = {key: value for key, value in data.items() if key != "entity"}
        try:
            validate_report(run)
        except ConfigError as exc:
            field, _, why = str(exc).partition(": ")
            raise serializers.ValidationError({field: [why]}) from None
        return {"entity": ref, "run": run}


class ReportedRunsSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.UUIDField(), help_text="The created runs' ids, in the order sent.")


def _first_error(errors: Any, where: str) -> str:
    """Return the first refusal in DRF's error structure as ``<where>.<field>: <why>``."""
    if isinstance(errors, list):
        for index, item in enumerate(errors):
            if item:
                inner = f"{where}[{index}]" if isinstance(item, dict) else where
                return _first_error(item, inner)
        return where
    if isinstance(errors, dict):
        field, messages = next(iter(errors.items()))
        if isinstance(field, int) or str(field).isdigit():  # a list's errors keyed by row
            return _first_error(messages, f"{where}[{field}]")
        label = where if field == "non_field_errors" else f"{where}.{camel(field)}" if where else camel(str(field))
        if isinstance(messages, dict):
            return _first_error(messages, label)
        return f"{label}: {messages[0] if isinstance(messages, list) else messages}"
    return f"{where}: {errors}"


def _invalid(detail: str) -> Response:
    return Response({"error": "invalid", "detail": detail}, status=status.HTTP_400_BAD_REQUEST)


def _entities(refs: list[str]) -> dict[str, Entity]:
    """Return the entities named ``<target_kind>:<slug>`` among ``refs``, by name, in one query."""
    wanted = {tuple(ref.split(":", 1)) for ref in refs}
    query = Q()
    for target_kind, slug in wanted:
        query |= Q(target_kind=target_kind, slug=slug)
    return {str(entity): entity for entity in Entity.objects.filter(query)} if wanted else {}


REPORT_SCHEMA = extend_schema(
    operation_id="runs_report",
    summary="Report runs made outside the engine",
    description=(
        "Record one run, or a list of up to 1000, already terminal. Each names its entity as "
        "`<target_kind>:<slug>`. A batch is recorded whole or refused whole; a refusal names the field "
        "(`runs[3].costUsd: …`). Every recorded run is then sampled and booked for grading like any other. "
        "A NUL character (U+0000) in a run's input, output, error or trace is kept as U+FFFD, the same on "
        "every database. Agent tokens may report."
    ),
    request=PolymorphicProxySerializer(
        component_name="RunReportBody",
        serializers=[RunReportSerializer, RunReportSerializer(many=True)],
        resource_type_field_name=None,
        many=False,
    ),
    responses={
        201: ReportedRunsSerializer,
        400: OpenApiResponse(ErrorSerializer, description="A refused run; `detail` names the row and the field."),
    },
    tags=["runs"],
)


@REPORT_SCHEMA
@api_view(["POST"])
@parser_classes([RunReportParser])
def report_runs(request: Request) -> Response:
    """Record the reported runs and answer 201 with their ids, or 400 naming what was refused."""
    return handle_report(request)


def handle_report(request: Request) -> Response:
    """The report itself, shared by ``POST /api/runs/report/`` and ``POST /api/runs/``."""
    many = isinstance(request.data, list)
    if many and not request.data:
        return _invalid("runs: the list is empty")
    if many and len(request.data) > MAX_RUNS:
        return _invalid(f"runs: at most {MAX_RUNS} runs per request, got {len(request.data)}")
    serializer = RunReportSerializer(data=request.data, many=many)
    if not serializer.is_valid():
        return _invalid(_first_error(serializer.errors, "runs" if many else ""))
    rows: list[dict[str, Any]] = serializer.validated_data if many else [serializer.validated_data]
    found = _entities([row["entity"] for row in rows])
    for index, row in enumerate(rows):
        if row["entity"] not in found:
            where = f"runs[{index}].entity" if many else "entity"
            return _invalid(f"{where}: {row['entity']!r} names no entity")
        if found[row["entity"]].run_refusal():
            where = f"runs[{index}].entity" if many else "entity"
            return _invalid(f"{where}: {found[row['entity']].run_refusal()}")
    try:
        if many:
            executions = report_many([(found[row["entity"]], row["run"]) for row in rows], user=request.user)
        else:
            executions = [report_execution(found[rows[0]["entity"]], rows[0]["run"], user=request.user)]
    except ConfigError as exc:
        return _invalid(str(exc))
    return Response({"ids": [str(execution.pk) for execution in executions]}, status=status.HTTP_201_CREATED)
