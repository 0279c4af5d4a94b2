"""REST shapes of beings, cycles and journal events. Money is always a decimal string.

Serializers validate input; they never create or change anything (the API
views call the actions).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from singularity.forms import clean_being_name, clean_starting_usd, clean_stimulus
from singularity.models import Being, Cycle, Event
from singularity.money import money_str


@extend_schema_field({"type": "string", "format": "decimal", "example": "9.9843", "description": "USD"})
class MoneyString(serializers.Field):
    """Read-only money as its exact decimal text ("9.9843"), never a float."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: Decimal) -> str:
        return money_str(value)


@extend_schema_field(
    {"type": "string", "format": "decimal", "nullable": True, "example": "9.9843", "description": "USD"}
)
class NullableMoneyString(MoneyString):
    def __init__(self, **kwargs: Any) -> None:
        kwargs["allow_null"] = True
        super().__init__(**kwargs)


class ErrorSerializer(serializers.Serializer):
    """The body of every refusal: a short code and a sentence for people (some refusals add fields)."""

    error = serializers.CharField(
        help_text="invalid, refused, not_found, conflict, precondition, not_authenticated, authentication_failed, "
        "method_not_allowed, unsupported_media_type, …"
    )
    detail = serializers.CharField(help_text="What was refused and why; names the field or parameter at fault.")


class BeingSummarySerializer(serializers.ModelSerializer):
    remaining_usd = MoneyString(source="remaining")
    earned_usd = MoneyString(source="earned")
    net_profit_usd = MoneyString(source="net_profit")
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="api-being-detail", lookup_field="name")

    class Meta:
        model = Being
        fields = ["name", "url", "status", "host", "cycle", "remaining_usd", "earned_usd", "net_profit_usd", "parent"]


class BudgetSerializer(serializers.Serializer):
    """The six budget numbers, named as in the being's ``state.json``."""

    starting = MoneyString()
    remaining = MoneyString()
    api_spent = MoneyString()
    instance_spent = MoneyString()
    total_tokens = serializers.IntegerField(read_only=True)
    earned = MoneyString()


class MindSerializer(serializers.ModelSerializer):
    children = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Being
        fields = ["model", "system_prompt", "rules", "learnings", "memories", "children", "parent"]


class BeingDetailSerializer(serializers.ModelSerializer):
    budget = BudgetSerializer(source="*", read_only=True)
    net_profit_usd = MoneyString(source="net_profit")
    mind = MindSerializer(source="*", read_only=True)

    class Meta:
        model = Being
        fields = [
            "name",
            "status",
            "host",
            "cycle",
            "budget",
            "net_profit_usd",
            "mind",
            "recent_actions",
            "stimulus",
            "last_error",
            "created_at",
        ]


class BeingCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    starting_usd = serializers.CharField(
        required=False,
        max_length=40,
        help_text='Decimal string, e.g. "10.00"; defaults to SINGULARITY_STARTING_BALANCE_USD.',
    )
    stimulus = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")

    def validate_name(self, value: str) -> str:
        return clean_being_name(value)

    def validate_starting_usd(self, value: str) -> Decimal:
        return clean_starting_usd(value)

    def validate_stimulus(self, value: str) -> str:
        return clean_stimulus(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("starting_usd", settings.SINGULARITY_STARTING_BALANCE_USD)
        return attrs


class CycleSerializer(serializers.ModelSerializer):
    spent_usd = MoneyString(source="spent")
    earned_usd = MoneyString(source="earned")
    balance_after_usd = NullableMoneyString(source="balance_after")

    class Meta:
        model = Cycle
        fields = [
            "number",
            "status",
            "rounds",
            "tool_calls",
            "spent_usd",
            "earned_usd",
            "balance_after_usd",
            "final_content",
            "error",
            "started_at",
            "finished_at",
        ]


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["seq", "cycle", "kind", "data", "created_at"]
