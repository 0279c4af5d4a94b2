"""Entities read from the brain, their executions, grades (bookings), ratings.

An ``Entity`` is one definition file in the brain (a workflow or pipeline
scenario, a heartbeat, a chat role), with its resolved evaluation/loop terms.
An ``Execution`` is one run of it. A ``Grade`` is both the booking made at
the run's terminal (holding a ``sample.maxPerDay`` slot, due at
``gradeAfterHours``) and, once graded, the result. A ``Rating`` is one
person's number for one metric of one run.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KT, KeyTransform
from django.utils import timezone
from django.utils.deconstruct import deconstructible

from singularity import links
from singularity.fields import MoneyField

#: The terms that can put an entity in a lock group (``Entity.loop_grouped``).
LOOP_GROUPED = (
    models.Q(terms__loop__has_key="group") & ~models.Q(terms__loop__group=[]) & ~models.Q(terms__loop__groups={})
)

#: ``grading.people.human_rated`` of any metric of an entity's ``evaluation.metrics``, as a Postgres JSON path:
#: strict, so a block that is not an object, or a spec without ``kind`` (or ``human``), matches nothing.
RATED_PATH = 'strict $.evaluation.metrics.* ? (@.kind == "reported" || (@.kind == "judged" && @.human == true))'


@deconstructible(path="grading.models.HumanRated")
class HumanRated(models.Func):
    """Whether ``terms`` declare a metric people rate (``RATED_PATH``), for ``Entity.rateable``.

    Postgres only (false where the strict path errs, as on a ``metrics`` that is not an object, never NULL):
    ``jsonb_path_exists`` is immutable, so a stored generated column can hold it. SQLite cannot
    walk an object's values without ``json_each``, a table-valued function no generated column may use: there
    the column is NULL and ``grading.views.rateable`` reads the metrics blocks instead.
    """

    template = "NULL"
    arity = 1

    def __init__(self, expression: Any = "terms", **extra: Any) -> None:
        super().__init__(expression, output_field=models.BooleanField(), **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        path = RATED_PATH.replace("'", "''")
        template = f"COALESCE(jsonb_path_exists(%(expressions)s, '{path}'::jsonpath, '{{}}'::jsonb, true), false)"
        return self.as_sql(compiler, connection, template=template, **extra)


#: The keys of ``evaluation.metrics`` whose spec people rate: ``RATED_PATH``'s filter on each key's value, in the
#: block's order. Strict, so a spec that is not an object, or lacks ``kind`` (or ``human``), matches nothing; a
#: block that is not an object has no keys (the error silenced: ``[]``).
RATED_IDS_PATH = (
    'strict $.evaluation.metrics.keyvalue() ? (@.value.kind == "reported" || '
    '(@.value.kind == "judged" && @.value.human == true)).key'
)


@deconstructible(path="grading.models.HumanRatedIds")
class HumanRatedIds(models.Func):
    """The ids of the metrics people rate in ``terms`` (``RATED_IDS_PATH``) as a JSON array's text, for
    ``Entity.rated_metric_ids``. Postgres only (``jsonb_path_query_array`` and the cast to text are immutable);
    NULL on SQLite, as ``HumanRated`` is."""

    template = "NULL"
    arity = 1

    def __init__(self, expression: Any = "terms", **extra: Any) -> None:
        super().__init__(expression, output_field=models.TextField(), **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        path = RATED_IDS_PATH.replace("'", "''")
        template = f"(jsonb_path_query_array(%(expressions)s, '{path}'::jsonpath, '{{}}'::jsonb, true))::text"
        return self.as_sql(compiler, connection, template=template, **extra)


class Entity(models.Model):
    class Kind(models.TextChoices):
        WORKFLOW = "workflow"
        PIPELINE = "pipeline"
        HEARTBEAT = "heartbeat"
        ROLE = "role"

    class TargetKind(models.TextChoices):
        SCENARIO = "scenario"
        HEARTBEAT = "heartbeat"
        ROLE = "role"

    #: The file stem: ``features/**/<slug>.scenario.md``.
    slug = models.CharField(max_length=100)
    target_kind = models.CharField(max_length=16, choices=TargetKind.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    path = models.CharField(max_length=500, help_text="Path of the definition file inside the brain.")
    name = models.CharField(max_length=200, blank=True, default="")
    description = models.TextField(blank=True, default="")
    body = models.TextField(blank=True, default="")
    #: The frontmatter as plain data (comments live in the file; writers use the round-trip loader).
    frontmatter = models.JSONField(default=dict, blank=True)
    #: Resolved ``evaluation`` / ``loop`` / ``chat`` terms (see singularity.brain.terms).
    terms = models.JSONField(default=dict, blank=True)
    #: For each resolved key (dotted path), the tier it came from: "engine", "manifest" or "entity".
    provenance = models.JSONField(default=dict, blank=True)
    schedule = models.CharField(max_length=100, blank=True, default="")
    definition_hash = models.CharField(max_length=64, blank=True, default="")
    loop_module_hash = models.CharField(max_length=64, blank=True, default="")
    pipeline_path = models.CharField(max_length=500, blank=True, default="")
    loop_module_path = models.CharField(max_length=500, blank=True, default="")
    commit = models.CharField(max_length=40, blank=True, default="")
    load_error = models.TextField(blank=True, default="")
    #: False once the file is gone from the brain; its history stays.
    present = models.BooleanField(default=True)
    evaluation_enabled = models.BooleanField(default=False)
    loop_enabled = models.BooleanField(default=False)
    synced_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    # --- Loop facts the fleet's reads filter on, kept by the database from ``terms`` (issue 18) ---------------
    # Generated (stored) columns: every write of ``terms`` — the sync, the resolver, the admin, a bulk create or
    # update, raw SQL — recomputes them, so they always say what the terms say, and a fleet-wide read filters a
    # short column instead of unpacking each entity's out-of-line terms.
    #: Whether the terms can put the entity in a lock group: a non-empty ``loop.group`` and ``loop.groups``
    #: (``supervision.may_join_groups`` reads this column).
    loop_grouped = models.GeneratedField(
        expression=models.ExpressionWrapper(LOOP_GROUPED, output_field=models.BooleanField()),
        output_field=models.BooleanField(null=True),
        db_persist=True,
    )
    #: ``loop.budget.maxUsdPerMonth`` as the terms' text (JSON null or absent: NULL) — ``spend.month_refusals_in``.
    loop_month_ceiling = models.GeneratedField(
        expression=KT("terms__loop__budget__maxUsdPerMonth"),
        output_field=models.TextField(null=True),
        db_persist=True,
    )

    #: ``loop.autonomy`` (who answers the gates, the breaker's ceiling) — the breaker's fleet read
    #: (``autonomy.settles_in``) reads this short column, not the whole terms, for each entity with a settle.
    loop_autonomy = models.GeneratedField(
        expression=KeyTransform("autonomy", KeyTransform("loop", "terms")),
        output_field=models.JSONField(null=True),
        db_persist=True,
    )
    #: Whether any metric of ``evaluation.metrics`` is one people rate (``people.human_rated``) — Rate runs'
    #: ``rateable`` filters it. Postgres only; NULL on SQLite (``HumanRated``).
    rateable = models.GeneratedField(
        expression=HumanRated("terms"),
        output_field=models.BooleanField(null=True),
        db_persist=True,
    )
    #: The ids of the metrics people rate (``people.human_rated``), a JSON array's text in the block's order — what
    #: Rate runs reads of each rateable entity, not its kilobytes of terms (issue 37). Text, not JSON: a page that
    #: reads entities whole does not decode it. Postgres only; NULL on SQLite (``HumanRatedIds``).
    rated_metric_ids = models.GeneratedField(
        expression=HumanRatedIds("terms"),
        output_field=models.TextField(null=True),
        db_persist=True,
    )

    class Meta:
        ordering = ["target_kind", "slug"]
        constraints = [models.UniqueConstraint(fields=["target_kind", "slug"], name="entity_target_unique")]
        verbose_name_plural = "entities"

    def __str__(self) -> str:
        return f"{self.target_kind}:{self.slug}"

    @property
    def ok(self) -> bool:
        return not self.load_error

    @property
    def switched_off(self) -> bool:
        """Whether the definition's top-level ``enabled`` is ``false``: it neither runs nor is scheduled."""
        return (self.frontmatter or {}).get("enabled") is False

    def run_refusal(self) -> str:
        """Why a run of this entity is refused before it starts (``enabled: false``), or "" when it may run."""
        if not self.switched_off:
            return ""
        return (
            f"{self} is switched off: the top-level `enabled: false` in {self.path or 'its definition'} stops "
            "its runs; set `enabled: true` in the brain to run it"
        )

    @property
    def unattended(self) -> bool:
        """Nobody decides each execution: a scheduled scenario, every heartbeat, every chat role."""
        return self.kind in (self.Kind.HEARTBEAT, self.Kind.ROLE) or bool(self.schedule)

    def evaluation(self) -> dict[str, Any]:
        return dict(self.terms.get("evaluation") or {})

    def loop(self) -> dict[str, Any]:
        return dict(self.terms.get("loop") or {})

    def get_absolute_url(self) -> str:
        return links.path("grading:entity", self.target_kind, self.slug)


class Execution(models.Model):
    class RunKind(models.TextChoices):
        WORKFLOW = "workflow"
        PIPELINE = "pipeline"
        HEARTBEAT = "heartbeat"
        EPISODE = "episode"

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class Source(models.TextChoices):
        MANUAL = "manual", "started by a person"
        SCHEDULE = "schedule", "started on schedule"
        API = "api", "reported through the API"
        LOOP = "loop", "launched by the loop"
        DEMO = "demo", "started by the demo driver"

    class Sampling(models.TextChoices):
        PENDING = "", "not decided yet"
        SAMPLED = "sampled"
        EXEMPT = "exempt", "graded whatever the sample (the engine needs a verdict)"
        RATED = "rated", "booked by a person's rating"
        MANUAL = "manual", "booked by eval_start"
        SKIPPED_RATE = "skipped_rate", "passed by: outside sample.rate"
        SKIPPED_CAP = "skipped_cap", "passed by: sample.maxPerDay reached"
        SKIPPED_NO_CEILING = "skipped_no_ceiling", "not graded: unattended and no maxPerDay at any tier"
        OFF = "off", "grading off for this entity"
        LOOP_LAUNCHED = "loop_launched", "a loop replay: graded only by the cycle that launched it"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="executions")
    run_kind = models.CharField(max_length=16, choices=RunKind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    #: Tool calls in order: [{"tool", "arguments", "status", "error", "duration_ms", "dry_run"}].
    trace = models.JSONField(default=list, blank=True)
    cost_usd = MoneyField(default=Decimal(0))
    duration_ms = models.BigIntegerField(null=True, blank=True)
    tool_failures = models.PositiveIntegerField(default=0)
    commit = models.CharField(max_length=40, blank=True, default="")
    definition_hash = models.CharField(max_length=64, blank=True, default="")
    #: A replay: reads live, acts on nothing; never graded by the sampler, never in a window.
    loop_launched = models.BooleanField(default=False)
    sampling = models.CharField(max_length=24, choices=Sampling.choices, blank=True, default="")
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    #: A person was asked to rate this run (a rating card, grading.cards): until then it is in no observed window.
    awaiting_rating_until = models.DateTimeField(null=True, blank=True, db_index=True)
    #: What the run's plan froze of the loop when it started (a workflow scenario's only, R5.19):
    #: {"enabled": bool, "threshold": number | None}. None: read live (a pipeline, a heartbeat, a role; a run
    #: recorded before plans were kept). Copied onto its grade at booking (``Grade.plan_terms``).
    plan_terms = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["entity", "-started_at"]),
            models.Index(fields=["entity", "status", "-completed_at"]),
            # Rate runs and the runs lists page from the newest (issue 18).
            models.Index(fields=["-completed_at", "-id"], name="execution_newest"),
            # /api/runs/ pages by its cursor from the newest started.
            models.Index(fields=["-started_at", "-id"], name="execution_started"),
            # Calibration's pairs: the ids of an entity's own runs (never loop replays), read from the index
            # alone (``calibration_many`` joins them to people's ratings; no run row is read).
            models.Index(fields=["entity", "id"], condition=models.Q(loop_launched=False), name="execution_own"),
            # The loop's replays alone: calibration's pairs leave them out without reading a rated run's row
            # (``calibration._rated_runs``: a probe into this small index, issue 37).
            models.Index(fields=["id"], condition=models.Q(loop_launched=True), name="execution_replays"),
        ]

    def __str__(self) -> str:
        return f"{self.run_kind}:{self.id}"

    @property
    def terminal(self) -> bool:
        return self.status != self.Status.RUNNING

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("grading:run", args=[self.id])


class Grade(models.Model):
    """The booking of a run's grading, then its result. One per execution."""

    class Status(models.TextChoices):
        BOOKED = "booked"
        GRADING = "grading"
        GRADED = "graded"
        FAILED = "failed"

    execution = models.OneToOneField(Execution, on_delete=models.CASCADE, related_name="grade", primary_key=True)
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="grades")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BOOKED)
    #: Why it was booked: "sampled", "exempt:<why>", "rated", "manual".
    reason = models.CharField(max_length=64, default="sampled")
    #: Holds a ``sample.maxPerDay`` slot on this calendar day (configured time zone); exempt bookings hold none.
    holds_slot = models.BooleanField(default=True)
    day = models.DateField()
    booked_at = models.DateTimeField(default=timezone.now)
    due_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    graded_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    #: The judge's overall score on 0..1 (None under method: none).
    score = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    failure_category = models.CharField(max_length=100, blank=True, default="")
    #: Per criterion: [{"criterion", "scope" ("run" | "task:<id>"), "passed", "score", "reasoning", "evidence"}].
    criteria = models.JSONField(default=list, blank=True)
    feedback = models.TextField(blank=True, default="")
    #: The metric vector, every value on its own unit (judged/reported normalized to 0..1): {"id": value}.
    metrics = models.JSONField(default=dict, blank=True)
    #: Who graded: {"model", "method", "method_hash", "loop_hash", "role_hash"} (see grading.pin).
    judge = models.JSONField(default=dict, blank=True)
    #: Set when the grading itself failed: "judge: no structured output", "grading job lost", …
    error = models.TextField(blank=True, default="")
    cost_usd = MoneyField(default=Decimal(0))
    #: The run's frozen plan (``Execution.plan_terms``), copied at booking so every reader of "bad" reads the grade
    #: alone (``grading.metrics.is_bad``). None: the entity's current terms.
    plan_terms = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-booked_at"]
        indexes = [
            models.Index(fields=["entity", "status", "-graded_at"]),
            models.Index(fields=["status", "due_at"]),
            # /api/grades/ pages by its cursor from the newest booked, for the fleet or one entity.
            models.Index(fields=["-booked_at", "-execution"], name="grade_booked"),
            models.Index(fields=["entity", "-booked_at"], name="grade_entity_booked"),
            # The watch's exempt gradings of a cycle (reason ``exempt:watch:<cycle id>``: what it cost to judge,
            # ``evolution.core.spend``), found by their reason among a few, not among every grade of the entity
            # booked since the cycle opened (a cycle's cost read every one). Written for those grades only.
            models.Index(
                fields=["entity", "reason"], condition=Q(reason__startswith="exempt:watch:"), name="grade_watch_exempt"
            ),
        ]

    def __str__(self) -> str:
        return f"grade of {self.execution_id} ({self.status})"

    @classmethod
    def read_only(cls, fields: dict[str, Any], *, entity: Any = None, execution: Any = None) -> Grade:
        """A grade of the columns ``fields`` names, as read (never saved), built without the model's per-field
        construction: a window or a replay builds thousands. Columns left out are absent, not defaulted (read
        from the database on first use, as a deferred field is); ``entity`` and ``execution`` are cached as its
        relations when given."""
        return read_only(cls, fields, entity=entity, execution=execution)


def read_only(model: type[models.Model], fields: dict[str, Any], **related: Any) -> Any:
    """A ``model`` row of the columns ``fields`` names, as read, built without the model's per-field construction
    (see ``Grade.read_only``); each of ``related`` given (not None) is cached as that relation."""
    from django.db.models.base import ModelState

    row = model.__new__(model)
    state = ModelState()
    state.adding, state.db = False, "default"
    for name, value in related.items():
        if value is not None:
            state.fields_cache[name] = value
    row.__dict__.update(fields, _state=state)
    return row


class SampleDay(models.Model):
    """How many ``sample.maxPerDay`` slots an entity has booked on one calendar day."""

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="sample_days")
    day = models.DateField()
    booked = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["entity", "day"], name="sample_day_unique")]


class Rating(models.Model):
    """One person's number for one metric of one run; a later rating by the same person replaces it."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="ratings")
    #: The run's entity, kept beside it (a run never changes entity; ``save`` fills it from the run) so that
    #: calibration reads an entity's ratings by index, without walking the entity's runs.
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="ratings", db_index=False)
    metric_id = models.CharField(max_length=100)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ratings")
    #: The value on the metric's own scale, as given (exact).
    value = models.DecimalField(max_digits=20, decimal_places=6)
    #: The same on 0..1: (value - min) / (max - min).
    normalized = models.FloatField()
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["execution", "metric_id", "user"], name="one_rating_per_person_metric_run")
        ]
        indexes = [
            models.Index(fields=["execution", "metric_id"]),
            models.Index(fields=["entity", "metric_id"], name="rating_entity_metric"),
        ]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.entity_id is None and self.execution_id is not None:
            self.entity_id = self.execution.entity_id
        super().save(*args, **kwargs)


class RateSkip(models.Model):
    """A run one person passed by on Rate runs: it leaves their queue without a rating (others still see it)."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="rate_skips")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="rate_skips")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "execution"], name="one_rate_skip_per_person_run")]


class RatingSubmission(models.Model):
    """A rating request already answered, by idempotency key: a retry writes nothing and gets the same answer."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    idempotency_key = models.CharField(max_length=200)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="rating_submissions")
    answer = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "idempotency_key"], name="rating_idempotency_unique")]


# --- Chat episodes (grading.chat) ------------------------------------------------------------------
#
# A person's dialog with a chat role is graded by the episode: the
# consecutive turns of one role with one person. An episode IS an
# execution (run_kind "episode"); these two tables hold what a dialog has
# that a run does not: who the counterpart is, how it ended, and its turns.


class Episode(models.Model):
    """One dialog of a chat role with one person; its primary key is its execution's (the run id)."""

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    class ClosedBy(models.TextChoices):
        IDLE = "idle", "went quiet"
        AGENT = "agent", "closed by the role"
        PERSON = "person", "closed by a person"
        CODE = "code", "closed by code"
        ROLE_CHANGE = "role_change", "role changed"

    class Surface(models.TextChoices):
        DASHBOARD = "dashboard"
        TELEGRAM = "telegram"

    execution = models.OneToOneField(Execution, on_delete=models.CASCADE, related_name="episode", primary_key=True)
    role = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="episodes")
    #: The person: a Django user when known (a Telegram account mapped to one counts as that user) …
    counterpart_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="chat_episodes"
    )
    #: … else a Telegram account nobody mapped (a stranger on a public bot).
    counterpart_telegram_id = models.BigIntegerField(null=True, blank=True)
    counterpart_name = models.CharField(max_length=200, blank=True, default="")
    #: Where the episode's first message came from.
    surface = models.CharField(max_length=16, choices=Surface.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    opened_at = models.DateTimeField(default=timezone.now)
    #: The end of the role's last turn: the idle pause counts from here.
    last_reply_at = models.DateTimeField(null=True, blank=True)
    #: A turn is in progress: the idle pause does not run.
    busy = models.BooleanField(default=False)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.CharField(max_length=16, choices=ClosedBy.choices, blank=True, default="")
    #: When the closed episode's execution is finished and booked (code's close outside a turn waits out the pause).
    finish_after = models.DateTimeField(null=True, blank=True)
    #: The role's context starts empty here (the first dialog with this person, or a reset by a role change).
    fresh_context = models.BooleanField(default=True)
    #: The role versions its turns ran under, in order of first use.
    role_versions = models.JSONField(default=list, blank=True)
    #: Its turns ran under two versions or more: it counts in no window of a change.
    mixed_versions = models.BooleanField(default=False)

    class Meta:
        ordering = ["-opened_at"]
        indexes = [
            models.Index(fields=["role", "-opened_at"]),
            models.Index(fields=["status", "busy"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["role", "counterpart_user"],
                condition=models.Q(status="open", counterpart_user__isnull=False),
                name="episode_one_open_per_user",
            ),
            models.UniqueConstraint(
                fields=["role", "counterpart_telegram_id"],
                condition=models.Q(status="open", counterpart_user__isnull=True),
                name="episode_one_open_per_telegram_account",
            ),
        ]

    def __str__(self) -> str:
        return f"episode {self.pk} of {self.role_id} ({self.status})"

    @property
    def counterpart_label(self) -> str:
        """Who the role talked with, as the dashboard names them (never shown on a card)."""
        if self.counterpart_user_id is not None:
            return self.counterpart_user.get_username()
        return self.counterpart_name or f"telegram:{self.counterpart_telegram_id}"

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("grading:episode", args=[self.pk])


class Turn(models.Model):
    """One message of an episode: the person's, or the role's reply with the version it ran under."""

    class Speaker(models.TextChoices):
        PERSON = "person"
        ROLE = "role"

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="turns")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=8, choices=Speaker.choices)
    text = models.TextField(blank=True, default="")
    surface = models.CharField(max_length=16, choices=Episode.Surface.choices, blank=True, default="")
    #: The role version a reply ran under ("" for the person's turns).
    version_hash = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    cost_usd = MoneyField(default=Decimal(0))
    #: The role's tool calls in this turn: [{"tool", "arguments", "status", "error", "result"}] (clipped).
    tool_calls = models.JSONField(default=list, blank=True)
    #: Why the role's reply failed (the gateway, the round limit); "" when it answered.
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["episode", "seq"]
        constraints = [models.UniqueConstraint(fields=["episode", "seq"], name="turn_seq_unique")]

    def __str__(self) -> str:
        return f"turn {self.seq} ({self.role}) of {self.episode_id}"


class OtlpTrace(models.Model):
    """An OpenTelemetry trace being received (``grading.otlp_ingest``): one trace, one run once assembled.

    Kept after assembly so a retried export of the same trace id attaches to
    its run instead of opening another, for ``OTLP_KEEP_SECS``; then the
    sweep removes it (``grading.otlp_assemble.prune``). A trace that could not
    become a run is settled with its error (``assembly_error``) and kept, its
    pending spans with it, until a person removes it.
    """

    trace_id = models.CharField(max_length=32, unique=True, help_text="32 hex digits, as OTLP sends it.")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="otlp_traces")
    #: The root span (no parent) as received; null until it arrives.
    root_span_id = models.CharField(max_length=16, blank=True, default="")
    root_received_at = models.DateTimeField(null=True, blank=True)
    first_received_at = models.DateTimeField(default=timezone.now)
    #: The run the trace became; null while its spans are pending.
    execution = models.OneToOneField(
        Execution, null=True, blank=True, on_delete=models.SET_NULL, related_name="otlp_trace"
    )
    assembled_at = models.DateTimeField(null=True, blank=True)
    #: Why the trace could not become a run ("<error class>: <message>"), when it was set aside; "" otherwise (the
    #: database's default too: the export's own INSERT leaves it out).
    assembly_error = models.TextField(blank=True, default="", db_default="")
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        indexes = [
            models.Index(fields=["root_received_at"], condition=models.Q(assembled_at=None), name="otlp_due"),
            models.Index(fields=["first_received_at"], condition=models.Q(assembled_at=None), name="otlp_orphan"),
            models.Index(
                fields=["assembled_at"], condition=models.Q(assembled_at__isnull=False), name="otlp_assembled"
            ),
            models.Index(fields=["assembled_at"], condition=~models.Q(assembly_error=""), name="otlp_set_aside"),
        ]

    def __str__(self) -> str:
        return f"trace {self.trace_id}"


class OtlpSpan(models.Model):
    """One received span of a trace not yet assembled: unique by trace and span id, so a retry doubles nothing."""

    trace = models.ForeignKey(OtlpTrace, on_delete=models.CASCADE, related_name="spans")
    span_id = models.CharField(max_length=16)
    #: The span as received (an OTLP ``Span`` in protobuf), read into our form when its trace is assembled.
    raw = models.BinaryField(null=True)
    #: The span in ``grading.spans``' stored form (spans received before ``raw``; null since).
    span = models.JSONField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trace", "span_id"], name="otlp_span_once")]

    def __str__(self) -> str:
        return f"span {self.span_id}"


class UnknownAgent(models.Model):
    """An agent that sent traces naming no entity of the brain: listed on the Entities page with the file to add."""

    #: What the trace named (``singularity.entity`` or ``service.name``), as sent.
    name = models.CharField(max_length=200, unique=True)
    span_count = models.BigIntegerField(default=0)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.name
