"""Destinations, their deliveries (the log), alert rules and each rule's stored level."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class Destination(models.Model):
    """Where notifications go: a generic signed webhook or a Slack incoming webhook."""

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "Signed webhook"
        SLACK = "slack", "Slack"

    class Source(models.TextChoices):
        MANIFEST = "manifest", "The brain's MANIFEST"
        ADMIN = "admin", "The admin"

    name = models.SlugField(max_length=80, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    url = models.URLField(max_length=500, blank=True, help_text="The address posted to (or name it by url_env).")
    url_env = models.CharField(
        max_length=100, blank=True, help_text="An environment variable holding the address (a Slack URL is a secret)."
    )
    secret = models.CharField(max_length=200, blank=True, help_text="The shared secret a webhook is signed with.")
    secret_env = models.CharField(max_length=100, blank=True, help_text="An environment variable holding the secret.")
    events = models.JSONField(default=list, blank=True, help_text="The events sent here; empty for every event.")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ADMIN)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def wants(self, event: str) -> bool:
        return self.active and (not self.events or event in self.events)


class Delivery(models.Model):
    """One event sent to one destination: due until sent, retried with backoff for a day, then failed."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting to be sent"
        RETRYING = "retrying", "Retrying"
        SENT = "sent", "Delivered"
        FAILED = "failed", "Gave up"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False, help_text="The delivery id.")
    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="deliveries")
    key = models.CharField(max_length=200, help_text="The event's idempotency key: one delivery per destination.")
    event = models.CharField(max_length=40, db_index=True)
    title = models.CharField(max_length=300)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, default=timezone.now, db_index=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    answer_status = models.PositiveIntegerField(null=True, blank=True, help_text="The HTTP status of the last try.")
    answer = models.TextField(blank=True, help_text="The start of the last answer's body, or the error.")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["destination", "key"], name="notify_delivery_once")]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} → {self.destination_id}"


class AlertRule(models.Model):
    """A measure watched on the beat with a warning and an alert level; it fires once and resolves once."""

    class Kind(models.TextChoices):
        OBJECTIVE = "objective", "An entity's rolling objective under a level"
        SPEND = "spend", "Spend in a day over an amount (USD)"
        FAILING = "failing", "Grades failing (share of the recent graded runs)"
        BACKLOG = "backlog", "A queue's backlog over a count"

    name = models.SlugField(max_length=80, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    entity = models.CharField(max_length=200, blank=True, help_text='"<kind>:<slug>", for objective and failing.')
    metric = models.CharField(max_length=100, blank=True, help_text="The metric, for objective.")
    queue = models.CharField(max_length=50, blank=True, help_text="The queue, for backlog.")
    runs = models.PositiveIntegerField(default=20, help_text="The recent graded runs read (objective, failing).")
    warning = models.DecimalField(max_digits=20, decimal_places=6)
    alert = models.DecimalField(max_digits=20, decimal_places=6)
    source = models.CharField(max_length=10, choices=Destination.Source.choices, default=Destination.Source.ADMIN)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def below(self) -> bool:
        """True when a low value is the bad one (an objective); a high one otherwise."""
        return self.kind == self.Kind.OBJECTIVE


class AlertState(models.Model):
    """A rule's level as last evaluated: a change of level is what is sent, never a repeat."""

    class Level(models.TextChoices):
        OK = "ok", "OK"
        WARNING = "warning", "Warning"
        ALERT = "alert", "Alert"

    rule = models.OneToOneField(AlertRule, on_delete=models.CASCADE, related_name="state")
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.OK)
    value = models.CharField(max_length=60, blank=True)
    changed_at = models.DateTimeField(default=timezone.now)
    evaluated_at = models.DateTimeField(default=timezone.now)
    changes = models.PositiveIntegerField(default=0, help_text="How many times the level changed (one key a change).")
