"""REST shapes of the loop's reads (loop_status, loop_history, loop_get_cycle) and of loop_analyze.

The reads serialize the dicts ``evolution.status`` builds; field names are
the seed's (camelCase). Every instant is an ISO string and money a decimal
string. Serializers validate input; they never change anything.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models.manager import BaseManager
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject
from rest_framework.settings import api_settings

from singularity.serializers import MoneyString, NullableMoneyString

STATE_HELP = (
    "off, idle, window (waiting on a window), analysing, waiting_on_you, applying, checking, pr_open, watching, reverting, "
    "paused, held (a lock-group sibling's change holds the entity)"
)
GATE_HELP = (
    "decide, retry (a card), grant (an approval card), merge (a PR under a human merge gate), revert (a revert PR "
    "being followed), rearm (the breaker paused the entity), window (the trigger window waits on a person's move), "
    "stall (the trigger window stopped moving), failure (a failed cycle nobody dismissed), config (the definition "
    "does not load)"
)


class Instant(serializers.DateTimeField):
    """A read-only, nullable ISO 8601 instant."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


class JSONRecord(serializers.JSONField):
    """A stored record returned verbatim (a window, a verdict, a gate record)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)


class PullSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    url = serializers.CharField()
    status = serializers.CharField(required=False, help_text="open, merged or closed")


class LinkSerializer(serializers.Serializer):
    id = serializers.CharField()
    url = serializers.CharField()


class PrLinkSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    url = serializers.CharField()


class LiveWatchSerializer(serializers.Serializer):
    progress = JSONRecord(allow_null=True, help_text="The watch window's own progress {have, need, unit}.")
    reason = serializers.CharField()
    tally = serializers.CharField(help_text='"1 of 5 graded"')
    deadline = Instant()


class MachineSerializer(serializers.Serializer):
    phase = serializers.CharField(
        help_text="The machine's phase: analysing, deciding, applying, checking, merge_wait, watching, reverting."
    )


class LiveCycleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    phase = serializers.CharField(
        source="storyPhase", help_text="The story's phase a person reads: observe, hypothesize, change, prove, learn."
    )
    machine = MachineSerializer(help_text="The machine's own phase (machine.phase).")
    round = serializers.IntegerField(allow_null=True, help_text="The newest round's number.")
    prUrl = serializers.CharField(help_text="The PR's address; empty before one opens.")
    pr = PullSerializer(allow_null=True)
    origin = serializers.CharField()
    startedAt = Instant()
    url = serializers.CharField(help_text="The cycle's story on the dashboard.")
    watch = LiveWatchSerializer(allow_null=True)


class NeedsYouSerializer(serializers.Serializer):
    gate = serializers.CharField(help_text=GATE_HELP)
    targetKind = serializers.CharField(allow_null=True, help_text="The entity waited on (null: a card naming none).")
    targetId = serializers.CharField(allow_null=True)
    name = serializers.CharField(required=False)
    cycleId = serializers.IntegerField(allow_null=True, help_text="The cycle waiting, when one is.")
    round = serializers.IntegerField(allow_null=True)
    since = Instant(help_text="Since when it waits.")
    until = Instant(help_text="Its own bound (null: until a person acts).")
    cardId = serializers.CharField(
        allow_null=True, required=False, help_text="The HITL card's id (decide, retry, grant)."
    )
    card = LinkSerializer(allow_null=True, help_text="The HITL card that answers it (decide, retry, grant).")
    pr = PrLinkSerializer(allow_null=True)
    next = serializers.CharField(help_text="Who acts, and through what.")
    url = serializers.CharField(help_text="Where the person acts.")
    clause = serializers.CharField(
        required=False, help_text='What it is about in a few words ("waiting on you: score PR #16", a reason).'
    )


class WaitsSerializer(serializers.Serializer):
    progress = JSONRecord(allow_null=True, help_text="{have, need, unit} as the window last answered.")
    reason = serializers.CharField()
    awaitingPerson = JSONRecord(allow_null=True, help_text="{what, url?}: the person's move the window waits on.")
    movedAt = Instant(help_text="When its count last moved (the stall clock).")
    sampledAt = Instant(help_text="When the window was last sampled.")


class NextSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="What comes next, in a sentence.")
    waits = WaitsSerializer(allow_null=True, help_text="What the trigger window waits on (null: it does not wait).")
    meter = JSONRecord(allow_null=True, help_text="The trigger window's progress {have, need, unit}, when it waits.")


class StuckSerializer(serializers.Serializer):
    cycleId = serializers.IntegerField(allow_null=True)
    round = serializers.IntegerField(allow_null=True)
    since = Instant(help_text="Since when the step has been due with no worker on it.")
    clause = serializers.CharField()
    machine = MachineSerializer(help_text="The stuck cycle's machine phase (stuck.machine.phase).")


class MonthSpendSerializer(serializers.Serializer):
    """This calendar month's loop spend on the entity and what it moved (issue 16): snake_case."""

    spent_usd = MoneyString(help_text="What the cycles opened this month cost, to the last decimal.")
    ceiling_usd = NullableMoneyString(help_text="The brain's loop.budget.maxUsdPerMonth; null: no ceiling.")
    validated = serializers.IntegerField(help_text="Cycles opened this month that settled validated (kept).")
    regressed = serializers.IntegerField(help_text="Cycles opened this month that settled regressed.")
    cycles = serializers.IntegerField(help_text="Cycles opened this month that ran an analysis.")


class EntityStatusSerializer(serializers.Serializer):
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    name = serializers.CharField()
    enabled = serializers.BooleanField(help_text="The loop is on for the entity.")
    state = serializers.CharField(help_text=STATE_HELP)
    stateLabel = serializers.CharField()
    live = LiveCycleSerializer(allow_null=True, help_text="The cycle holding the entity, else its newest live one.")
    inFlight = LiveCycleSerializer(many=True, help_text="Every cycle of the entity not settled yet.")
    next = NextSerializer(source="nextStep", help_text="What comes next: the sentence, the window's waits, its meter.")
    stuck = StuckSerializer(allow_null=True, help_text="A step due with no worker on it (null: none).")
    needsYou = NeedsYouSerializer(many=True)
    waits = WaitsSerializer(
        allow_null=True, help_text="What the trigger window waits on (null: it does not wait); also next.waits."
    )
    month = MonthSpendSerializer(help_text="This calendar month's loop spend and what it moved.")


class LoopStatusSerializer(serializers.Serializer):
    entities = EntityStatusSerializer(many=True)
    needsYou = serializers.IntegerField(
        help_text='How many waits on a person there are: the dashboard\'s "N need you".'
    )
    needsYouItems = NeedsYouSerializer(many=True, help_text="Every wait on a person, oldest first.")
    nextCursor = serializers.CharField(
        allow_null=True, help_text="The next page of the fleet's entities (pass as cursor); null on the last."
    )


class CycleGradeSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="Improvement, Regression, Tradeoff, Tie or Inconclusive")
    n = serializers.IntegerField(help_text="The runs or pairs the grade rests on.")


class HistoryRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    origin = serializers.CharField(help_text="grade, request, cadence or idea")
    status = serializers.CharField(
        allow_null=True, help_text="validated, regressed, unvalidated, skipped, failed; null while live"
    )
    phase = serializers.CharField()
    reason = serializers.CharField()
    startedAt = Instant()
    proposedAt = Instant()
    appliedAt = Instant()
    completedAt = Instant()
    movedAt = Instant(help_text="The last movement; `since` compares with it.")
    rounds = serializers.IntegerField(help_text="How many rounds the cycle took.")
    pr = PullSerializer(allow_null=True)
    decidedBy = serializers.CharField(help_text="Who decided the newest round (a person, or the cycle's own actor).")
    strength = serializers.CharField(allow_null=True, help_text="paired, measured, blind; null when nothing shipped")
    grade = CycleGradeSerializer(allow_null=True)
    lessonId = serializers.IntegerField(allow_null=True)
    spentUsd = MoneyString()


class HistorySerializer(serializers.Serializer):
    cycles = HistoryRowSerializer(many=True)
    count = serializers.IntegerField(help_text="Rows on this page.")
    nextCursor = serializers.CharField(allow_null=True, help_text="Pass back as `cursor` for the next (older) page.")


class LoopGetSerializer(serializers.Serializer):
    entity = EntityStatusSerializer(help_text="The entity's loop_status entry.")
    cycles = HistoryRowSerializer(many=True, help_text="Its cycles, newest opening first (loop_history's rows).")
    count = serializers.IntegerField()
    nextCursor = serializers.CharField(allow_null=True, help_text="The next (older) page; null on the last.")


class PairSerializer(serializers.Serializer):
    slot = serializers.IntegerField(help_text="The frozen input's index in the cycle's frozenSet.")
    trial = serializers.IntegerField()
    input = serializers.CharField(help_text="The input's first characters, as a person reads it.")
    baseline = serializers.CharField(
        allow_null=True,
        help_text="The incumbent's run: a replay at the base, or the history run its frozen grade is of.",
    )
    candidate = serializers.CharField(allow_null=True, help_text="The candidate's replay at the PR's checked head.")


class CommitStatusSerializer(serializers.Serializer):
    sha = serializers.CharField()
    context = serializers.CharField()
    state = serializers.CharField(help_text="pending, success, failure or error")
    description = serializers.CharField()
    updatedAt = Instant()


class FrozenSlotSerializer(serializers.Serializer):
    slot = serializers.IntegerField()
    kind = serializers.CharField(help_text="history (a graded run's input) or case (a golden case of the loop module)")
    input = serializers.JSONField(help_text="The input the candidate and the incumbent are both replayed on.")
    label = serializers.CharField()
    heldOut = serializers.BooleanField(help_text="No run the proposer was briefed on ran on this input.")
    anchor = serializers.BooleanField(help_text="The input of the run whose grade opened the cycle.")
    runId = serializers.CharField(allow_null=True, help_text="The history run it was frozen from.")
    caseId = serializers.CharField(allow_null=True)
    incumbentScore = JSONRecord(
        allow_null=True,
        help_text="The frozen grade kept as the incumbent's side {passed, vector, judge}; null: re-run.",
    )


class CardLinkSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    url = serializers.CharField()


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    lines = serializers.IntegerField(allow_null=True, help_text="Lines of the new content; null when deleted.")
    deleted = serializers.BooleanField()


class RevertSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    url = serializers.CharField()
    openedAt = Instant()
    deadline = Instant()
    outcome = serializers.CharField(help_text="merged, closed or expired; empty while followed")
    mergedAt = Instant()
    mergeGate = serializers.CharField()


class ProposerReadSerializer(serializers.Serializer):
    """One tool call of the proposer agent's investigation (issue 33)."""

    turn = serializers.IntegerField(help_text="Which of its turns asked for it.")
    tool = serializers.CharField(help_text="file_list, file_read, db_schema, db_query, loop_history, eval_*")
    arguments = serializers.DictField(help_text="The arguments as the model sent them.")
    chars = serializers.IntegerField(help_text="How many characters the answer handed back.")
    refused = serializers.CharField(help_text="Why it was refused or failed; empty when it was answered.")
    turnCostUsd = serializers.CharField(help_text="What the turn that asked for it cost, USD decimal text.")


class RoundSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    parent = serializers.IntegerField(allow_null=True, help_text="The round this one refines or retries.")
    status = serializers.CharField()
    author = serializers.CharField()
    summary = serializers.CharField()
    hypothesis = serializers.CharField()
    refinement = serializers.CharField()
    files = serializers.ListField(child=serializers.CharField(), help_text="The paths it changes.")
    changes = ChangeSerializer(many=True)
    citedLessons = serializers.ListField(child=serializers.IntegerField())
    error = serializers.CharField()
    costUsd = MoneyString()
    reads = ProposerReadSerializer(
        many=True, help_text="What the proposer agent read before it answered, in order (none for a pipeline)."
    )
    createdAt = Instant()
    proposedAt = Instant()
    decidedAt = Instant()
    decidedBy = serializers.CharField()
    decisionNote = serializers.CharField()
    rejection = serializers.CharField(
        help_text="human, timeout, proposer, aside (accepted, then set aside: not a rejection) or empty"
    )
    setAside = serializers.CharField(help_text="What set the round aside after its Accept; empty otherwise.")
    asideWords = serializers.CharField(
        help_text="A set-aside round's decision in words (whose Accept, what set it aside); empty otherwise."
    )
    reviewDeadline = Instant()
    card = CardLinkSerializer(allow_null=True)
    mergeGate = serializers.CharField()
    pr = PullSerializer(allow_null=True)
    branch = serializers.CharField()
    baseSha = serializers.CharField()
    headSha = serializers.CharField()
    mergeSha = serializers.CharField()
    gate = JSONRecord(help_text="The diff gate's record, or its refusal.")
    checkedSha = serializers.CharField()
    checkVerdict = JSONRecord(
        allow_null=True,
        help_text="null wherever no check comparator ran. Its `power` says what the check could see: {metric, pairs, "
        "inputs, trials, heldOut: {k, n}, heldOutAnswer: {verdict, reason, pairs, inputs} | null, band, twoValued, "
        "smallestGain, seenOnly, words}.",
    )
    pairs = PairSerializer(many=True, help_text="The check's pairs input by input.")
    statuses = CommitStatusSerializer(
        many=True, help_text="The local forge's commit statuses on the checked commit (else the head); [] on GitHub."
    )
    revert = RevertSerializer(allow_null=True)


class RunRowSerializer(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField(allow_null=True)
    gradeStatus = serializers.CharField(allow_null=True)
    passed = serializers.BooleanField(allow_null=True)
    score = serializers.FloatField(allow_null=True)
    bad = serializers.BooleanField(allow_null=True, help_text="Bad by the trigger's rule; null when not graded.")
    metrics = JSONRecord()
    failureCategory = serializers.CharField()
    completedAt = Instant()
    url = serializers.CharField()


class WatchSerializer(serializers.Serializer):
    openedAt = Instant()
    deadline = Instant()
    window = JSONRecord(allow_null=True)
    tally = serializers.CharField()
    verdict = JSONRecord(allow_null=True, help_text="The watch's record verbatim; null where it never settled.")
    runs = RunRowSerializer(many=True)


class LessonSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    round = serializers.IntegerField()
    outcome = serializers.CharField()
    ended = serializers.CharField()
    summary = serializers.CharField()
    hypothesis = serializers.CharField()
    rejection = serializers.CharField()
    note = serializers.CharField()
    decidedBy = serializers.CharField()
    perMetric = JSONRecord()
    reason = serializers.CharField()
    files = JSONRecord()
    helpful = serializers.IntegerField()
    harmful = serializers.IntegerField()
    createdAt = Instant()


class RememberedSerializer(serializers.Serializer):
    lessonId = serializers.IntegerField()
    cycleId = serializers.IntegerField()
    round = serializers.IntegerField()
    ended = serializers.CharField()
    strength = serializers.CharField(allow_null=True)
    label = serializers.CharField(help_text='"cycle 3 · r1 · kept · paired"')
    summary = serializers.CharField()
    rejection = serializers.CharField()
    note = serializers.CharField()
    decidedBy = serializers.CharField()
    recalledIn = serializers.IntegerField(help_text="The round of this cycle that was handed it.")


class RecalledBySerializer(serializers.Serializer):
    lessonId = serializers.IntegerField()
    cycleId = serializers.IntegerField()
    round = serializers.IntegerField()
    ended = serializers.CharField()
    strength = serializers.CharField(allow_null=True)
    label = serializers.CharField()


class CycleCostSerializer(serializers.Serializer):
    """A cycle's whole cost, exact (issue 16): snake_case, money as decimal strings."""

    total_usd = MoneyString(help_text="The sum of the four parts.")
    proposer_usd = MoneyString(help_text="Every proposer call of every round.")
    replays_usd = MoneyString(help_text="The pre-merge check's replays' own model calls.")
    check_judge_usd = MoneyString(help_text="The judge grading the check's replays.")
    watch_judge_usd = MoneyString(help_text="The judge grading the runs the watch booked exempt.")


class CycleDetailSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    targetKind = serializers.CharField()
    targetId = serializers.CharField()
    name = serializers.CharField()
    origin = serializers.CharField()
    status = serializers.CharField(allow_null=True)
    ended = serializers.CharField(help_text="kept, reverted, unverified, skipped, failed, or live")
    phase = serializers.CharField()
    reason = serializers.CharField()
    analysed = serializers.BooleanField()
    requestedBy = serializers.CharField()
    anchor = serializers.CharField(allow_null=True, help_text="The run whose grade opened it.")
    spentUsd = MoneyString()
    cost = CycleCostSerializer(help_text="What the cycle cost, to the last decimal, by part.")
    startedAt = Instant()
    proposedAt = Instant()
    appliedAt = Instant()
    mergedAt = Instant()
    completedAt = Instant()
    movedAt = Instant()
    mergeDeadline = Instant()
    window = JSONRecord(help_text="{from, to, runIds, reason, ready, progress, metrics}")
    windowRuns = RunRowSerializer(many=True)
    frozen = JSONRecord(allow_null=True, help_text="The frozen set as stored; null: no pre-merge check.")
    frozenSet = FrozenSlotSerializer(many=True, help_text="The frozen inputs, slot by slot.")
    checkDeadline = Instant()
    judge = JSONRecord()
    rounds = RoundSerializer(many=True)
    watch = WatchSerializer()
    lessons = LessonSerializer(many=True)
    lessonError = serializers.CharField()
    confoundedBy = serializers.JSONField(
        allow_null=True,
        help_text="A lock-group sibling's change that landed inside the watch: {cycle, entity, group, what, pr, at}",
    )
    confoundedByEdit = serializers.JSONField(
        allow_null=True,
        help_text="A commit no cycle shipped that landed on the entity's files: {sha, author, subject, files}",
    )
    remembered = RememberedSerializer(many=True)
    recalledBy = RecalledBySerializer(many=True)
    strength = serializers.CharField(allow_null=True)
    strengthWords = serializers.CharField(
        allow_null=True, help_text='The strength in words: "paired — validated on seen inputs only" (held-out 0 of n).'
    )
    seenOnly = serializers.BooleanField(help_text="The check validated on inputs the proposer was all shown.")
    grade = CycleGradeSerializer(allow_null=True)
    needsYou = NeedsYouSerializer(many=True)
    url = serializers.CharField()


class AnalyzeRequestSerializer(serializers.Serializer):
    target_kind = serializers.CharField(help_text="scenario, heartbeat or role")
    target_id = serializers.CharField(help_text="The entity's slug.")


class AnalyzeAnswerSerializer(serializers.Serializer):
    cycleId = serializers.IntegerField(allow_null=True, help_text="The cycle opened, or the row recording why not.")
    opened = serializers.BooleanField()
    reason = serializers.CharField()
    cardId = serializers.CharField(
        allow_null=True, help_text="An agent's ask: the person's approval card it waits on (null for a person)."
    )


# --- A fast path for the big reads ---------------------------------------------------------------


@functools.cache
def shape(kind: type[serializers.BaseSerializer]) -> serializers.BaseSerializer:
    """One instance of a read shape ``kind`` a process, for ``represent``: its fields (deep copies of the declared
    ones, a nested shape's too) and their plans (``_plan``) built once, not on every answer. A shape holds no
    request's state: ``represent`` reads no context."""
    return kind()


def represent(serializer: serializers.BaseSerializer, instance: Any) -> Any:
    """``serializer.to_representation(instance)`` for the read shapes above (dicts of plain values, nested
    serializers, lists of them), the same answer without DRF's per-field attribute walk: each serializer's
    readable fields are listed once, a dict's key read directly, and a char or integer field's representation
    (``str``, ``int``, as DRF's) taken inline. Anything else — a key the dict lacks, a callable value, a field
    with another source, any other field — goes through the field's own ``get_attribute`` /
    ``to_representation``, so the output is DRF's (``tests/evolution/test_loop_status_represent.py``).
    """
    if isinstance(serializer, serializers.ListSerializer):
        items = instance.all() if isinstance(instance, BaseManager) else instance
        return [represent(serializer.child, item) for item in items]
    return _represent(serializer, instance, timezone.get_current_timezone() if settings.USE_TZ else None)


def _represent(serializer: serializers.BaseSerializer, instance: Any, zone: Any) -> Any:
    """``represent`` with the current time zone read once (``zone``): an instant is rendered as DRF's
    ``DateTimeField`` renders it in ISO 8601 — in that zone, ``Z`` for UTC — without reading the zone again for
    each of the thousand a fleet's answer holds."""
    if isinstance(serializer, serializers.ListSerializer):
        items = instance.all() if isinstance(instance, BaseManager) else instance
        return [_represent(serializer.child, item, zone) for item in items]
    out: dict[str, Any] = {}
    mapping = isinstance(instance, dict)
    for name, field, kind, direct in _plan(serializer):
        if direct and mapping and name in instance and not callable(instance[name]):
            value = instance[name]
        else:
            try:
                value = field.get_attribute(instance)
            except SkipField:
                continue
        if value is None or isinstance(value, PKOnlyObject) and value.pk is None:
            out[name] = None
        elif kind == "char":
            out[name] = str(value)
        elif kind == "int":
            out[name] = int(value)
        elif kind == "nested":
            out[name] = _represent(field, value, zone)
        elif kind == "instant" and zone is not None and isinstance(value, datetime) and value.tzinfo is not None:
            text = value.astimezone(zone).isoformat()
            out[name] = text[:-6] + "Z" if text.endswith("+00:00") else text
        else:
            out[name] = field.to_representation(value)
    return out


def _plan(serializer: serializers.BaseSerializer) -> list[tuple[str, Any, str, bool]]:
    """(name, field, kind, read by its own name) of each readable field of ``serializer``, listed once per
    serializer instance."""
    plan = serializer.__dict__.get("_represent_plan")
    if plan is None:
        plan = []
        for field in serializer._readable_fields:
            if isinstance(field, serializers.BaseSerializer):
                kind = "nested"
            elif type(field) is serializers.CharField:
                kind = "char"
            elif type(field) is serializers.IntegerField:
                kind = "int"
            elif isinstance(field, serializers.DateTimeField) and _iso_instant(field):
                kind = "instant"
            else:
                kind = "field"
            plan.append((field.field_name, field, kind, field.source_attrs == [field.field_name]))
        serializer.__dict__["_represent_plan"] = plan
    return plan


def _iso_instant(field: serializers.DateTimeField) -> bool:
    """Whether ``field`` renders an aware instant as DRF's default does: ISO 8601 in the current time zone (no
    format, zone or representation of its own)."""
    return (
        getattr(field, "format", api_settings.DATETIME_FORMAT) == ISO_8601
        and not hasattr(field, "timezone")
        and type(field).to_representation is serializers.DateTimeField.to_representation
        and type(field).enforce_timezone is serializers.DateTimeField.enforce_timezone
        and type(field).default_timezone is serializers.DateTimeField.default_timezone
    )
