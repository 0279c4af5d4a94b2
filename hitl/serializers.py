"""Shapes of the cards API: cards with their deliveries, answers, cancels, notices."""

from __future__ import annotations

from rest_framework import serializers

from hitl.models import Card, Delivery, Notice


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["channel", "status", "attempts", "last_error", "next_attempt_at", "sent_at", "edited_at"]


class CardSerializer(serializers.ModelSerializer):
    responded_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    is_form = serializers.BooleanField(read_only=True)
    deliveries = DeliverySerializer(many=True, read_only=True)

    class Meta:
        model = Card
        fields = [
            "id",
            "producer",
            "kind",
            "key",
            "subject",
            "subject_url",
            "title",
            "text",
            "options",
            "is_form",
            "expires_at",
            "status",
            "answer",
            "responded_by",
            "responded_at",
            "answered_via",
            "handled_at",
            "handler_error",
            "created_at",
            "deliveries",
        ]
        read_only_fields = fields


class AnswerSerializer(serializers.Serializer):
    """An answer: a button's value; "refine" with a refinement (decide, retry); "rate" with values (a form)."""

    choice = serializers.CharField(max_length=100, allow_blank=True, default="")
    note = serializers.CharField(max_length=2000, allow_blank=True, default="")
    values = serializers.DictField(child=serializers.CharField(max_length=50), required=False, default=dict)
    refinement = serializers.CharField(max_length=4000, allow_blank=True, default="")

    def to_internal_value(self, data: object) -> object:
        # Numbers are welcome in ``values``; the card checks them against its form.
        if isinstance(data, dict) and isinstance(data.get("values"), dict):
            data = {**data, "values": {k: str(v) for k, v in data["values"].items()}}
        return super().to_internal_value(data)


class CancelSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, allow_blank=True, default="")


class RefusalSerializer(serializers.Serializer):
    """A refused answer or cancel: the API's error shape, with ``code`` (the same) kept for older scripts."""

    error = serializers.ChoiceField(choices=["unauthorized_responder", "already_closed", "invalid", "not_found"])
    code = serializers.ChoiceField(
        choices=["unauthorized_responder", "already_closed", "invalid", "not_found"],
        required=False,
        help_text="The same as error, on the door's own refusals (not on a body that does not validate).",
    )
    detail = serializers.CharField()


class NoticeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notice
        fields = ["id", "producer", "kind", "title", "text", "url", "subject", "created_at", "read_at"]
        read_only_fields = fields
