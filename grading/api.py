"""The REST API for grading: entities, runs, grades, the run's report, calibration, ratings and grade-now.

Reads are open to people and agents. ``POST /api/ratings/`` is the one door
(``grading.ratings.rate``): only a person rates, so an agent token is
refused. ``POST /api/runs/<id>/grade/`` (eval_start) is open to both.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from grading import api_runs, rate_ask
from grading.calibration import calibration
from grading.models import Entity, Execution, Grade, Rating
from grading.ratings import people_values, rate
from grading.serializers import (
    CalibrationSerializer,
    EntityDetailSerializer,
    EntitySummarySerializer,
    GradeSerializer,
    RateAnswerSerializer,
    RateRequestSerializer,
    RatingRowSerializer,
    RunDetailSerializer,
    RunReportSerializer,
    RunSerializer,
)
from hitl import asks
from singularity.auth import is_agent
from singularity.errors import ConfigError, StateError
from singularity.serializers import ErrorSerializer

#: The door's answer code → HTTP status.
RATE_STATUS = {
    "ok": 200,
    "pending": 202,
    "not_found": 404,
    "precondition": 409,
    "invalid": 400,
    "refused": 403,
    "too_many_pending": 429,
}
INVALID = OpenApiResponse(ErrorSerializer, description="A bad filter; `detail` names the parameter.")
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such entity or run.")


class BadFilter(Exception):
    """A query parameter with a value the endpoint does not take."""


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)


def _choice(request: Request, name: str, allowed: list[str]) -> str:
    """Return the query parameter ``name`` ("" when absent); BadFilter naming it when not one of ``allowed``."""
    value = request.query_params.get(name, "")
    if value and value not in allowed:
        raise BadFilter(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _entity_param(request: Request) -> Entity | None:
    """The entity named by ``?entity=<target_kind>:<slug>``; BadFilter when it names none."""
    value = request.query_params.get("entity", "")
    if not value:
        return None
    target_kind, _, slug = value.partition(":")
    entity = Entity.objects.filter(target_kind=target_kind, slug=slug).first()
    if entity is None:
        raise BadFilter(f"entity: {value!r} names no entity (expected <target_kind>:<slug>)")
    return entity


ENTITY_PARAM = OpenApiParameter("entity", OpenApiTypes.STR, description="Only this entity: <target_kind>:<slug>.")


class FilteredList(generics.ListAPIView):
    """A paginated list whose filters answer 400 naming the parameter."""

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return super().list(request, *args, **kwargs)
        except BadFilter as exc:
            return _error("invalid", str(exc), status.HTTP_400_BAD_REQUEST)


@extend_schema(
    summary="List entities",
    parameters=[
        OpenApiParameter("kind", OpenApiTypes.STR, enum=Entity.Kind.values),
        OpenApiParameter("status", OpenApiTypes.STR, enum=["ok", "error"], description="error: failed to load."),
    ],
    responses={200: EntitySummarySerializer(many=True), 400: INVALID},
)
class EntityList(FilteredList):
    serializer_class = EntitySummarySerializer

    def get_queryset(self) -> QuerySet[Entity]:
        entities = Entity.objects.order_by("kind", "slug", "id")
        if kind := _choice(self.request, "kind", Entity.Kind.values):
            entities = entities.filter(kind=kind)
        state = _choice(self.request, "status", ["ok", "error"])
        if state == "ok":
            entities = entities.filter(load_error="")
        elif state == "error":
            entities = entities.exclude(load_error="")
        return entities


def _get_entity(target_kind: str, slug: str) -> Entity:
    return get_object_or_404(Entity, target_kind=target_kind, slug=slug)


class EntityDetail(APIView):
    @extend_schema(
        summary="Read an entity: resolved terms, the tier of each key, calibration",
        responses={200: EntityDetailSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, target_kind: str, slug: str) -> Response:
        entity = _get_entity(target_kind, slug)
        entity.calibration_rows = calibration(entity)  # type: ignore[attr-defined]
        return Response(EntityDetailSerializer(entity).data)


class EntityCalibration(APIView):
    @extend_schema(
        summary="An entity's calibration per judged human:true metric (empty when nothing to calibrate)",
        responses={200: CalibrationSerializer(many=True), 404: NOT_FOUND},
    )
    def get(self, request: Request, target_kind: str, slug: str) -> Response:
        return Response(CalibrationSerializer(calibration(_get_entity(target_kind, slug)), many=True).data)


@extend_schema_view(
    get=extend_schema(
        summary="List runs, newest first",
        parameters=[
            ENTITY_PARAM,
            OpenApiParameter("status", OpenApiTypes.STR, enum=Execution.Status.values),
            OpenApiParameter(
                "graded", OpenApiTypes.BOOL, description="true: only graded runs; false: only the others."
            ),
        ],
        responses={200: RunSerializer(many=True), 400: INVALID},
    )
)
class RunList(FilteredList):
    serializer_class = RunSerializer
    parser_classes = [api_runs.RunReportParser]

    @extend_schema(operation_id="runs_create")
    @api_runs.REPORT_SCHEMA
    def post(self, request: Request) -> Response:
        """Report runs from a script: the same as ``POST /api/runs/report/``."""
        return api_runs.handle_report(request)

    def get_queryset(self) -> QuerySet[Execution]:
        runs = Execution.objects.select_related("entity", "grade").order_by("-started_at", "-id")
        if entity := _entity_param(self.request):
            runs = runs.filter(entity=entity)
        if state := _choice(self.request, "status", Execution.Status.values):
            runs = runs.filter(status=state)
        graded = _choice(self.request, "graded", ["true", "false"])
        if graded == "true":
            runs = runs.filter(grade__status=Grade.Status.GRADED)
        elif graded == "false":
            runs = runs.exclude(grade__status=Grade.Status.GRADED)
        return runs


def _get_run(run_id: uuid.UUID) -> Execution:
    runs = Execution.objects.select_related("entity", "grade").prefetch_related("ratings__user")
    return get_object_or_404(runs, pk=run_id)


class RunDetail(APIView):
    @extend_schema(
        summary="Read a run with its grade and ratings", responses={200: RunDetailSerializer, 404: NOT_FOUND}
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        return Response(RunDetailSerializer(_get_run(run_id)).data)


def run_report(run: Execution) -> dict[str, Any]:
    """Return the grade report of one run: criteria, each metric's value beside people's median, the judge pin."""
    grade = run.grade if hasattr(run, "grade") else None
    specs = (run.entity.terms.get("evaluation") or {}).get("metrics") or {}
    vector = dict(grade.metrics or {}) if grade else {}
    people = people_values([run.pk]).get(str(run.pk), {})
    raters: dict[str, int] = {}
    for metric_id in Rating.objects.filter(execution=run).values_list("metric_id", flat=True):
        raters[metric_id] = raters.get(metric_id, 0) + 1
    metrics = []
    for metric_id in list(specs) + [m for m in vector if m not in specs]:
        spec = specs.get(metric_id) or {}
        metrics.append(
            {
                "id": metric_id,
                "kind": spec.get("kind"),
                "unit": spec.get("unit"),
                "role": spec.get("role"),
                "judge": vector.get(metric_id),
                "people": people.get(metric_id),
                "raters": raters.get(metric_id, 0),
            }
        )
    return {
        "run_id": run.pk,
        "entity": f"{run.entity.target_kind}:{run.entity.slug}",
        "sampling": run.sampling,
        "grade_status": grade.status if grade else None,
        "score": grade.score if grade else None,
        "passed": grade.passed if grade else None,
        "failure_category": grade.failure_category if grade else "",
        "criteria": grade.criteria if grade else [],
        "metrics": metrics,
        "judge": grade.judge if grade else {},
        "graded_at": grade.graded_at if grade else None,
        "error": grade.error if grade else "",
    }


class RunReport(APIView):
    @extend_schema(
        summary="A run's grade report: criteria, metrics beside people's medians, the judge pin",
        responses={200: RunReportSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        return Response(RunReportSerializer(run_report(_get_run(run_id))).data)


class RunGrade(APIView):
    @extend_schema(
        summary="Grade a run now (eval_start; people and agents): books it, or pulls a delayed booking forward",
        request=None,
        responses={
            200: GradeSerializer,
            404: NOT_FOUND,
            409: OpenApiResponse(ErrorSerializer, description="The run is still running, or its grading is off."),
        },
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        from grading.booking import eval_start

        run = _get_run(run_id)
        if run.loop_launched:
            return _error("precondition", f"run {run.pk} is a loop replay: only its cycle grades it", 409)
        try:
            grade = eval_start(run)
        except (StateError, ConfigError) as exc:
            return _error("precondition", str(exc), status.HTTP_409_CONFLICT)
        return Response(GradeSerializer(grade).data)


@extend_schema(
    summary="List grades, newest booking first",
    parameters=[ENTITY_PARAM, OpenApiParameter("status", OpenApiTypes.STR, enum=Grade.Status.values)],
    responses={200: GradeSerializer(many=True), 400: INVALID},
)
class GradeList(FilteredList):
    serializer_class = GradeSerializer

    def get_queryset(self) -> QuerySet[Grade]:
        grades = Grade.objects.select_related("entity").order_by("-booked_at", "-execution_id")
        if entity := _entity_param(self.request):
            grades = grades.filter(entity=entity)
        if state := _choice(self.request, "status", Grade.Status.values):
            grades = grades.filter(status=state)
        return grades


@extend_schema_view(
    get=extend_schema(
        summary="List people's ratings, newest first",
        parameters=[
            ENTITY_PARAM,
            OpenApiParameter("run_id", OpenApiTypes.UUID, description="Only this run's ratings."),
            OpenApiParameter("metric_id", OpenApiTypes.STR, description="Only this metric's."),
        ],
        responses={200: RatingRowSerializer(many=True), 400: INVALID},
    )
)
class Ratings(FilteredList):
    """GET lists ratings (issue 36); POST is the one door that rates."""

    serializer_class = RatingRowSerializer

    def get_queryset(self) -> QuerySet[Rating]:
        ratings = Rating.objects.select_related("entity", "user").order_by("-created_at", "-id")
        if entity := _entity_param(self.request):
            ratings = ratings.filter(entity=entity)
        if raw := self.request.query_params.get("run_id", ""):
            try:
                ratings = ratings.filter(execution_id=uuid.UUID(raw))
            except ValueError:
                raise BadFilter(f"runId: {raw[:60]!r} is not a run id (a UUID)") from None
        if metric := self.request.query_params.get("metric_id", ""):
            ratings = ratings.filter(metric_id=metric)
        return ratings

    @extend_schema(
        summary="Rate a run (the one door, op eval.rate; an agent's rating waits on a person's card)",
        description=(
            "One rating per person per metric per run: a later one replaces the person's own. A retry with "
            "the same idempotency_key writes nothing and answers the same. Rating a run the sampler passed "
            "by books its grading. An agent token relays a person's rating: it is checked as the door would, "
            "then waits on a person's approval card (202 pending, card_id; the same idempotency_key finds it), "
            "and the person's Approve records it as theirs."
        ),
        request=RateRequestSerializer,
        responses={
            200: RateAnswerSerializer,
            202: OpenApiResponse(RateAnswerSerializer, description="pending: an agent's rating waits on a card."),
            429: OpenApiResponse(
                RateAnswerSerializer, description="too_many_pending: the agent's asks are at the cap."
            ),
            400: OpenApiResponse(
                ErrorSerializer,
                description="invalid: off the scale, unknown metric, … (the door's answer adds ok, code and written).",
            ),
            403: OpenApiResponse(RateAnswerSerializer, description="refused: a loop replay."),
            404: OpenApiResponse(RateAnswerSerializer, description="not_found: no such run."),
            409: OpenApiResponse(RateAnswerSerializer, description="precondition: still running, or grading off."),
        },
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        asked = {
            "run_kind": str(data.get("run_kind") or ""),
            "run_id": str(data.get("run_id") or ""),
            # The door checks the types itself and names the field, like every writer's.
            "idempotency_key": cast(str, data.get("idempotency_key")),
            "ratings": cast(list, data.get("ratings")),
        }
        card = None
        if is_agent(request):
            asker = asks.asker_for(request.user.get_username(), request.auth.name)
            answer, card = rate_ask.ask(user=request.user, asker=asker, **asked)
        else:
            answer = rate(actor_user=request.user, is_agent=False, **asked)
        body: dict[str, Any] = answer.as_dict()
        if not answer.ok and card is None:
            body["error"] = answer.code
        if card is not None:
            body["card_id"] = str(card.pk)
        return Response(body, status=RATE_STATUS[answer.code])
