"""``GET /api/loop/summary/`` — the seed's loop_summary: a window's settles by grade, and what the loop spent.

Fields are snake_case (an addition of ours beside the seed's camelCase tools); money is a decimal string.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.models import Cycle
from evolution.reads import economics
from evolution.reads.status import NotFound
from singularity.serializers import ErrorSerializer, MoneyString


def _counts(name: str, keys: tuple[str, ...], help: str) -> type[serializers.Serializer]:
    fields = {key: serializers.IntegerField(help_text=help.format(key=key)) for key in keys}
    return type(name, (serializers.Serializer,), fields)


def _amounts(name: str, keys: tuple[str, ...], help: str) -> type[serializers.Serializer]:
    fields = {key: MoneyString(help_text=help.format(key=key)) for key in keys}
    return type(name, (serializers.Serializer,), fields)


GradeCounts = _counts("SummaryGradeCounts", economics.GRADES, "Settles graded {key}.")
StatusCounts = _counts("SummaryStatusCounts", tuple(Cycle.Status.values), "Settles at {key}.")
GradeAmounts = _amounts("SummaryGradeAmounts", economics.GRADES, "What the settles graded {key} cost (USD).")


class LoopSummarySerializer(serializers.Serializer):
    since = serializers.DateTimeField(help_text="The window's start (inclusive), over when each cycle settled.")
    until = serializers.DateTimeField(help_text="The window's end (exclusive).")
    target_kind = serializers.CharField(allow_null=True, help_text="The entity asked about; null for the fleet.")
    target_id = serializers.CharField(allow_null=True)
    settled = serializers.IntegerField(help_text="Cycles that settled in the window (refusal rows included).")
    by_grade = GradeCounts(help_text="The settles by the cycle's grade; ungraded: no verdict.")
    by_status = StatusCounts(help_text="The settles by the terminal they settled at.")
    refused = serializers.IntegerField(help_text="Openings refused (the asks the refusal rows fold).")
    spent_usd = MoneyString(help_text="What the settled cycles cost, exact: the sum of the four parts.")
    proposer_usd = MoneyString(help_text="Proposer calls, every round.")
    replays_usd = MoneyString(help_text="The pre-merge check's replays' own model calls.")
    check_judge_usd = MoneyString(help_text="The judge grading the check's replays.")
    watch_judge_usd = MoneyString(help_text="The judge grading the runs the watch booked exempt.")
    spent_by_grade_usd = GradeAmounts()
    spent_measured_nothing_usd = MoneyString(
        help_text="What settled cycles neither the check nor the watch measured cost (skipped, failed, blind)."
    )


class LoopSummary(APIView):
    @extend_schema(
        operation_id="loop_summary",
        summary="loop_summary: a window's settles counted by grade and status, with what the loop spent on them",
        description=(
            "Counts the cycles that settled in [since, until) by grade (Improvement, Regression, Tradeoff, Tie, "
            "Inconclusive, or none) and by status, and carries what they cost to the last decimal: proposer "
            "calls, the check's replays and their grading, the watch's exempt gradings. Without `since` the "
            "window starts at this calendar month's first instant (the project's time zone); without `until` "
            "it ends now."
        ),
        parameters=[
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="ISO 8601; default this month's start."),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="ISO 8601, after since; default now."),
            OpenApiParameter("target_kind", OpenApiTypes.STR, description="scenario, heartbeat or role (with id)."),
            OpenApiParameter("target_id", OpenApiTypes.STR, description="The entity's slug (with target_kind)."),
        ],
        responses={
            200: LoopSummarySerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: `detail` names the parameter."),
            404: OpenApiResponse(ErrorSerializer, description="not_found: the entity names nothing."),
        },
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        try:
            answer = economics.summary(
                since=params.get("since"),
                until=params.get("until"),
                target_kind=params.get("target_kind") or None,
                target_id=params.get("target_id") or None,
            )
        except NotFound as exc:
            return Response({"error": "not_found", "detail": str(exc)}, status=http.HTTP_404_NOT_FOUND)
        except ValueError as exc:
            return Response({"error": "invalid", "detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
        return Response(LoopSummarySerializer(answer).data)
