"""``POST /api/loop/aa/`` — A/A calibration of an entity's verdicts (issue 31); ``GET /api/loop/aa/<id>/`` reads it.

The same function as ``manage.py loop aa`` and the Policy view's A/A panel
(``evolution.loop.aa``): the request records a report due and a worker runs
it — the pre-merge check with the incumbent as its own candidate (the same
commit on both sides) on freshly frozen sets, and the repair watch read on
windows of one commit. The answer is 202 with the report as it stands; read
it again until its status is ``done`` (or ``failed``). Running one replays
the entity (acting on nothing) and pays its judge, so it is for people only;
agents read. A refusal is ``{error, detail}``: invalid (400), refused (403),
not_found (404).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.loop import aa
from evolution.models import AaReport
from grading.models import Entity
from singularity.auth import is_agent
from singularity.serializers import ErrorSerializer


class AaRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField(help_text="scenario, heartbeat or role")
    target_id = serializers.CharField(help_text="The entity's slug.")
    trials = serializers.IntegerField(
        required=False, default=20, help_text=f"Freshly frozen sets to check, 1–{aa.MAX_TRIALS} (default 20)."
    )


class AaReportSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    entity = serializers.CharField(help_text="<kind>:<id>")
    trials = serializers.IntegerField()
    status = serializers.ChoiceField(choices=[s.value for s in AaReport.Status], help_text="due, done or failed")
    error = serializers.CharField(help_text="Why a failed report failed; empty otherwise.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    words = serializers.CharField(help_text="The report in one paragraph; empty while it is due.")
    check = serializers.JSONField(
        allow_null=True,
        help_text="{possible, why?, commit, validated, regressed, inconclusive, spend_usd, trials: [{trial, anchor, "
        "inputs, heldOut, verdict, inconclusive, rule, reason, spend_usd}]}; money as decimal strings.",
    )
    watch = serializers.JSONField(
        allow_null=True,
        help_text="{possible, why?, commit, runsPerWindow, minFailures, windows, bad, regressed, validated}",
    )
    spend_usd = serializers.CharField(allow_null=True, help_text="What the replays and their grading cost.")


def shown(report: AaReport) -> dict[str, Any]:
    result = report.result or {}
    return {
        "id": report.pk,
        "entity": f"{report.entity.target_kind}:{report.entity.slug}",
        "trials": report.trials,
        "status": report.status,
        "error": report.error,
        "created_by": report.created_by,
        "created_at": report.created_at,
        "finished_at": report.finished_at,
        "words": result.get("words", ""),
        "check": result.get("check"),
        "watch": result.get("watch"),
        "spend_usd": result.get("spend_usd"),
    }


def _error(code: str, detail: str, status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=status)


class LoopAa(APIView):
    @extend_schema(
        operation_id="loop_aa",
        summary="loop_aa: how often the entity's check and watch would speak when nothing changed (A/A)",
        description=(
            "Records an A/A report due and hands it to a worker: the pre-merge check run with the incumbent as its "
            "own candidate (the entity's current commit on both sides) on `trials` freshly frozen sets, each judged "
            "as the real check judges, and the repair watch's count read on windows of graded runs made at one "
            "commit. Answers 202 with the report as it stands; read `GET /api/loop/aa/<id>/` until `status` is "
            "done. People only: it replays the entity and pays its judge."
        ),
        request=AaRequestSerializer,
        responses={
            202: AaReportSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: `detail` names the field (trials)."),
            403: OpenApiResponse(ErrorSerializer, description="refused: an agent's token (people run A/A)."),
            404: OpenApiResponse(ErrorSerializer, description="not_found: the entity names nothing."),
        },
    )
    def post(self, request: Request) -> Response:
        if is_agent(request):
            return _error("refused", "an agent may read A/A reports, not run one: it replays and pays the judge", 403)
        form = AaRequestSerializer(data=request.data if isinstance(request.data, dict) else {})
        if not form.is_valid():
            name, errors = next(iter(form.errors.items()))
            return _error("invalid", f"{name}: {errors[0]}", http.HTTP_400_BAD_REQUEST)
        data = form.validated_data
        entity = Entity.objects.filter(target_kind=data["target_kind"], slug=data["target_id"]).first()
        if entity is None:
            return _error("not_found", f"{data['target_kind']}:{data['target_id']} names no entity", 404)
        actor = request.user.get_username() if request.user.is_authenticated else "api"
        try:
            report = aa.request(entity, trials=data["trials"], actor=actor)
        except aa.AaRefused as exc:
            return _error("invalid", str(exc), http.HTTP_400_BAD_REQUEST)
        return Response(AaReportSerializer(shown(report)).data, status=http.HTTP_202_ACCEPTED)


class LoopAaReport(APIView):
    @extend_schema(
        operation_id="loop_aa_get",
        summary="loop_aa_get: one A/A report as it stands",
        responses={200: AaReportSerializer, 404: OpenApiResponse(ErrorSerializer, description="not_found")},
    )
    def get(self, request: Request, pk: int) -> Response:
        report = AaReport.objects.select_related("entity").filter(pk=pk).first()
        if report is None:
            return _error("not_found", f"A/A report {pk} does not exist", 404)
        return Response(AaReportSerializer(shown(report)).data)
