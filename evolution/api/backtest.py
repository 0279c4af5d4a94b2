"""``POST /api/loop/backtest/`` — what a loop policy would have done over the entity's graded history (issue 16).

The same function as ``manage.py loop backtest`` and the Policy view's
Backtest panel (``evolution.loop.backtest.run``): today's policy is replayed,
and with ``changes`` the policy those settings changes make (validated as a
``loop_set`` dry run validates them; nothing is written to the brain). Both
reports are kept. Open to people and agents: it runs nothing outside and
writes nothing but its report. A refusal is ``{error, detail}``: invalid
(400), refused (403: a change the settings writes refuse), not_found (404).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evolution.api.settings import HTTP
from evolution.loop import backtest
from evolution.steering import settings as sw
from evolution.steering.settings.preview import changes_from
from grading.models import Entity
from singularity.apikit.camel import camel
from singularity.serializers import ErrorSerializer


class BacktestChangeSerializer(serializers.Serializer):
    key = serializers.CharField(help_text='A dotted loop/evaluation key, e.g. "loop.trigger.minFailures".')
    op = serializers.ChoiceField(choices=[sw.SET, sw.REMOVE], default=sw.SET)
    value = serializers.JSONField(required=False, allow_null=True, help_text="The value to set (op set).")


class BacktestRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField(help_text="scenario, heartbeat or role")
    target_id = serializers.CharField(help_text="The entity's slug.")
    since = serializers.CharField(
        required=False, default="30d", help_text="How far back: 30d, 12h, 2w, or a date or instant (default 30d)."
    )
    changes = BacktestChangeSerializer(
        many=True, required=False, help_text="The proposed settings changes; none: today's policy alone."
    )


class BacktestCycleSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When the cycle would have opened.")
    anchor = serializers.CharField(help_text="The run whose grade would have opened it.")
    settles_at = serializers.DateTimeField(allow_null=True, help_text="When it is taken to settle (the median hold).")


class BacktestSpendSerializer(serializers.Serializer):
    cycles_priced = serializers.IntegerField(help_text="The entity's settled cycles the medians are read over.")
    per_cycle_proposer_usd = serializers.CharField(help_text="Median proposer spend per cycle, a decimal string.")
    per_cycle_judge_usd = serializers.CharField(help_text="Median judge spend (the check's replays) per cycle.")
    proposer_usd = serializers.CharField(help_text="opened × the proposer median, a decimal string.")
    judge_usd = serializers.CharField()
    total_usd = serializers.CharField()


class ReproductionSerializer(serializers.Serializer):
    really_opened = serializers.IntegerField(help_text="Cycles a landing grade really opened in the period.")
    matched = serializers.IntegerField(help_text="Of those, how many the replay opened on the same anchor run.")
    missed = serializers.ListField(child=serializers.CharField(), help_text="Real anchors the replay did not open on.")
    extra = serializers.ListField(child=serializers.CharField(), help_text="Anchors the replay opened on, not real.")
    really_refused = serializers.DictField(child=serializers.IntegerField())
    reproduced = serializers.BooleanField(help_text="The same anchors and the same refusals, kind by kind.")
    not_reproducible = serializers.ListField(
        child=serializers.DictField(), help_text="Cycles an idea, a person or the clock opened: {cycle, origin, why}."
    )


class BacktestReportSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The kept report.")
    policy = serializers.ChoiceField(choices=["current", "proposed"])
    preset = serializers.CharField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    graded_runs = serializers.IntegerField(help_text="Graded runs replayed.")
    opened = serializers.IntegerField(help_text="Cycles that would have opened.")
    cycles = BacktestCycleSerializer(many=True, help_text="The first 200 of them, in time order.")
    refusals = serializers.DictField(
        child=serializers.IntegerField(), help_text="live_cycle, hold, lock_group, cooldown, daily_cap, other."
    )
    refused = serializers.IntegerField()
    held_for_seconds = serializers.IntegerField(help_text="How long each opened cycle is held (the median settle).")
    held_for = serializers.CharField(help_text="Where that hold comes from, in words.")
    spend = BacktestSpendSerializer()
    reproduction = ReproductionSerializer(required=False, help_text="Today's policy only: against what happened.")


class BacktestAnswerSerializer(serializers.Serializer):
    current = BacktestReportSerializer()
    proposed = BacktestReportSerializer(allow_null=True)
    changes = BacktestChangeSerializer(many=True)
    summary = serializers.CharField(help_text='"Would have opened 14 cycles instead of 3 in the last 30 days."')


def _error(code: str, detail: str) -> Response:
    return Response({"error": code, "detail": detail}, status=HTTP.get(code, http.HTTP_400_BAD_REQUEST))


def _first_error(errors: Any, where: str = "") -> str:
    """The first field error as "field: message" (nested: "changes[0].op: …")."""
    if isinstance(errors, dict):
        for name, inner in errors.items():
            if isinstance(name, int) or str(name).isdigit():
                return _first_error(inner, f"{where}[{name}]")
            return _first_error(inner, f"{where}.{camel(name)}" if where else camel(str(name)))
    if isinstance(errors, list):
        for index, inner in enumerate(errors):
            if inner:
                if isinstance(inner, (dict, list)):
                    return _first_error(inner, f"{where}[{index}]")
                return f"{where}: {inner}"
    return f"{where}: {errors}" if where else "the body is not valid"


class LoopBacktest(APIView):
    @extend_schema(
        operation_id="loop_backtest",
        summary="loop_backtest: replay the entity's graded history through today's policy and a proposed one",
        description=(
            "Replays the entity's own graded runs since `since` in time order through the live loop's trigger "
            "(window(), should_open()), its refusals (one live cycle, holds, lock groups, cooldownHours, "
            "maxAnalysesPerDay) with each opened cycle held for the median time the entity's real cycles took to "
            "settle, and answers how many cycles would have opened, when, on which runs, which refusals fired, and "
            "the spend that implies. `changes` are validated as a loop_set dry run; nothing is written but the "
            "reports."
        ),
        request=BacktestRequestSerializer,
        responses={
            200: BacktestAnswerSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: `detail` names the field (since, a key)."),
            403: OpenApiResponse(ErrorSerializer, description="refused: a change the settings writes refuse."),
            404: OpenApiResponse(ErrorSerializer, description="not_found: the entity names nothing."),
        },
    )
    def post(self, request: Request) -> Response:
        form = BacktestRequestSerializer(data=request.data if isinstance(request.data, dict) else {})
        if not form.is_valid():
            return _error(sw.INVALID, _first_error(form.errors))
        data = form.validated_data
        entity = Entity.objects.filter(target_kind=data["target_kind"], slug=data["target_id"]).first()
        if entity is None:
            return _error(sw.NOT_FOUND, f"{data['target_kind']}:{data['target_id']} names no entity")
        from django.utils import timezone

        now = timezone.now()
        try:
            since = backtest.parse_since(data["since"], now=now)
            changes = changes_from(data["changes"]) if data.get("changes") else []
            actor = request.user.get_username() if request.user.is_authenticated else "api"
            current, proposed = backtest.run(entity, since=since, changes=changes, actor=actor, now=now)
        except ValueError as exc:
            return _error(sw.INVALID, str(exc))
        except sw.SettingsRefusal as refusal:
            return _error(refusal.code, refusal.detail)
        body = {
            "current": {"id": current.pk, **current.result},
            "proposed": {"id": proposed.pk, **proposed.result} if proposed else None,
            "changes": [c.as_json() for c in changes],
            "summary": backtest.compare_words(current.result, proposed.result if proposed else None),
        }
        return Response(BacktestAnswerSerializer(body).data)
