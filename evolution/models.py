"""The loop's own tables (seed 003 "What a settled cycle keeps").

``Cycle`` is ``loop_cycles``: one pass of the loop over one entity, with what
it fixes or measures once (window, frozen set, judge snapshot, watch record).
``Round`` is ``loop_proposals``: one proposal of a cycle, keyed by the cycle
and its number; a refinement is a child round, never an overwrite. A round
owns its pull request. ``Lesson`` is ``loop_lessons``. ``PullRequest`` and
``CommitStatus`` are the local forge's rows (the embedded default forge).

Verdict strength and the cycle's grade are derived at read
(``evolution.verdicts``), never stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.urls import reverse
from django.utils import timezone

from grading.models import Entity
from singularity import links
from singularity.fields import MoneyField


class Cycle(models.Model):
    class Origin(models.TextChoices):
        GRADE = "grade", "a landing grade"
        REQUEST = "request", "Analyze now"
        CADENCE = "cadence", "a scheduled look"
        IDEA = "idea", "an idea"

    class Phase(models.TextChoices):
        ANALYSING = "analysing"
        DECIDING = "deciding"  # a round waits on a person (decide or retry card)
        APPLYING = "applying"
        CHECKING = "checking"  # the PR is open; the pre-merge check replays and judges it before any merge
        MERGE_WAIT = "merge_wait"  # the PR is open; the merge gate decides
        WATCHING = "watching"
        REVERTING = "reverting"  # settled regressed (or reverted by policy); following the revert PR
        SETTLED = "settled"

    class Status(models.TextChoices):
        """The terminal a cycle settled at (empty while it is live)."""

        VALIDATED = "validated"
        REGRESSED = "regressed"
        UNVALIDATED = "unvalidated"
        SKIPPED = "skipped"
        FAILED = "failed"

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="cycles")
    #: ``<kind>:<id>:<origin>:<anchor or instant>`` — racing producers of one cycle make one row.
    key = models.CharField(max_length=300, unique=True)
    #: The entity id while this cycle holds the entity's one live claim (unique: the database enforces it).
    claim = models.IntegerField(null=True, blank=True, unique=True)
    origin = models.CharField(max_length=10, choices=Origin.choices)
    phase = models.CharField(max_length=12, choices=Phase.choices, default=Phase.ANALYSING, db_index=True)
    status = models.CharField(max_length=12, choices=Status.choices, blank=True, default="", db_index=True)
    #: Why it settled where it did, in words for a person ("cooldown: rests until …").
    reason = models.TextField(blank=True, default="")
    #: Whether an analysis (a proposer) ran: a refusal costs nothing and starts no rest.
    analysed = models.BooleanField(default=False)
    #: On a refusal row: how many refused asks of the same kind it folds (consecutive ones share one row).
    refusals = models.PositiveIntegerField(default=0)
    #: The run whose grade opened the cycle (null for a request, a cadence look, an idea).
    anchor = models.ForeignKey(
        "grading.Execution", null=True, blank=True, on_delete=models.SET_NULL, related_name="anchored_cycles"
    )
    #: The window the cycle is evidence of: {from, to, runIds, reason, ready, progress, metrics}.
    window = models.JSONField(default=dict, blank=True)
    #: The frozen set (null: no pre-merge check — check.mode none).
    frozen = models.JSONField(null=True, blank=True)
    #: The judge pinned at the cycle's start (grading.pin snapshot).
    judge = models.JSONField(default=dict, blank=True)
    #: The entity's resolved terms as the cycle opened (for reading; every deadline is read once per phase).
    terms = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    idea = models.ForeignKey("evolution.Idea", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    #: What the loop's own agents spent on this cycle, all rounds (the proposal card's "spend so far").
    spent_usd = MoneyField(default=0)

    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    proposed_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    merged_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    #: Last movement (opened, advanced a stage, settled): loop_history's ``since`` compares with it.
    moved_at = models.DateTimeField(default=timezone.now, db_index=True)

    #: The pre-merge check's deadline (check.deadlineHours, read once as the check starts).
    check_deadline = models.DateTimeField(null=True, blank=True)
    #: The merge wait's deadline (watch.deadlineHours read once the change shipped) and the poll's clock.
    merge_deadline = models.DateTimeField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True, db_index=True)
    poll_interval_s = models.PositiveIntegerField(default=0)

    watch_opened_at = models.DateTimeField(null=True, blank=True)
    watch_deadline = models.DateTimeField(null=True, blank=True)
    #: The observed window the watch last stored, and its tally ("1 of 5 graded").
    watch_window = models.JSONField(null=True, blank=True)
    watch_tally = models.CharField(max_length=200, blank=True, default="")
    #: The verdict the watch settled on, verbatim: {verdict, perMetric, perInput, reason}.
    watch_verdict = models.JSONField(null=True, blank=True)
    #: The lesson the settle owed and the archive refused (kept instead of dropped).
    lesson_error = models.TextField(blank=True, default="")
    #: A revert opened by policy (watch.onInconclusive: revert) rather than by a regression.
    reverted_by_policy = models.BooleanField(default=False)
    #: A lock-group sibling's change that landed inside this cycle's watch: {cycle, entity, group, what, pr, at}.
    confounded_by = models.JSONField(null=True, blank=True)
    #: A commit no cycle shipped that landed on the entity's files during the watch: {sha, author, subject, files}.
    confounded_by_edit = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["entity", "-started_at"]),
            models.Index(fields=["entity", "status", "-completed_at"]),
            # The breaker's bounded read (``steering.autonomy._bounded_sql``): the regressed settles of the fleet
            # are one range of it, an entity's newest validated settle the first entry of another.
            models.Index(
                fields=["status", "entity", "-completed_at", "-id"],
                condition=models.Q(
                    analysed=True, merged_at__isnull=False, status__in=["validated", "regressed", "unvalidated"]
                ),
                name="cycle_shipped",
            ),
            # The live cycles (a few hundred of a history of thousands), oldest first: what the fleet reads.
            models.Index(fields=["started_at", "id"], condition=~models.Q(phase="settled"), name="cycle_live"),
        ]

    def __str__(self) -> str:
        return f"cycle {self.pk} of {self.entity}"

    def get_absolute_url(self) -> str:
        return links.path("evolution:cycle", self.pk)

    @property
    def live(self) -> bool:
        return self.phase != self.Phase.SETTLED

    @property
    def actor(self) -> str:
        """The cycle's own actor: what ``decided_by`` records when no person was asked."""
        return f"loop:cycle:{self.pk}"


class Round(models.Model):
    class Status(models.TextChoices):
        ANALYSING = "analysing"
        PROPOSED = "proposed"  # waiting on the decide gate
        ACCEPTED = "accepted"
        APPLIED = "applied"  # committed, PR open
        MERGED = "merged"
        CLOSED = "closed"  # its PR closed unmerged (or left past the deadline)
        SKIPPED = "skipped"
        REFINED = "refined"  # a person replied; a child round replaced it
        FAILED = "failed"  # broken analysis or apply; a Retry card asks what next

    class Rejection(models.TextChoices):
        HUMAN = "human", "a person's Skip"
        TIMEOUT = "timeout", "the review deadline"
        PROPOSER = "proposer", "the proposer declined"
        #: Not a rejection: a person's (or the policy's) Accept that the lock, a hold or a sibling proposal's Accept
        #: set aside (issue 31). ``set_aside`` says what did.
        ASIDE = "aside", "set aside after its Accept"

    cycle = models.ForeignKey(Cycle, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveSmallIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ANALYSING)
    #: "pipeline:<id>" or "agent:<model ref>".
    author = models.CharField(max_length=200, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    hypothesis = models.TextField(blank=True, default="")
    #: [{path, content}] whole new contents (content null deletes the file).
    files = models.JSONField(default=list, blank=True)
    cited_lessons = models.JSONField(default=list, blank=True)
    #: A person's reply this round answers (refinement.md).
    refinement = models.TextField(blank=True, default="")
    #: The brief's documents as handed over (name -> text), for the story and for audit.
    brief = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    cost_usd = MoneyField(default=0)
    #: What the proposer agent read before it answered: one entry a tool call, in order
    #: {turn, tool, arguments, chars, refused, turnCostUsd} (evolution.investigate; empty for a pipeline).
    reads = models.JSONField(default=list, blank=True)

    card = models.ForeignKey("hitl.Card", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    review_deadline = models.DateTimeField(null=True, blank=True)
    #: ``reviewDeadlineHours`` as it stood when the round opened: every wait on a person in this round counts it
    #: (R9.6; an edit reaches the next round). None on rounds written before it was kept: the setting is read.
    review_hours = models.FloatField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, blank=True, default="")
    decision_note = models.TextField(blank=True, default="")
    rejection = models.CharField(max_length=10, choices=Rejection.choices, blank=True, default="")
    #: What set the round aside after its Accept (or while it waited on its card): "lock group support is held by …".
    set_aside = models.TextField(blank=True, default="")
    #: The gate that merges this round's PR: "human" or "auto" (an armed auto-merge).
    merge_gate = models.CharField(max_length=10, blank=True, default="")
    #: Who stood behind the acceptance: "person" (a card), "auto" (decide: auto — unattended), "grant" (loop:auto_accept).
    acceptance = models.CharField(max_length=10, blank=True, default="")
    #: Why a gate this round met was a person's though the policy says auto (the breaker, calibration, a refused arm).
    gate_note = models.TextField(blank=True, default="")

    base_sha = models.CharField(max_length=40, blank=True, default="")
    branch = models.CharField(max_length=200, blank=True, default="")
    head_sha = models.CharField(max_length=40, blank=True, default="")
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    pr_url = models.CharField(max_length=500, blank=True, default="")
    merge_sha = models.CharField(max_length=40, blank=True, default="")
    #: The diff gate's record: {paths, lines, digests} or the refusal.
    gate = models.JSONField(default=dict, blank=True)
    checked_sha = models.CharField(max_length=40, blank=True, default="")
    check_run_ids = models.JSONField(default=list, blank=True)
    baseline_run_ids = models.JSONField(default=list, blank=True)
    check_verdict = models.JSONField(null=True, blank=True)

    revert_pr_number = models.PositiveIntegerField(null=True, blank=True)
    revert_pr_url = models.CharField(max_length=500, blank=True, default="")
    revert_opened_at = models.DateTimeField(null=True, blank=True)
    revert_deadline = models.DateTimeField(null=True, blank=True)
    #: merged | closed | expired (empty while followed or when there is no revert).
    revert_outcome = models.CharField(max_length=10, blank=True, default="")
    revert_merged_at = models.DateTimeField(null=True, blank=True)
    revert_merge_gate = models.CharField(max_length=10, blank=True, default="")

    created_at = models.DateTimeField(default=timezone.now)
    proposed_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    #: When a worker took this round's apply (a conditional UPDATE): another delivery of the step does nothing,
    #: and a claim older than the apply's lease (its worker died) is taken again (evolution.loop.recovery).
    apply_claimed_at = models.DateTimeField(null=True, blank=True)
    #: When the due-step sweep last handed this round's apply to a worker again (its message was lost).
    apply_sent_at = models.DateTimeField(null=True, blank=True)
    #: The heartbeat of the worker analysing this round (set at its claim, renewed while it works): one older than
    #: the analysis's lease (LOOP_ANALYSIS_LEASE_SECS, two ticks) is a worker that died (evolution.core.due).
    analysis_beat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cycle_id", "number"]
        constraints = [models.UniqueConstraint(fields=["cycle", "number"], name="evolution_round_number")]
        # The rounds merged by an autonomous gate (the breaker's unmeasured rule), a handful of all of them.
        indexes = [
            models.Index(
                fields=["cycle"],
                condition=models.Q(merge_gate="auto") & ~models.Q(merge_sha=""),
                name="round_autonomous",
            )
        ]

    def __str__(self) -> str:
        return f"cycle {self.cycle_id} · r{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("evolution:cycle", args=[self.cycle_id]) + f"?proposal={self.number}"


class Replay(models.Model):
    """One side of one pair of a round's pre-merge check: a frozen slot, a trial, replayed at a pinned commit.

    The candidate runs at the PR's checked head, the incumbent at the frozen
    base commit. ``execution`` is created with the row (its id is on the round
    before the wait opens) and run by a worker; ``started_at`` is the worker's
    claim, so a lost message or a dead worker is picked up again by the sweep.
    """

    class Side(models.TextChoices):
        CANDIDATE = "candidate"
        INCUMBENT = "incumbent"

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="replays")
    side = models.CharField(max_length=10, choices=Side.choices)
    #: The frozen slot's index in ``cycle.frozen["slots"]``.
    slot = models.PositiveSmallIntegerField()
    trial = models.PositiveSmallIntegerField(default=1)
    commit = models.CharField(max_length=40)
    execution = models.OneToOneField(
        "grading.Execution", null=True, blank=True, on_delete=models.SET_NULL, related_name="replay"
    )
    created_at = models.DateTimeField(default=timezone.now)
    #: When a worker took it (null: due). A claim older than the lease is taken again.
    started_at = models.DateTimeField(null=True, blank=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["round_id", "slot", "trial", "side"]
        constraints = [models.UniqueConstraint(fields=["round", "side", "slot", "trial"], name="evolution_replay_once")]

    def __str__(self) -> str:
        return f"{self.round} {self.side} slot {self.slot} trial {self.trial}"


class Lesson(models.Model):
    """What a round that reached a terminal teaches the next analysis of its entity."""

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="lessons")
    cycle = models.ForeignKey(Cycle, on_delete=models.CASCADE, related_name="lessons")
    round = models.OneToOneField(Round, on_delete=models.CASCADE, related_name="lesson")
    #: One of the five terminals: validated, regressed, unvalidated, skipped, failed.
    outcome = models.CharField(max_length=12, choices=Cycle.Status.choices)
    summary = models.TextField(blank=True, default="")
    hypothesis = models.TextField(blank=True, default="")
    #: human | timeout | proposer | "" — a person's no is recalled first.
    rejection = models.CharField(max_length=10, blank=True, default="")
    note = models.TextField(blank=True, default="")
    #: The numbers, from the watch's perMetric first, then the check's.
    per_metric = models.JSONField(default=list, blank=True)
    reason = models.TextField(blank=True, default="")
    files = models.JSONField(default=list, blank=True, help_text="The paths the round changed.")
    helpful = models.IntegerField(default=0)
    harmful = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["entity", "-created_at"])]

    def __str__(self) -> str:
        return f"lesson {self.pk} ({self.outcome}) of {self.entity}"


class Recall(models.Model):
    """A lesson handed to a later round's brief ("It remembered" / "recalled by")."""

    lesson = models.ForeignKey(Lesson, on_delete=models.CASCADE, related_name="recalls")
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="recalled")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lesson", "round"], name="evolution_recall_once")]


class Idea(models.Model):
    """A person's hypothesis for one entity, queued first in first out (issue 6 delivers it)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        TAKEN = "taken"
        WITHDRAWN = "withdrawn"

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="ideas")
    text = models.TextField()
    author = models.CharField(max_length=200)
    #: Where the author hears back: "telegram:<chat id>" or "" (where notices go).
    reply_to = models.CharField(max_length=100, blank=True, default="")
    #: An agent's post waits on a person's approval card; True once approved (a person's post is approved).
    approved = models.BooleanField(default=True)
    card = models.ForeignKey("hitl.Card", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True)
    cycle = models.ForeignKey(Cycle, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]


# --- The local forge --------------------------------------------------------------


class PullRequest(models.Model):
    """A pull request on the local forge: a branch of the bare repository plus this row."""

    class State(models.TextChoices):
        OPEN = "open"
        MERGED = "merged"
        CLOSED = "closed"

    number = models.PositiveIntegerField(unique=True)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True, default="")
    head = models.CharField(max_length=200, help_text="The branch proposed for merging.")
    base = models.CharField(max_length=200, default="main")
    head_sha = models.CharField(max_length=40)
    base_sha = models.CharField(max_length=40, help_text="The commit the branch was cut from.")
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPEN, db_index=True)
    merge_sha = models.CharField(max_length=40, blank=True, default="")
    merged_by = models.CharField(max_length=200, blank=True, default="")
    closed_by = models.CharField(max_length=200, blank=True, default="")
    #: Auto-merge armed (issue 6): {method, sha} or empty.
    auto_merge = models.JSONField(default=dict, blank=True)
    #: Comments left on the request, oldest first: [{by, body, at}] (the pre-merge check's record on a PR it closed).
    comments = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    merged_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"PR #{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("evolution:pull", args=[self.number])


class CommitStatus(models.Model):
    """A commit status on the local forge (latest per sha and context wins)."""

    class State(models.TextChoices):
        PENDING = "pending"
        SUCCESS = "success"
        FAILURE = "failure"
        ERROR = "error"

    sha = models.CharField(max_length=40, db_index=True)
    context = models.CharField(max_length=100)
    state = models.CharField(max_length=8, choices=State.choices)
    description = models.CharField(max_length=300, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "commit statuses"
        constraints = [models.UniqueConstraint(fields=["sha", "context"], name="evolution_status_once")]


def as_json(value: Any) -> Any:
    """JSON-safe copy (used when storing records built from Decimals)."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


# --- Steering (issue 6) -----------------------------------------------------------


class Supervision(models.Model):
    """A hold, release, re-arm or dismissed failure, with who did it and why (seed 003 "Supervision")."""

    class Kind(models.TextChoices):
        HOLD = "hold"
        RELEASE = "release"
        REARM = "rearm"
        DISMISS = "dismiss", "dismiss a failure"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    #: The entity supervised; null for a lock-group hold/release (then ``group`` names it).
    entity = models.ForeignKey(Entity, null=True, blank=True, on_delete=models.CASCADE, related_name="supervision")
    group = models.CharField(max_length=100, blank=True, default="")
    #: For a dismissal: the cycle whose failure was dismissed.
    cycle = models.ForeignKey(Cycle, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = models.CharField(max_length=200)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    #: The hash chain (``evolution.core.chain``): the row before's hash and this row's own ("" before chaining).
    prev_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    hash = models.CharField(max_length=64, blank=True, default="", editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["entity", "kind", "-created_at"]),
            models.Index(fields=["group", "-created_at"]),
        ]

    def __str__(self) -> str:
        what = self.entity or f"group {self.group}"
        return f"{self.kind} of {what} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        _save_chained(self, super().save, *args, **kwargs)


def _save_chained(row: models.Model, save: Any, *args: Any, **kwargs: Any) -> None:
    """Insert ``row`` chained after its log's newest row (``evolution.core.chain``); an update re-hashes nothing.

    A chained row is written once: changing it afterwards is what ``manage.py loop verify`` finds.
    """
    if not row._state.adding:
        save(*args, **kwargs)
        return
    with transaction.atomic():
        seal(row)
        save(*args, **kwargs)


def chain_entry(row: models.Model) -> dict[str, Any]:
    """The row as its hash covers it (``evolution.core.chain``): every concrete column but ``id``, ``hash`` and a
    link the database itself empties (``SET_NULL``: deleting the cycle a dismissal named is not an edit of the
    log), JSON-ready, times in UTC."""
    out: dict[str, Any] = {}
    for field in row._meta.concrete_fields:
        if field.primary_key or field.attname == "hash":
            continue
        if field.remote_field is not None and field.remote_field.on_delete is models.SET_NULL:
            continue
        value = getattr(row, field.attname)
        if isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat()
        out[field.attname] = value
    return out


def seal(row: models.Model) -> None:
    """Chain ``row`` (about to be inserted) after the newest row of its log; call inside the row's transaction.

    Locks the log's head (``ChainHead``) until the transaction ends, sets the row's ``prev_hash`` and ``hash``
    and moves the head to it. The caller saves the row in the same transaction.
    """
    from singularity.being.chain import line_hash

    assert transaction.get_connection().in_atomic_block, "seal() runs inside the row's own transaction"
    head, _ = ChainHead.objects.select_for_update().get_or_create(log=type(row)._meta.label)
    row.prev_hash = head.hash
    row.hash = line_hash(chain_entry(row))
    ChainHead.objects.filter(pk=head.pk).update(hash=row.hash)


class ActionLog(models.Model):
    """Every loop-settings write that changed something: who, what, against which entity or the manifest, the diff."""

    actor = models.CharField(max_length=200)
    op = models.CharField(max_length=20, help_text="loop_join, loop_set, loop_widen, hold, release, rearm, …")
    #: "<kind>:<id>" or "constitution/MANIFEST.yaml".
    subject = models.CharField(max_length=300)
    entity = models.ForeignKey(Entity, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    summary = models.TextField(blank=True, default="")
    diff = models.TextField(blank=True, default="")
    commit = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    #: The hash chain (``evolution.core.chain``): the row before's hash and this row's own ("" before chaining).
    prev_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    hash = models.CharField(max_length=64, blank=True, default="", editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        _save_chained(self, super().save, *args, **kwargs)


class ChainHead(models.Model):
    """The newest hash of one chained log (``evolution.core.chain``): the row appends lock, so chains never fork."""

    log = models.CharField(max_length=100, unique=True)
    hash = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.log} at {self.hash[:12] or 'nothing'}"


class WaitingWindow(models.Model):
    """What the trigger's window was waiting on when it was last sampled not ready (seed "A window that waits")."""

    entity = models.OneToOneField(Entity, on_delete=models.CASCADE, related_name="waiting_window")
    have = models.IntegerField(default=0)
    need = models.IntegerField(default=0)
    unit = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    awaiting_person = models.JSONField(null=True, blank=True)
    #: When ``have`` last changed (the stall clock), and when this record was last written.
    moved_at = models.DateTimeField(default=timezone.now)
    sampled_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)


class AutoAcceptGrant(models.Model):
    """``loop:auto_accept``: an admin's scoped, call-bounded, expiring, revocable delegation of the decide gate."""

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="auto_accept_grants")
    issued_by = models.CharField(max_length=200)
    max_calls = models.PositiveIntegerField(default=1)
    calls = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"auto-accept for {self.entity} ({self.calls}/{self.max_calls})"


class WidenGrant(models.Model):
    """``loop:autonomy`` delegated to the agent that asked (R12.22): a person's Approve of its loop_widen card mints
    one, with no call limit, for 24 hours; until then every further widening of oversight by that agent token is
    made unasked (``evolution.steering.settings.grants``). Revocable; a loosening of spend or checks still asks."""

    #: Whose asks it covers, in words: "agent:<token name> of <username>".
    asker = models.CharField(max_length=200)
    #: The agent token that asked: the scope (another token of the same name is another agent).
    token = models.ForeignKey("singularity.ApiToken", on_delete=models.CASCADE, related_name="widen_grants")
    #: The approved widen card it was minted on.
    card_id = models.UUIDField()
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    #: None: no call limit (the seed's default).
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    calls = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["token", "-expires_at"], name="widen_grant_token")]

    def __str__(self) -> str:
        return f"loop:autonomy for {self.asker} until {self.expires_at:%Y-%m-%d %H:%M}"


class GroupLock(models.Model):
    """One row per lock group: an Accept locks the rows of its entity's groups while it checks for a holder and claims.

    The row carries nothing else: it exists so that two members accepted at once serialize on it (seed 003,
    "Lock groups": "an Accept is the arbiter").
    """

    group = models.CharField(max_length=100, unique=True)

    def __str__(self) -> str:
        return f"lock group {self.group}"


# --- The GitHub forge (issue 17) ------------------------------------------------------


class GitHubPull(models.Model):
    """What the GitHub forge last read of one pull request, the arm it made, and the outcome of its last call.

    ``etag`` and ``data`` make a poll conditional: GitHub answers an unchanged
    request 304, which it does not count against the rate limit, and the kept
    fields answer the read. ``armed_sha`` is the commit the loop armed
    auto-merge on: a head that moved past it has the arm taken out.
    ``last_error`` / ``attempts`` say how the last call went (attempts counts
    consecutive failures; a success resets both).
    """

    repository = models.CharField(max_length=140)
    number = models.PositiveIntegerField()
    etag = models.CharField(max_length=200, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    armed_sha = models.CharField(max_length=40, blank=True, default="")
    armed_method = models.CharField(max_length=10, blank=True, default="")
    armed_by = models.CharField(max_length=200, blank=True, default="")
    armed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["repository", "number"], name="evolution_github_pull_once")]

    def __str__(self) -> str:
        return f"{self.repository}#{self.number}"


class GitHubDelivery(models.Model):
    """One webhook delivery GitHub made to /github/webhook/, by its X-GitHub-Delivery id: a redelivery does nothing."""

    delivery = models.CharField(max_length=100, unique=True)
    event = models.CharField(max_length=60)
    action = models.CharField(max_length=60, blank=True, default="")
    number = models.PositiveIntegerField(null=True, blank=True)
    #: What the receiver did with it, in words ("woke the wait of PR #12", "ignored: …").
    outcome = models.CharField(max_length=300, blank=True, default="")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.event} delivery {self.delivery}"


class GitHubRateLimit(models.Model):
    """GitHub's rate limit for one credential on one GitHub, as every process sees it (issue 32).

    ``until``: no call is made before it (a primary limit's ``X-RateLimit-Reset``,
    a secondary limit's ``Retry-After``, or at least a minute growing
    exponentially with ``strikes``, consecutive secondary limits without one).
    ``reason``: GitHub's words. A call that succeeds after ``until`` clears ``strikes``.
    """

    key = models.CharField(max_length=300, unique=True)
    until = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    strikes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"GitHub rate limit {self.key} until {self.until}"


class Backtest(models.Model):
    """One backtest report: what a loop policy would have done over the entity's graded history (issue 16).

    A proposed policy's report points at today's (``compared_with``), so the two are read side by side.
    """

    class Label(models.TextChoices):
        CURRENT = "current", "today's policy"
        PROPOSED = "proposed", "the proposed policy"

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="backtests")
    label = models.CharField(max_length=10, choices=Label.choices)
    #: The settings changes the proposed policy makes: [{key, op, value}] (empty for today's).
    changes = models.JSONField(default=list, blank=True)
    since = models.DateTimeField()
    until = models.DateTimeField()
    #: The report (``evolution.loop.backtest.backtest``): money in it is decimal strings.
    result = models.JSONField(default=dict)
    compared_with = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["entity", "-created_at"])]

    def __str__(self) -> str:
        return f"backtest {self.pk} of {self.entity} ({self.label})"


class AaReport(models.Model):
    """One A/A calibration report (issue 31): the pre-merge check run with the incumbent as its own candidate (the
    same commit on both sides) on freshly frozen sets, and the watch read on two windows of one commit — how often
    the engine's verdict would have said validated, regressed or inconclusive, with the spend.

    Kept like a backtest report; the work runs on a worker. The row is the job: ``due`` until a worker takes it
    (``started_at``), ``done`` or ``failed`` after; a due row nobody took, or whose worker's hold ran out, is
    started again by the loop's sweep (``evolution.loop.aa.due``).
    """

    class Status(models.TextChoices):
        DUE = "due", "due"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="aa_reports")
    trials = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DUE)
    #: The report (``evolution.loop.aa.calibrate``): money in it is decimal strings.
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["entity", "-created_at"]), models.Index(fields=["status", "created_at"])]

    def __str__(self) -> str:
        return f"A/A report {self.pk} of {self.entity} ({self.status})"


class PullCheck(models.Model):
    """The pre-merge check run on a pull request anyone opened against the brain (issue 35): one per request.

    ``entities`` holds each loop entity the PR changes with the check's record (the same shape as
    ``Round.check_verdict``); ``verdict`` is the worst of them. A merged PR's check is what a watch it confounds
    names (``evolution.prcheck.for_commit``).
    """

    number = models.PositiveIntegerField(db_index=True)
    head_sha = models.CharField(max_length=40, db_index=True)
    base_sha = models.CharField(max_length=40)
    requested_by = models.CharField(max_length=200)
    verdict = models.CharField(max_length=12, help_text="validated, regressed, unvalidated, or none (no entity).")
    reason = models.TextField(blank=True, default="")
    entities = models.JSONField(default=list, blank=True)
    #: " scenario:triage heartbeat:pulse ": the entities checked, for an entity's page (a substring match on both
    #: databases, where a JSON containment on a list of objects is not).
    touched = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"PR #{self.number} at {self.head_sha[:12]}: {self.verdict}"
