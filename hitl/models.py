"""Cards a person answers, notices a person reads, and their deliveries to Telegram.

A card is opened by a producer (the loop, grading, …) under a unique key, so
opening it again returns the same card. It is answered once — on the
dashboard, in Telegram or through the API — or closes as expired at its
deadline; either way the producer's registered handler is called once with
the card, and the outcome of that call is kept on the row.
"""

from __future__ import annotations

import secrets
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from singularity import links


def _short_id() -> str:
    """Return 12 random hex characters: the card's name inside Telegram button data (64-byte limit)."""
    return secrets.token_hex(6)


class Card(models.Model):
    class Kind(models.TextChoices):
        DECIDE = "decide"
        RETRY = "retry"
        GRANT = "grant"
        RATING = "rating"
        WIDEN = "widen"

    class Status(models.TextChoices):
        PENDING = "pending"
        ANSWERED = "answered"
        EXPIRED = "expired"
        CANCELLED = "cancelled"

    class Via(models.TextChoices):
        DASHBOARD = "dashboard"
        TELEGRAM = "telegram"
        API = "api"
        EXPIRY = "expiry"
        #: Closed by its producer: what it asked became moot (a loop proposal set aside by another's Accept).
        WITHDRAWN = "withdrawn"

    #: The choice a reply or a "Custom…" answer makes on these kinds.
    REFINE = "refine"
    REFINABLE_KINDS = frozenset({Kind.DECIDE, Kind.RETRY})
    #: The choice a filled-in rating form makes.
    RATE = "rate"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    short_id = models.CharField(max_length=12, unique=True, default=_short_id, editable=False)
    producer = models.CharField(max_length=50, db_index=True, help_text='Who opened it, e.g. "loop", "grading".')
    kind = models.CharField(max_length=10, choices=Kind.choices)
    key = models.CharField(
        max_length=200, unique=True, help_text='The producer\'s idempotency key, e.g. "rating:<run id>".'
    )
    subject = models.CharField(max_length=200, help_text="What the card is about: the run, the cycle, the proposal.")
    subject_url = models.CharField(max_length=500, blank=True)
    title = models.CharField(max_length=200)
    text = models.TextField(blank=True)
    options = models.JSONField(
        default=list,
        blank=True,
        help_text="Buttons [{value, label}] (a rating button may name its metric_id), or a rating form "
        "[{metric_id, label, min, max, step, labels}].",
    )
    expires_at = models.DateTimeField(db_index=True, help_text="The deadline: the card closes as expired here.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    answer = models.JSONField(default=dict, blank=True, help_text="{choice, note, values, refinement}")
    responded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    responded_at = models.DateTimeField(null=True, blank=True)
    answered_via = models.CharField(max_length=10, choices=Via.choices, blank=True)
    handled_at = models.DateTimeField(null=True, blank=True, help_text="When the producer's handler was called.")
    handler_error = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True, help_text="The producer's own data.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "expires_at"]),
            # The inbox's history: answered, expired and cancelled cards, the newest answer first, a page at a
            # time (``hitl.views._history_page``) — read from the index's head, never by sorting every card.
            models.Index(fields=["-responded_at", "-created_at"], condition=~Q(status="pending"), name="card_history"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title}"

    def get_absolute_url(self) -> str:
        return links.path("hitl-card", self.pk)

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def is_form(self) -> bool:
        """True for a rating form (a number per metric) rather than buttons."""
        return bool(self.options) and all(isinstance(o, dict) and "min" in o and "max" in o for o in self.options)

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """Return the options as buttons, or [] for a form card."""
        return [] if self.is_form else list(self.options)

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Return the form's metrics, or [] for a button card."""
        return list(self.options) if self.is_form else []

    @property
    def allows_refinement(self) -> bool:
        return self.kind in self.REFINABLE_KINDS

    @property
    def choice_label(self) -> str:
        """Return what the answer chose, as a person reads it ("Accept", "Refine", "4"), or ""."""
        choice = self.answer.get("choice", "") if isinstance(self.answer, dict) else ""
        for option in self.buttons:
            if option.get("value") == choice:
                return str(option.get("label", choice))
        return {self.REFINE: "Refine", self.RATE: "Rated"}.get(choice, str(choice))

    def option_for(self, choice: str) -> dict[str, Any] | None:
        """Return the button whose value is ``choice``, or None."""
        return next((o for o in self.buttons if str(o.get("value")) == choice), None)

    def check_values(self, values: dict[str, Any]) -> tuple[dict[str, int | float], str]:
        """Return the form's values as numbers, with "" — or {} and why they do not fit the form."""
        cleaned: dict[str, int | float] = {}
        for metric in self.metrics:
            metric_id = str(metric["metric_id"])
            label = metric.get("label") or metric_id
            raw = values.get(metric_id)
            if raw is None or raw == "":
                return {}, f"{label}: a number is needed"
            try:
                number = Decimal(str(raw).replace(",", "."))
            except InvalidOperation:
                return {}, f"{label}: {raw!r} is not a number"
            low, high = Decimal(str(metric["min"])), Decimal(str(metric["max"]))
            step = Decimal(str(metric.get("step") or 1))
            if not number.is_finite() or not low <= number <= high:
                return {}, f"{label}: {raw} is outside {low}–{high}"
            if (number - low) % step != 0:
                return {}, f"{label}: {raw} is not on a step of {step} from {low}"
            cleaned[metric_id] = int(number) if number == number.to_integral_value() else float(number)
        unknown = set(values) - set(cleaned)
        if unknown:
            return {}, f"no such metric: {', '.join(sorted(unknown))}"
        return cleaned, ""


class Notice(models.Model):
    """Something a person should know; nothing to answer."""

    producer = models.CharField(max_length=50, db_index=True)
    kind = models.CharField(max_length=50)
    title = models.CharField(max_length=200)
    text = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    subject = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class Delivery(models.Model):
    """One card or notice pushed to one outside channel, with the outcome of every try."""

    class Channel(models.TextChoices):
        TELEGRAM = "telegram"

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        RETRYING = "retrying"
        FAILED = "failed"
        SKIPPED = "skipped"

    card = models.ForeignKey(Card, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    notice = models.ForeignKey(Notice, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=20, choices=Channel.choices, default=Channel.TELEGRAM)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, default=timezone.now, db_index=True)
    chat_id = models.CharField(max_length=64, blank=True)
    message_id = models.BigIntegerField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    #: The sent card was answered elsewhere (or expired): its message should say so.
    needs_edit = models.BooleanField(default=False)
    edited_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["card", "channel"], condition=Q(card__isnull=False), name="hitl_one_delivery_per_card"
            ),
            models.UniqueConstraint(
                fields=["notice", "channel"], condition=Q(notice__isnull=False), name="hitl_one_delivery_per_notice"
            ),
            models.CheckConstraint(
                condition=Q(card__isnull=False, notice__isnull=True) | Q(card__isnull=True, notice__isnull=False),
                name="hitl_delivery_of_card_or_notice",
            ),
        ]
        indexes = [models.Index(fields=["channel", "chat_id", "message_id"])]

    def __str__(self) -> str:
        what = f"card {self.card_id}" if self.card_id else f"notice {self.notice_id}"
        return f"{self.channel} {what}: {self.status}"


class TelegramUser(models.Model):
    """A Telegram account allowed to answer cards, and the person it answers as."""

    telegram_user_id = models.BigIntegerField(unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="telegram_accounts")
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name = "Telegram user"

    def __str__(self) -> str:
        return f"{self.telegram_user_id} → {self.user}"


class TelegramUpdate(models.Model):
    """An update id seen from Telegram, so a redelivered update does nothing twice."""

    update_id = models.BigIntegerField(unique=True)
    received_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"update {self.update_id}: {self.outcome}"
