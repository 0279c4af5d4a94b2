"""What the loop is doing, read from stored facts: the fleet, loop_status, loop_history and one cycle's story.

Plain functions the pages and the REST API share (seed 003: "Where the loop
waits for a person", "Reading the history — loop_history", "What a settled
cycle keeps"). Each answers in a fixed number of queries whatever the fleet
or the history hold, and none runs an entity's own code: the fleet read is
stored facts only. Instants are datetimes and money is Decimal here; the
API's serializers turn them into ISO and decimal strings.

Verdict strength and the cycle's grade come from ``evolution.verdicts``
(derived at read, never stored).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from itertools import zip_longest
from typing import Any

from django.conf import settings
from django.db.models import F, OuterRef, Prefetch, Q, QuerySet, Subquery, Window, prefetch_related_objects
from django.db.models.functions import RowNumber
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from evolution.cycles import cooldown, when
from evolution.models import Cycle, Lesson, Recall, Round
from grading.cards import observed
from grading.metrics import is_bad
from grading.models import Entity, Execution, Grade
from hitl.models import Card

#: A state code → the words the pages show.
STATES = {
    "off": "off",
    "idle": "idle",
    "window": "waiting on a window",
    "analysing": "analysing",
    "waiting_on_you": "waiting on you",
    "applying": "applying",
    "pr_open": "PR open",
    "watching": "watching",
    "reverting": "reverting",
    "paused": "paused",
}
#: The state a live cycle's phase puts its entity in.
PHASE_STATE = {
    Cycle.Phase.ANALYSING: "analysing",
    Cycle.Phase.DECIDING: "waiting_on_you",
    Cycle.Phase.APPLYING: "applying",
    Cycle.Phase.MERGE_WAIT: "pr_open",
    Cycle.Phase.WATCHING: "watching",
    Cycle.Phase.REVERTING: "reverting",
}
#: How a settled cycle ended, as the story and the lesson lines say it ("cycle 3 · r1 · kept · paired").
ENDED = {
    Cycle.Status.VALIDATED: "kept",
    Cycle.Status.REGRESSED: "reverted",
    Cycle.Status.UNVALIDATED: "unverified",
    Cycle.Status.SKIPPED: "skipped",
    Cycle.Status.FAILED: "failed",
}
#: The round statuses whose pull request is still open, merged or closed.
PR_STATE = {Round.Status.APPLIED: "open", Round.Status.MERGED: "merged", Round.Status.CLOSED: "closed"}
CARD_GATES = (Card.Kind.DECIDE, Card.Kind.RETRY)
MAX_LIMIT = 100


class NotFound(LookupError):
    """The entity or cycle a read names does not exist; the message names it."""


# --- Small readers ------------------------------------------------------------


def absolute(path: str) -> str:
    """Return a dashboard path on SINGULARITY_PUBLIC_URL ("" base: the path as given); a full URL unchanged."""
    if not path or "://" in path:
        return path
    return (settings.SINGULARITY_PUBLIC_URL or "").rstrip("/") + path


def cycle_path(cycle_id: int) -> str:
    """The cycle's short address on the dashboard (``/evolution/go/cycle:<id>/``)."""
    return f"/evolution/go/cycle:{cycle_id}/"


def ended(cycle: Cycle) -> str:
    """How ``cycle`` ended ("kept", "reverted", …), or "live" while it has not settled."""
    return ENDED.get(cycle.status, "live") if cycle.status else "live"


def strength_of(cycle: Cycle) -> str | None:
    """The verdict strength of ``cycle`` (paired, measured, blind) or None, derived at read."""
    from evolution import verdicts

    return verdicts.strength(cycle)


def grade_of(cycle: Cycle) -> dict[str, Any] | None:
    """The cycle's grade as {label, n} (Improvement · n = 12), or None where there is no verdict."""
    from evolution import verdicts

    answer = verdicts.grade(cycle)
    if answer is None:
        return None
    label, n = answer
    return {"label": label, "n": n}


def line_of(cycle: Cycle, round_number: int | None) -> str:
    """A cycle and round as the lesson lines name them: "cycle 3 · r1 · kept · paired"."""
    return label(cycle.pk, round_number, ended(cycle), strength_of(cycle) if cycle.status else None)


def label(cycle_id: int, round_number: int | None, how: str, strength: str | None) -> str:
    """Join a lesson line's parts, leaving out the absent ones."""
    parts = (f"cycle {cycle_id}", f"r{round_number}" if round_number else "", how, strength or "")
    return " · ".join(part for part in parts if part)


def _rounds_prefetch() -> Prefetch:
    return Prefetch("rounds", queryset=Round.objects.select_related("card").order_by("number"))


def _live_rounds(cycle: Cycle) -> list[Round]:
    return list(cycle.rounds.all())


def _newest_round(cycle: Cycle) -> Round | None:
    rounds = _live_rounds(cycle)
    return rounds[-1] if rounds else None


def _pr_round(cycle: Cycle) -> Round | None:
    """The round whose pull request speaks for the cycle: the newest with one."""
    with_pr = [r for r in _live_rounds(cycle) if r.pr_number]
    return with_pr[-1] if with_pr else None


def _pr(rnd: Round | None) -> dict[str, Any] | None:
    if rnd is None or not rnd.pr_number:
        return None
    return {
        "number": rnd.pr_number,
        "url": rnd.pr_url or f"/evolution/pulls/{rnd.pr_number}/",
        "status": PR_STATE.get(rnd.status, rnd.status),
    }


def entity_named(target_kind: str | None, target_id: str | None) -> Entity | None:
    """The entity ``target_kind`` + ``target_id`` name, None when both are empty.

    Raises ValueError when only one half is given and NotFound when they name nothing.
    """
    if not target_kind and not target_id:
        return None
    if not target_kind or not target_id:
        missing = "targetKind" if not target_kind else "targetId"
        raise ValueError(f"{missing}: name both targetKind and targetId, or neither (the whole fleet)")
    entity = Entity.objects.filter(target_kind=target_kind, slug=target_id).first()
    if entity is None:
        raise NotFound(f"{target_kind}:{target_id} names no entity")
    return entity


# --- Who is waiting on a person -------------------------------------------------


def needs_you(cycle: Cycle) -> list[dict[str, Any]]:
    """What ``cycle`` waits on a person for, from its stored rows (rounds prefetched with their cards).

    A pending decide or retry card; a PR open under a human merge gate; a
    revert PR being followed (``evolution.needs_you.cycle_items``). Each item
    names the gate, the round, since and until when, the card or the PR, and
    who acts next.
    """
    from evolution.needs_you import cycle_items, public

    return public(cycle_items(cycle, _live_rounds(cycle), timezone.now()))


# --- The fleet and loop_status ------------------------------------------------


def paused_reason(entity: Entity) -> str:
    """Why the loop is paused for ``entity`` ("" when it is not): the breaker's pause, or a hold."""
    return paused_reasons([entity]).get(entity.pk, "")


def paused_reasons(entities: list[Entity]) -> dict[int, str]:
    """Why each paused or held entity is (only those are keys), in a fixed number of queries."""
    from evolution import autonomy, supervision

    held = supervision.holds_many(entities) if hasattr(supervision, "holds_many") else {}
    return {**held, **autonomy.paused_many(entities)}


def _with_last_settle(entities: QuerySet[Entity]) -> QuerySet[Entity]:
    """Annotate each entity with its newest settled analysed cycle (the cooldown's start): id, time, status."""
    last = Cycle.objects.filter(entity=OuterRef("pk"), analysed=True, completed_at__isnull=False).order_by(
        "-completed_at", "-id"
    )
    return entities.annotate(
        last_settle_id=Subquery(last.values("pk")[:1]),
        last_settle_at=Subquery(last.values("completed_at")[:1]),
        last_settle_status=Subquery(last.values("status")[:1]),
    )


def _repair(entity: Entity) -> bool:
    loop = (entity.terms or {}).get("loop") or {}
    return (loop.get("preset") or "repair") == "repair"


def _trigger(entity: Entity) -> dict[str, Any]:
    from evolution.trigger import trigger_terms

    return trigger_terms((entity.terms or {}).get("loop") or {})


def recent_outcomes(entities: Iterable[Entity], *, now: datetime) -> dict[int, list[bool]]:
    """For each repair entity, whether each of its last ``trigger.windowRuns`` graded runs is bad (newest first).

    The trigger's own count over the runs its window would read (observed, no
    loop replays), for every entity in two queries: the ranked grades and
    people's ratings of them.
    """
    from grading.ratings import people_values

    by_id = {e.pk: e for e in entities if _repair(e)}
    if not by_id:
        return {}
    sizes = {pk: int(_trigger(e)["windowRuns"]) for pk, e in by_id.items()}
    grades = observed(
        Grade.objects.filter(entity_id__in=list(by_id), status=Grade.Status.GRADED, execution__loop_launched=False),
        now=now,
    ).annotate(
        rank=Window(
            RowNumber(), partition_by=[F("entity_id")], order_by=[F("graded_at").desc(), F("execution_id").desc()]
        )
    )
    ranked = list(grades.filter(rank__lte=max(sizes.values())).order_by("entity_id", "rank"))
    people = people_values([g.execution_id for g in ranked]) if ranked else {}
    answer: dict[int, list[bool]] = {pk: [] for pk in by_id}
    for grade in ranked:
        entity = by_id[grade.entity_id]
        if len(answer[entity.pk]) >= sizes[entity.pk]:
            continue
        grade.entity = entity
        answer[entity.pk].append(is_bad(grade, entity.terms or {}, people.get(str(grade.execution_id), {})))
    return answer


def _idle(entity: Entity, outcomes: list[bool] | None, now: datetime) -> tuple[str, str]:
    """The state and next sentence of an entity no cycle holds: its rest, or its trigger window's count."""
    if entity.last_settle_at is not None:  # type: ignore[attr-defined]
        loop = (entity.terms or {}).get("loop") or {}
        rest = cooldown(loop, regressed=entity.last_settle_status == Cycle.Status.REGRESSED)  # type: ignore[attr-defined]
        until = entity.last_settle_at + rest  # type: ignore[attr-defined]
        if until > now:
            return "idle", (
                f"Resting until {when(until)} (cooldown after cycle {entity.last_settle_id}); "  # type: ignore[attr-defined]
                "Analyze now still opens one."
            )
    if outcomes is None:
        loop = (entity.terms or {}).get("loop") or {}
        every = (loop.get("trigger") or {}).get("every")
        cadence = f" (every {every})" if every else ""
        return "idle", f"Preset {loop.get('preset')}: a cycle opens on its cadence{cadence}."
    trigger = _trigger(entity)
    need, size = int(trigger["minFailures"]), int(trigger["windowRuns"])
    rule = f"a cycle opens when the newest graded run is bad and {need} of the last {size} are"
    if entity.loop_module_path:
        rule = f"{rule} (unless its loop module's should_open says otherwise)"
    if not outcomes:
        return "idle", f"No graded runs yet; {rule}."
    bad = sum(outcomes)
    meter = f"{bad} of the last {len(outcomes)} graded runs bad"
    return ("window" if bad else "idle"), f"{meter}; {rule}."


def _live_next(cycle: Cycle) -> str:
    """The next sentence for an entity whose live ``cycle`` is at its phase."""
    rnd = _newest_round(cycle)
    number = f"r{rnd.number}" if rnd else "its first round"
    phase = cycle.phase
    if phase == Cycle.Phase.ANALYSING:
        if cycle.window and cycle.window.get("ready") is False:
            return f"Cycle {cycle.pk} waits on its window: {cycle.window.get('reason') or 'not ready yet'}."
        decide = ((cycle.terms or {}).get("loop") or {}).get("autonomy", {}).get("decide", "human")
        after = "it is applied without a card" if decide == "auto" else "a decide card follows"
        return f"Cycle {cycle.pk} is analysing {number}; {after}."
    if phase == Cycle.Phase.DECIDING:
        return f"Cycle {cycle.pk} · {number} waits on a person's answer."
    if phase == Cycle.Phase.APPLYING:
        return f"Cycle {cycle.pk} is applying {number}: a pull request opens next."
    if phase == Cycle.Phase.MERGE_WAIT:
        pr = _pr_round(cycle)
        name = f"PR #{pr.pr_number}" if pr else "The PR"
        by = f" by {when(cycle.merge_deadline)}" if cycle.merge_deadline else ""
        if pr is not None and pr.merge_gate == "auto":
            return f"{name} merges once its checks pass{by}."
        return f"{name} waits for a person to merge it{by}; unmerged, the cycle settles unverified."
    if phase == Cycle.Phase.WATCHING:
        progress = cycle.watch_tally or _progress_words(cycle.watch_window) or "no runs graded yet"
        by = f"; it settles by {when(cycle.watch_deadline)}" if cycle.watch_deadline else ""
        return f"Watching the change of cycle {cycle.pk}: {progress}{by}."
    if phase == Cycle.Phase.REVERTING:
        reverts = [r for r in _live_rounds(cycle) if r.revert_pr_number]
        name = f"revert PR #{reverts[-1].revert_pr_number}" if reverts else "the revert PR"
        by = f" (until {when(reverts[-1].revert_deadline)})" if reverts and reverts[-1].revert_deadline else ""
        return f"Following {name} of cycle {cycle.pk} until it merges or closes{by}; no cycle opens meanwhile."
    return ""


def _progress_words(window: dict[str, Any] | None) -> str:
    """A window's progress as a person reads it ("2 of 5 graded runs"), else its reason, else ""."""
    if not window:
        return ""
    progress = window.get("progress") or {}
    if isinstance(progress, dict) and progress.get("need") is not None:
        unit = progress.get("unit") or "runs"
        return f"{progress.get('have', 0)} of {progress['need']} {unit}"
    return str(window.get("reason") or "")


def _live_dict(cycle: Cycle) -> dict[str, Any]:
    rnd = _newest_round(cycle)
    pr = _pr(_pr_round(cycle))
    watch = None
    if cycle.phase == Cycle.Phase.WATCHING or cycle.watch_window:
        window = cycle.watch_window or {}
        watch = {
            "progress": window.get("progress"),
            "reason": window.get("reason") or "",
            "tally": cycle.watch_tally,
            "deadline": cycle.watch_deadline,
        }
    return {
        "id": cycle.pk,
        "phase": cycle.phase,
        "round": rnd.number if rnd else None,
        "prUrl": pr["url"] if pr else "",
        "pr": pr,
        "origin": cycle.origin,
        "startedAt": cycle.started_at,
        "url": cycle.get_absolute_url(),
        "watch": watch,
    }


def _row(
    entity: Entity,
    live: list[Cycle],
    outcomes: list[bool] | None,
    now: datetime,
    paused: str = "",
    waits: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One entity's loop_status entry (see ``loop_status``); ``waits`` are its needs-you items."""
    needs = [item for cycle in live for item in needs_you(cycle)] if waits is None else waits
    holder = next((c for c in live if c.claim == entity.pk), None)
    primary = holder or (live[-1] if live else None)
    if not entity.loop_enabled:
        state, following = "off", "The loop is off for this entity."
    elif paused:
        state, following = "paused", paused
    elif any(item["gate"] in CARD_GATES for item in needs):
        state = "waiting_on_you"
        following = next(item for item in needs if item["gate"] in CARD_GATES)["next"]
        following = following[0].upper() + following[1:] + "."
    elif primary is not None:
        state, following = PHASE_STATE.get(primary.phase, "analysing"), _live_next(primary)
        if primary.phase == Cycle.Phase.ANALYSING and primary.window.get("ready") is False:
            state = "window"
    else:
        state, following = _idle(entity, outcomes, now)
        window = next((item for item in needs if item["gate"] in WINDOW_GATES), None)
        if window is not None:
            state, following = "window", _window_next(entity, window)
    return {
        "entity": entity,
        "targetKind": entity.target_kind,
        "targetId": entity.slug,
        "name": entity.name or entity.slug,
        "enabled": entity.loop_enabled,
        "state": state,
        "stateLabel": STATES[state],
        "live": _live_dict(primary) if primary is not None else None,
        "inFlight": [_live_dict(c) for c in live],
        "next": following,
        "needsYou": needs,
        "waits": _waits(entity),
    }


#: The needs-you gates a waiting window raises (evolution.needs_you).
WINDOW_GATES = ("window", "stall")


def _window_next(entity: Entity, item: dict[str, Any]) -> str:
    """The "Next cycle" line of an entity whose window waits: "2 of 3 scored series PRs · waiting on you: …"."""
    from evolution.cadence import window_of

    row = window_of(entity)
    counted = f"{row.have} of {row.need} {row.unit or 'runs'}" if row is not None and row.need else ""
    return " · ".join(part for part in (counted, item["clause"]) if part) + "."


def _waits(entity: Entity) -> dict[str, Any] | None:
    """What the entity's trigger window waits on, as last recorded (``next.waits``), or None when it does not wait."""
    from evolution.cadence import waiting, window_of

    row = window_of(entity)
    if not waiting(row):
        return None
    return {
        "progress": {"have": row.have, "need": row.need, "unit": row.unit} if row.need else None,
        "reason": row.reason,
        "awaitingPerson": row.awaiting_person,
        "movedAt": row.moved_at,
        "sampledAt": row.sampled_at,
    }


def _rows(entities: QuerySet[Entity], *, now: datetime) -> list[dict[str, Any]]:
    """loop_status rows for ``entities`` in a fixed number of queries."""
    return _gather(entities, now=now, whole=False)[0]


def _gather(
    entities: QuerySet[Entity], *, now: datetime, whole: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(loop_status rows for ``entities``, the needs-you items) in a fixed number of queries.

    ``whole`` also keeps the items of no listed entity (the fleet's answer).
    """
    from evolution import needs_you as waits_on

    listed = list(_with_last_settle(entities).select_related("waiting_window").order_by("target_kind", "slug"))
    if not listed and not whole:
        return [], []
    live_cycles = (
        Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
        .select_related("entity")
        .order_by("started_at", "id")
        .prefetch_related(_rounds_prefetch())
    )
    if not whole:
        live_cycles = live_cycles.filter(entity__in=entities)
    live: dict[int, list[Cycle]] = {}
    for cycle in live_cycles:
        live.setdefault(cycle.entity_id, []).append(cycle)
    idle = [e for e in listed if e.loop_enabled and e.pk not in live]
    outcomes = recent_outcomes(idle, now=now)
    breaker, held = waits_on.pauses(listed)
    paused = {**held, **breaker}
    every = [c for cycles in live.values() for c in cycles]
    found = waits_on.collect(now, entities=listed, live=every, breaker=breaker, held=held, whole=whole)
    mine: dict[int, list[dict[str, Any]]] = {}
    for item in found:
        if item["_entity"] is not None:
            mine.setdefault(item["_entity"], []).append(item)
    rows = [
        _row(e, live.get(e.pk, []), outcomes.get(e.pk), now, paused.get(e.pk, ""), waits_on.public(mine.get(e.pk, [])))
        for e in listed
    ]
    return rows, waits_on.public(found)


def fleet(*, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every entity in the loop (loop on, present in the brain) with its state, next step and cycles in flight.

    Each row is a loop_status entry plus ``entity`` (the model row, for
    links). A fixed number of queries whatever the fleet's size.
    """
    entities = Entity.objects.filter(loop_enabled=True, present=True)
    return _gather(entities, now=now or timezone.now(), whole=True)[0]


def loop_status(entity: Entity | None = None, *, now: datetime | None = None) -> dict[str, Any]:
    """loop_status: the fleet (``entity`` None) or one entity, in one shape.

    Returns {"entities": [...], "needsYou": n, "needsYouItems": [...]} where
    each entry is {targetKind, targetId, name, enabled, state, stateLabel,
    live, inFlight, next, needsYou[], waits} — ``live`` is the cycle holding
    the entity (else its newest live one): {id, phase, round, prUrl, pr,
    origin, startedAt, url, watch}; ``needsYou`` the entity's waits on a
    person (``evolution.needs_you``: decide, retry, grant, merge, revert,
    rearm, window, stall, failure, config) each with who acts next and where;
    ``waits`` what its trigger window waits on (None when it does not). One
    entity is answered even with its loop off (state "off"). At the top,
    ``needsYouItems`` lists every wait (the fleet's includes those of no
    entity in it, e.g. a grant card naming none) and ``needsYou`` counts them:
    the dashboard's "N need you".
    """
    now = now or timezone.now()
    if entity is None:
        rows, found = _gather(Entity.objects.filter(loop_enabled=True, present=True), now=now, whole=True)
    else:
        rows, found = _gather(Entity.objects.filter(pk=entity.pk), now=now, whole=False)
    return {"entities": rows, "needsYou": len(found), "needsYouItems": found}


def status_for(target_kind: str | None, target_id: str | None, *, now: datetime | None = None) -> dict[str, Any]:
    """loop_status named as the API names it: both halves or neither; ValueError / NotFound otherwise."""
    return loop_status(entity_named(target_kind, target_id), now=now)


# --- loop_history -------------------------------------------------------------


def _limit(limit: Any) -> int:
    """The page size: an integer 1–100; ValueError naming ``limit`` otherwise."""
    try:
        number = int(limit)
    except (TypeError, ValueError):
        raise ValueError(f"limit: {limit!r} is not a whole number (1-{MAX_LIMIT})") from None
    if isinstance(limit, float) and limit != number:
        raise ValueError(f"limit: {limit!r} is not a whole number (1-{MAX_LIMIT})")
    if not 1 <= number <= MAX_LIMIT:
        raise ValueError(f"limit: {number} is outside 1-{MAX_LIMIT}")
    return number


def parse_instant(value: datetime | str, *, name: str = "since") -> datetime:
    """An ISO 8601 instant (or date, read as its midnight UTC); a naive one is UTC. ValueError naming ``name``."""
    if isinstance(value, datetime):
        instant = value
    else:
        text = str(value).strip()
        try:
            instant = parse_datetime(text)  # type: ignore[assignment]
            if instant is None and (day := parse_date(text)) is not None:
                instant = datetime(day.year, day.month, day.day)
        except ValueError:
            instant = None  # type: ignore[assignment]
        if instant is None:
            raise ValueError(f"{name}: {text!r} is not an ISO 8601 instant (e.g. 2026-09-01T00:00:00Z)")
    return instant if timezone.is_aware(instant) else instant.replace(tzinfo=UTC)


def encode_cursor(cycle: Cycle) -> str:
    """The opaque cursor after ``cycle``: base64 of its opening instant and id."""
    raw = f"{cycle.started_at.astimezone(UTC).isoformat()}|{cycle.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The (started_at, id) a cursor stands for; ValueError naming ``cursor`` when it is not one we gave."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode()).decode()
        instant, _, pk = text.rpartition("|")
        started = datetime.fromisoformat(instant)
        return (started if timezone.is_aware(started) else started.replace(tzinfo=UTC)), int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"cursor: {cursor!r} is not a cursor this history gave (pass nextCursor back)") from None


def history_row(cycle: Cycle) -> dict[str, Any]:
    """One loop_history row (rounds and lessons prefetched): the seed's columns."""
    newest = _newest_round(cycle)
    lessons = list(cycle.lessons.all())
    return {
        "id": cycle.pk,
        "targetKind": cycle.entity.target_kind,
        "targetId": cycle.entity.slug,
        "origin": cycle.origin,
        "status": cycle.status or None,
        "phase": cycle.phase,
        "reason": cycle.reason,
        "startedAt": cycle.started_at,
        "proposedAt": cycle.proposed_at,
        "appliedAt": cycle.applied_at,
        "completedAt": cycle.completed_at,
        "movedAt": cycle.moved_at,
        "rounds": len(_live_rounds(cycle)),
        "pr": _pr(_pr_round(cycle)),
        "decidedBy": newest.decided_by if newest else "",
        "strength": strength_of(cycle),
        "grade": grade_of(cycle),
        "lessonId": max((lesson.pk for lesson in lessons), default=None),
        "spentUsd": cycle.spent_usd,
    }


def history(
    target_kind: str | None = None,
    target_id: str | None = None,
    since: datetime | str | None = None,
    limit: Any = 20,
    cursor: str | None = None,
) -> dict[str, Any]:
    """loop_history: {cycles, count, nextCursor}, one row per cycle, newest opening first.

    ``since`` keeps the cycles that moved (opened, advanced, settled) at or
    after it; ``cursor`` is a previous answer's ``nextCursor`` (the next,
    older page; null on the last). Raises ValueError naming the parameter
    (limit outside 1–100, half an entity, a bad instant or cursor) and
    NotFound for an entity that does not exist.
    """
    size = _limit(limit)
    entity = entity_named(target_kind, target_id)
    cycles = Cycle.objects.select_related("entity").order_by("-started_at", "-id")
    if entity is not None:
        cycles = cycles.filter(entity=entity)
    if since not in (None, ""):
        cycles = cycles.filter(moved_at__gte=parse_instant(since))  # type: ignore[arg-type]
    if cursor:
        started, pk = decode_cursor(cursor)
        cycles = cycles.filter(Q(started_at__lt=started) | Q(started_at=started, pk__lt=pk))
    cycles = cycles.prefetch_related(
        _rounds_prefetch(), Prefetch("lessons", queryset=Lesson.objects.only("pk", "cycle"))
    )
    page = list(cycles[: size + 1])
    more = len(page) > size
    page = page[:size]
    return {
        "cycles": [history_row(c) for c in page],
        "count": len(page),
        "nextCursor": encode_cursor(page[-1]) if more else None,
    }


def recent_cycles(entity: Entity, *, limit: int = 20) -> list[dict[str, Any]]:
    """The entity's newest cycles as history rows (the entity page's Cycles section)."""
    cycles = (
        Cycle.objects.filter(entity=entity)
        .select_related("entity")
        .order_by("-started_at", "-id")
        .prefetch_related(_rounds_prefetch(), Prefetch("lessons", queryset=Lesson.objects.only("pk", "cycle")))
    )
    return [history_row(c) for c in cycles[:limit]]


# --- One cycle's story ----------------------------------------------------------


def _uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    found = []
    for value in values:
        try:
            found.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # a custom window may name runs this deployment never stored; the story lists them as ids
    return found


def run_rows(entity: Entity, run_ids: list[str], executions: dict[str, Execution], people: dict) -> list[dict]:
    """The runs a window names, in its order: id, status, grade outcome, bad for the trigger, metrics, url."""
    rows = []
    for run_id in run_ids:
        execution = executions.get(str(run_id))
        grade = getattr(execution, "grade", None) if execution is not None and hasattr(execution, "grade") else None
        bad = None
        if grade is not None and grade.status == Grade.Status.GRADED:
            grade.entity = entity
            bad = is_bad(grade, entity.terms or {}, people.get(str(run_id), {}))
        rows.append(
            {
                "id": str(run_id),
                "status": execution.status if execution else None,
                "gradeStatus": grade.status if grade else None,
                "passed": grade.passed if grade else None,
                "score": grade.score if grade else None,
                "bad": bad,
                "metrics": dict(grade.metrics or {}) if grade else {},
                "failureCategory": grade.failure_category if grade else "",
                "completedAt": execution.completed_at if execution else None,
                "url": execution.get_absolute_url() if execution else "",
            }
        )
    return rows


def _round_dict(rnd: Round) -> dict[str, Any]:
    card = rnd.card
    revert = None
    if rnd.revert_pr_number:
        revert = {
            "number": rnd.revert_pr_number,
            "url": rnd.revert_pr_url or f"/evolution/pulls/{rnd.revert_pr_number}/",
            "openedAt": rnd.revert_opened_at,
            "deadline": rnd.revert_deadline,
            "outcome": rnd.revert_outcome,
            "mergedAt": rnd.revert_merged_at,
            "mergeGate": rnd.revert_merge_gate,
        }
    files = [f for f in (rnd.files or []) if isinstance(f, dict)]
    return {
        "number": rnd.number,
        "parent": rnd.parent.number if rnd.parent_id and rnd.parent else None,
        "status": rnd.status,
        "author": rnd.author,
        "summary": rnd.summary,
        "hypothesis": rnd.hypothesis,
        "refinement": rnd.refinement,
        "files": [str(f.get("path", "")) for f in files],
        "changes": [file_change(f) for f in files],
        "citedLessons": list(rnd.cited_lessons or []),
        "error": rnd.error,
        "costUsd": rnd.cost_usd,
        "createdAt": rnd.created_at,
        "proposedAt": rnd.proposed_at,
        "decidedAt": rnd.decided_at,
        "decidedBy": rnd.decided_by,
        "decisionNote": rnd.decision_note,
        "rejection": rnd.rejection,
        "reviewDeadline": rnd.review_deadline,
        "card": (
            {"id": str(card.pk), "kind": card.kind, "status": card.status, "url": card.get_absolute_url()}
            if card is not None
            else None
        ),
        "mergeGate": rnd.merge_gate,
        "pr": _pr(rnd),
        "branch": rnd.branch,
        "baseSha": rnd.base_sha,
        "headSha": rnd.head_sha,
        "mergeSha": rnd.merge_sha,
        "gate": rnd.gate or {},
        "checkedSha": rnd.checked_sha,
        "checkVerdict": rnd.check_verdict,
        "pairs": pairs(rnd),
        "revert": revert,
    }


def file_change(file: dict[str, Any]) -> dict[str, Any]:
    """One proposed file as the card and the story list it: path, its new line count, or deleted."""
    content = file.get("content")
    if content is None:
        return {"path": str(file.get("path", "")), "lines": None, "deleted": True}
    text = str(content)
    return {"path": str(file.get("path", "")), "lines": len(text.splitlines()), "deleted": False}


def pairs(rnd: Round) -> list[dict[str, Any]]:
    """The round's check pairs input by input: [{baseline, candidate}] (a side the check never ran is null)."""
    return [
        {"baseline": baseline, "candidate": candidate}
        for baseline, candidate in zip_longest(rnd.baseline_run_ids or [], rnd.check_run_ids or [])
    ]


def _lesson_dict(lesson: Lesson) -> dict[str, Any]:
    return {
        "id": lesson.pk,
        "round": lesson.round.number,
        "outcome": lesson.outcome,
        "ended": ENDED.get(lesson.outcome, lesson.outcome),
        "summary": lesson.summary,
        "hypothesis": lesson.hypothesis,
        "rejection": lesson.rejection,
        "note": lesson.note,
        "decidedBy": lesson.round.decided_by,
        "perMetric": lesson.per_metric,
        "reason": lesson.reason,
        "files": lesson.files,
        "helpful": lesson.helpful,
        "harmful": lesson.harmful,
        "createdAt": lesson.created_at,
    }


def _remembered(cycle: Cycle) -> list[dict[str, Any]]:
    """The lessons this cycle's rounds were handed ("It remembered"), each named by the cycle it came from."""
    recalls = (
        Recall.objects.filter(round__cycle=cycle)
        .select_related("lesson__cycle", "lesson__round", "round")
        .prefetch_related(Prefetch("lesson__cycle__rounds", queryset=Round.objects.order_by("number")))
        .order_by("round__number", "lesson_id")
    )
    rows = []
    for recall in recalls:
        lesson = recall.lesson
        how = ENDED.get(lesson.outcome, lesson.outcome)
        strength = strength_of(lesson.cycle)
        rows.append(
            {
                "lessonId": lesson.pk,
                "cycleId": lesson.cycle_id,
                "round": lesson.round.number,
                "ended": how,
                "strength": strength,
                "label": label(lesson.cycle_id, lesson.round.number, how, strength),
                "summary": lesson.summary,
                "rejection": lesson.rejection,
                "note": lesson.note,
                "decidedBy": lesson.round.decided_by,
                "recalledIn": recall.round.number,
            }
        )
    return rows


def _recalled_by(cycle: Cycle) -> list[dict[str, Any]]:
    """The later cycles whose rounds were handed this cycle's lessons."""
    recalls = (
        Recall.objects.filter(lesson__cycle=cycle)
        .exclude(round__cycle=cycle)
        .select_related("round__cycle", "lesson")
        .prefetch_related(Prefetch("round__cycle__rounds", queryset=Round.objects.order_by("number")))
        .order_by("round__cycle__started_at", "round__number")
    )
    return [
        {
            "lessonId": recall.lesson_id,
            "cycleId": recall.round.cycle_id,
            "round": recall.round.number,
            "ended": ended(recall.round.cycle),
            "strength": strength_of(recall.round.cycle) if recall.round.cycle.status else None,
            "label": line_of(recall.round.cycle, recall.round.number),
        }
        for recall in recalls
    ]


def get_cycle(pk: Any) -> Cycle:
    """The cycle ``pk`` names with its entity; NotFound naming it otherwise."""
    cycle = Cycle.objects.select_related("entity", "requested_by", "anchor").filter(pk=pk).first()
    if cycle is None:
        raise NotFound(f"cycle {pk} names no cycle")
    return cycle


def cycle_detail(cycle: Cycle) -> dict[str, Any]:
    """loop_get_cycle: the cycle with every round (decisions, PR, gate, check pairs), its window and runs,
    its watch, the lessons it wrote, what it remembered and who recalled it, its strength and grade.
    """
    from grading.ratings import people_values

    prefetch_related_objects(
        [cycle], Prefetch("rounds", queryset=Round.objects.select_related("card", "parent").order_by("number"))
    )
    rounds = list(cycle.rounds.all())
    window = cycle.window or {}
    watch_window = cycle.watch_window or {}
    window_ids = [str(v) for v in window.get("runIds") or []]
    watch_ids = [str(v) for v in watch_window.get("runIds") or []]
    wanted = _uuids(window_ids + watch_ids)
    executions = {str(e.pk): e for e in Execution.objects.filter(pk__in=wanted).select_related("grade")}
    people = people_values(wanted) if wanted else {}
    lessons = list(cycle.lessons.select_related("round").order_by("id"))
    entity = cycle.entity
    return {
        "id": cycle.pk,
        "targetKind": entity.target_kind,
        "targetId": entity.slug,
        "name": entity.name or entity.slug,
        "origin": cycle.origin,
        "status": cycle.status or None,
        "ended": ended(cycle),
        "phase": cycle.phase,
        "reason": cycle.reason,
        "analysed": cycle.analysed,
        "requestedBy": cycle.requested_by.get_username() if cycle.requested_by else "",
        "anchor": str(cycle.anchor_id) if cycle.anchor_id else None,
        "spentUsd": cycle.spent_usd,
        "startedAt": cycle.started_at,
        "proposedAt": cycle.proposed_at,
        "appliedAt": cycle.applied_at,
        "mergedAt": cycle.merged_at,
        "completedAt": cycle.completed_at,
        "movedAt": cycle.moved_at,
        "mergeDeadline": cycle.merge_deadline,
        "window": window,
        "windowRuns": run_rows(entity, window_ids, executions, people),
        "frozen": cycle.frozen,
        "judge": cycle.judge or {},
        "rounds": [_round_dict(r) for r in rounds],
        "watch": {
            "openedAt": cycle.watch_opened_at,
            "deadline": cycle.watch_deadline,
            "window": cycle.watch_window,
            "tally": cycle.watch_tally,
            "verdict": cycle.watch_verdict,
            "runs": run_rows(entity, watch_ids, executions, people),
        },
        "lessons": [_lesson_dict(lesson) for lesson in lessons],
        "lessonError": cycle.lesson_error,
        "remembered": _remembered(cycle),
        "recalledBy": _recalled_by(cycle),
        "strength": strength_of(cycle),
        "grade": grade_of(cycle),
        "needsYou": needs_you(cycle) if cycle.live else [],
        "url": cycle.get_absolute_url(),
    }
