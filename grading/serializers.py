"""REST shapes of entities, runs, grades, ratings and calibration. Money is always a decimal string.

Serializers shape and document; they never change anything. The rating
request is validated by ``grading.ratings.rate`` itself (the one door), so
every writer gets the same answers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from grading.models import Entity, Execution, Grade, Rating
from grading.spans import SpanSerializer, normalise
from singularity.serializers import MoneyString


class EntityKeyField(serializers.Field):
    """An entity named as ``<target_kind>:<slug>`` (read-only)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: Entity) -> str:
        return f"{value.target_kind}:{value.slug}"


extend_schema_field({"type": "string", "example": "scenario:digest"})(EntityKeyField)


class EntitySummarySerializer(serializers.ModelSerializer):
    id = serializers.SerializerMethodField(help_text="<target_kind>:<slug>")
    status = serializers.SerializerMethodField(help_text="ok, or error when the file did not load (see load_error)")

    class Meta:
        model = Entity
        fields = [
            "id",
            "target_kind",
            "slug",
            "kind",
            "name",
            "path",
            "status",
            "load_error",
            "present",
            "evaluation_enabled",
            "loop_enabled",
            "schedule",
            "commit",
            "synced_at",
        ]

    def get_id(self, entity: Entity) -> str:
        return f"{entity.target_kind}:{entity.slug}"

    @extend_schema_field(serializers.ChoiceField(choices=["ok", "error"]))
    def get_status(self, entity: Entity) -> str:
        return "ok" if entity.ok else "error"


class ChanceSerializer(serializers.Serializer):
    """A chance-corrected agreement: the statistic's name, its value and its 95 % interval (null where unreadable)."""

    statistic = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    low = serializers.FloatField(allow_null=True)
    high = serializers.FloatField(allow_null=True)


class CalibrationSerializer(serializers.Serializer):
    """One judged ``human: true`` metric: ok when at least minPairs pairs agree at the threshold, else low."""

    metric_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["ok", "low"])
    pairs = serializers.IntegerField()
    agreement = serializers.FloatField(allow_null=True, help_text="Share of agreeing pairs; null with no pairs.")
    reason = serializers.CharField()
    chance = ChanceSerializer(
        help_text="Agreement corrected for chance (issue 31): Cohen's κ for a two-valued metric, quadratic-weighted κ "
        "for a stepped scale, Krippendorff's α (interval) for a continuous one, with a seeded bootstrap 95 % interval."
    )
    warning = serializers.CharField(
        help_text="Where the seed's rule reads ok but the chance-corrected interval reaches below 0.4; else empty."
    )


class EntityDetailSerializer(EntitySummarySerializer):
    terms = serializers.JSONField(help_text="Resolved evaluation, loop and chat terms.")
    provenance = serializers.JSONField(
        help_text='Per dotted key, the tier it came from: "engine", "manifest", "entity".'
    )
    calibration = CalibrationSerializer(many=True, read_only=True, source="calibration_rows")

    class Meta(EntitySummarySerializer.Meta):
        fields = EntitySummarySerializer.Meta.fields + [
            "description",
            "definition_hash",
            "loop_module_hash",
            "pipeline_path",
            "loop_module_path",
            "terms",
            "provenance",
            "calibration",
        ]


class RatingSerializer(serializers.ModelSerializer):
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    value = serializers.DecimalField(max_digits=20, decimal_places=6, coerce_to_string=True, read_only=True)

    class Meta:
        model = Rating
        fields = ["metric_id", "user", "value", "normalized", "note", "created_at", "updated_at"]


class GradeSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField(source="execution_id", read_only=True)
    entity = EntityKeyField()
    cost_usd = MoneyString()
    metrics = serializers.JSONField(help_text="The metric vector: judged/reported on 0..1, cost_usd a decimal string.")
    judge = serializers.JSONField(help_text="Who graded: model, method, method_hash, loop_hash, role_hash.")

    class Meta:
        model = Grade
        fields = [
            "run_id",
            "entity",
            "status",
            "reason",
            "holds_slot",
            "booked_at",
            "due_at",
            "started_at",
            "graded_at",
            "attempts",
            "score",
            "passed",
            "failure_category",
            "criteria",
            "feedback",
            "metrics",
            "judge",
            "error",
            "cost_usd",
        ]


class RunSerializer(serializers.ModelSerializer):
    entity = EntityKeyField()
    cost_usd = MoneyString()
    grade_status = serializers.SerializerMethodField(help_text="The grade's status; null when none is booked.")

    class Meta:
        model = Execution
        fields = [
            "id",
            "entity",
            "run_kind",
            "status",
            "source",
            "loop_launched",
            "sampling",
            "cost_usd",
            "duration_ms",
            "tool_failures",
            "commit",
            "definition_hash",
            "started_at",
            "completed_at",
            "error",
            "grade_status",
        ]

    @extend_schema_field(serializers.ChoiceField(choices=Grade.Status.choices, allow_null=True))
    def get_grade_status(self, run: Execution) -> str | None:
        grade = getattr(run, "grade", None) if hasattr(run, "grade") else None
        return grade.status if grade else None


class RunDetailSerializer(RunSerializer):
    input = serializers.JSONField()
    output = serializers.JSONField(allow_null=True)
    trace = serializers.SerializerMethodField()
    grade = serializers.SerializerMethodField()
    ratings = RatingSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["input", "output", "trace", "grade", "ratings"]

    @extend_schema_field(SpanSerializer(many=True))
    def get_trace(self, run: Execution) -> list[dict[str, Any]]:
        """The run's spans as stored; entries stored before spans read as spans (``grading.spans.normalise``)."""
        return normalise(run.trace)

    @extend_schema_field(GradeSerializer(allow_null=True))
    def get_grade(self, run: Execution) -> dict[str, Any] | None:
        return GradeSerializer(run.grade).data if hasattr(run, "grade") else None


class ReportMetricSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField(allow_null=True)
    unit = serializers.CharField(allow_null=True)
    role = serializers.CharField(allow_null=True)
    judge = serializers.JSONField(allow_null=True, help_text="The grade's value (0..1, or in the metric's unit).")
    people = serializers.FloatField(allow_null=True, help_text="People's median on 0..1; null when nobody rated.")
    raters = serializers.IntegerField()


class RunReportSerializer(serializers.Serializer):
    """The grade report of one run: criteria, the metric vector beside people's medians, and who graded."""

    run_id = serializers.UUIDField()
    entity = serializers.CharField()
    sampling = serializers.CharField()
    grade_status = serializers.CharField(allow_null=True)
    score = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField(allow_null=True)
    failure_category = serializers.CharField(allow_blank=True)
    criteria = serializers.JSONField()
    metrics = ReportMetricSerializer(many=True)
    judge = serializers.JSONField()
    graded_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class RatingRowSerializer(RatingSerializer):
    """A rating as GET /api/ratings/ lists it: the run's rating (``RatingSerializer``) with its run and entity."""

    run_id = serializers.UUIDField(source="execution_id", read_only=True)
    entity = EntityKeyField()

    class Meta(RatingSerializer.Meta):
        fields = ["run_id", "entity", *RatingSerializer.Meta.fields]


class RatingItemSerializer(serializers.Serializer):
    metric_id = serializers.CharField()
    value = serializers.JSONField(help_text="A number (or decimal string) on the metric's own scale.")
    note = serializers.CharField(required=False, allow_blank=True)


class RateRequestSerializer(serializers.Serializer):
    """The one door's request (op eval.rate); the door itself checks every field."""

    run_kind = serializers.ChoiceField(choices=Execution.RunKind.choices)
    run_id = serializers.UUIDField()
    idempotency_key = serializers.CharField(max_length=200, help_text="A retry with the same key writes nothing.")
    ratings = RatingItemSerializer(many=True)


class RateAnswerSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    code = serializers.ChoiceField(
        choices=["ok", "pending", "not_found", "precondition", "invalid", "refused", "too_many_pending"]
    )
    error = serializers.CharField(required=False, help_text="The code again, on a refusal.")
    detail = serializers.CharField()
    written = serializers.IntegerField()
    card_id = serializers.UUIDField(
        required=False, help_text="An agent's rating: the person's approval card it waits on (202 pending)."
    )
