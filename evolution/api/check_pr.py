"""``POST /api/loop/check-pr/``: the pre-merge check on a pull request anyone opened against the brain (issue 35).

Body ``{"number": 12}``. Answers the check's record: the worst verdict (``regressed``, ``unvalidated``,
``validated``, or ``none`` when the PR changes no loop entity's files) and each entity's answer with its pairs. The
PR gets ``singularity/validation`` and a comment either way. A CI job fails on ``"verdict": "regressed"``
(docs/check-pr-workflow.yml). Anyone signed in may ask, a script's token included: it changes nothing in the brain.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.prcheck import PullCheckError, check_pr
from singularity.auth import is_agent
from singularity.errors import SingularityError
from singularity.serializers import ErrorSerializer


class CheckPrRequestSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=1, help_text="The pull request's number.")


class CheckedEntitySerializer(serializers.Serializer):
    entity = serializers.CharField(help_text='"<kind>:<slug>"')
    name = serializers.CharField()
    verdict = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    rule = serializers.CharField(allow_null=True, required=False)
    pairs = serializers.ListField(child=serializers.DictField(), help_text="Each frozen input's two sides.")


class PullCheckSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    head_sha = serializers.CharField()
    base_sha = serializers.CharField()
    verdict = serializers.ChoiceField(choices=["validated", "regressed", "unvalidated", "none"])
    reason = serializers.CharField(allow_blank=True)
    requested_by = serializers.CharField()
    entities = CheckedEntitySerializer(many=True)
    created_at = serializers.DateTimeField()


class LoopCheckPr(APIView):
    @extend_schema(
        operation_id="loop_check_pr",
        summary="Run the pre-merge check on an open pull request; answer its verdict and pairs",
        request=CheckPrRequestSerializer,
        responses={
            200: PullCheckSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: number is not a positive whole number."),
            409: OpenApiResponse(ErrorSerializer, description="precondition: no such open PR, or the forge refused."),
        },
    )
    def post(self, request: Request) -> Response:
        asked = CheckPrRequestSerializer(data=request.data if isinstance(request.data, dict) else {})
        if not asked.is_valid():
            field, problems = next(iter(asked.errors.items()))
            return _error("invalid", f"{field}: {problems[0]}", http.HTTP_400_BAD_REQUEST)
        who = request.user.get_username() + (" (agent)" if is_agent(request) else "")
        try:
            checked = check_pr(asked.validated_data["number"], by=who)
        except PullCheckError as exc:
            return _error("precondition", str(exc), http.HTTP_409_CONFLICT)
        except SingularityError as exc:  # the forge or git could not be reached
            return _error("precondition", f"not checked: {exc}", http.HTTP_409_CONFLICT)
        return Response(PullCheckSerializer(_shape(checked)).data)


def _shape(checked: Any) -> dict[str, Any]:
    return {
        "number": checked.number,
        "head_sha": checked.head_sha,
        "base_sha": checked.base_sha,
        "verdict": checked.verdict,
        "reason": checked.reason,
        "requested_by": checked.requested_by,
        "entities": [
            {k: e.get(k) for k in ("entity", "name", "verdict", "reason", "rule", "pairs")} for e in checked.entities
        ],
        "created_at": checked.created_at,
    }


def _error(code: str, detail: str, http_status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=http_status)
