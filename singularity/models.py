"""The being's durable record: its budget and mind, its cycles, its journal; and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from singularity.fields import MoneyField

#: total_tokens saturates here instead of overflowing the column.
TOKENS_MAX = 2**63 - 1
#: How many recent actions the framing message shows.
RECENT_ACTIONS = 10

being_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    "A being's name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.",
)


class Being(models.Model):
    class Status(models.TextChoices):
        CREATED = "created"
        RUNNING = "running"
        STOPPING = "stopping"
        STOPPED = "stopped"
        EXHAUSTED = "exhausted"

    class Host(models.TextChoices):
        NONE = "", "nobody"
        CLI = "cli", "command line"
        WORKER = "worker", "Celery workers"

    name = models.CharField(max_length=64, unique=True, validators=[being_name_validator])
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CREATED)
    host = models.CharField(max_length=8, choices=Host.choices, blank=True, default="")
    cycle = models.PositiveIntegerField(default=0)

    # The budget: six fields; net profit is derived, never stored.
    starting = MoneyField()
    remaining = MoneyField()
    api_spent = MoneyField(default=Decimal(0))
    instance_spent = MoneyField(default=Decimal(0))
    total_tokens = models.BigIntegerField(default=0)
    earned = MoneyField(default=Decimal(0))

    # The mind.
    model = models.CharField(max_length=200)
    system_prompt = models.TextField()
    rules = models.JSONField(default=list, blank=True)
    learnings = models.JSONField(default=list, blank=True)
    memories = models.JSONField(default=dict, blank=True)
    recent_actions = models.JSONField(default=list, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    stimulus = models.TextField(blank=True, default="")

    # Bookkeeping.
    event_seq = models.PositiveBigIntegerField(default=0)
    #: The hash of the newest journal event (the chain's head); "" before the first.
    event_hash = models.CharField(max_length=64, blank=True, default="")
    #: The worst case of the model call in flight, held against ``remaining`` until it is settled (0 when none).
    reserved_api = MoneyField(default=Decimal(0))
    reserved_instance = MoneyField(default=Decimal(0))
    lease_owner = models.CharField(max_length=100, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    next_cycle_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["status", "host", "next_cycle_at"])]

    def __str__(self) -> str:
        return self.name

    @property
    def net_profit(self) -> Decimal:
        return self.earned - self.api_spent - self.instance_spent

    @property
    def solvent(self) -> bool:
        return self.remaining > 0

    def budget(self) -> dict[str, Any]:
        return {
            "starting": self.starting,
            "remaining": self.remaining,
            "api_spent": self.api_spent,
            "instance_spent": self.instance_spent,
            "total_tokens": self.total_tokens,
            "earned": self.earned,
        }

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("being-detail", args=[self.name])


class Cycle(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        TOOL_ROUND_LIMIT = "tool_round_limit"
        BUDGET_EXHAUSTED = "budget_exhausted"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    being = models.ForeignKey(Being, on_delete=models.CASCADE, related_name="cycles")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    rounds = models.PositiveSmallIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    final_content = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    #: The conversation of this cycle after the framing message (assistant turns and tool results).
    messages = models.JSONField(default=list, blank=True)
    spent = MoneyField(default=Decimal(0))
    earned = MoneyField(default=Decimal(0))
    balance_after = MoneyField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["being", "number"], name="cycle_number_unique")]

    def __str__(self) -> str:
        return f"{self.being.name} #{self.number}"


class Event(models.Model):
    """One line of the journal. Append-only: ``seq`` is the being's own counter."""

    class Kind(models.TextChoices):
        STARTED = "started"
        CYCLE_STARTED = "cycle_started"
        MODEL_COMPLETED = "model_completed"
        COST_DEBITED = "cost_debited"
        TOOL_FINISHED = "tool_finished"
        REVENUE_CREDITED = "revenue_credited"
        WARNING = "warning"
        STOPPED = "stopped"
        #: Money moved between a parent and the child it funds; journaled on both sides.
        TRANSFER = "transfer"
        #: The worst case of a model call, held before it is made (SINGULARITY_COST_RESERVATION).
        COST_RESERVED = "cost_reserved"

    being = models.ForeignKey(Being, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    cycle = models.PositiveIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: SHA-256 of the event before it ("" for the first) and of this one, over ``singularity.being.chain``'s form.
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    hash = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["being", "seq"]
        constraints = [models.UniqueConstraint(fields=["being", "seq"], name="event_seq_unique")]
        indexes = [models.Index(fields=["being", "kind", "seq"])]

    def __str__(self) -> str:
        return f"{self.being_id}:{self.seq} {self.kind}"


class ApiToken(models.Model):
    """A bearer token for the REST API. Only its hash is stored; the key is shown once.

    An agent token belongs to a user but acts as an agent: it may read, hold and
    make narrowing writes, and is refused wherever only a person may act.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=8, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    is_agent = models.BooleanField(
        default=False, help_text="Agents may read and narrow; they never answer cards or rate."
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, user: Any, name: str, *, is_agent: bool = False) -> tuple[ApiToken, str]:
        """Create a token and return it with its key, which is not stored and cannot be shown again."""
        key = "sg_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, prefix=key[:8], key_hash=cls.hash_key(key), is_agent=is_agent)
        return token, key
