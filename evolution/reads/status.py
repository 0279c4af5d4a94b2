"""What the loop is doing, read from stored facts: the words and pieces the fleet, the history and the story share.

Plain functions the pages and the REST API share (seed 003: "Where the loop
waits for a person", "Reading the history — loop_history", "What a settled
cycle keeps"). Each answers in a fixed number of queries whatever the fleet
or the history hold, and none runs an entity's own code. Instants are
datetimes and money is Decimal here; the API's serializers turn them into ISO
and decimal strings. Verdict strength and the cycle's grade come from
``evolution.core.outcomes`` (derived at read, never stored). The fleet and
loop_status are in ``evolution.reads.fleet``, loop_history in
``evolution.reads.history``, one cycle's story in ``evolution.reads.story``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from django.utils import timezone

from evolution.models import Cycle, Round
from grading.models import Entity
from hitl.models import Card

#: A state code → the words the pages show.
STATES = {
    "off": "off",
    "idle": "idle",
    "window": "waiting on a window",
    "analysing": "analysing",
    "waiting_on_you": "waiting on you",
    "applying": "applying",
    "checking": "checking before the merge",
    "pr_open": "PR open",
    "watching": "watching",
    "reverting": "reverting",
    "paused": "paused",
    "held": "held by its lock group",
}


#: The state a live cycle's phase puts its entity in.
PHASE_STATE = {
    Cycle.Phase.ANALYSING: "analysing",
    Cycle.Phase.DECIDING: "waiting_on_you",
    Cycle.Phase.APPLYING: "applying",
    Cycle.Phase.CHECKING: "checking",
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


class NotFound(LookupError):
    """The entity or cycle a read names does not exist; the message names it."""


def ended(cycle: Cycle) -> str:
    """How ``cycle`` ended ("kept", "reverted", …), or "live" while it has not settled."""
    return ENDED.get(cycle.status, "live") if cycle.status else "live"


def strength_of(cycle: Cycle) -> str | None:
    """The verdict strength of ``cycle`` (paired, measured, blind) or None, derived at read."""
    from evolution.core import outcomes as verdicts

    return verdicts.strength(cycle)


def grade_of(cycle: Cycle) -> dict[str, Any] | None:
    """The cycle's grade as {label, n} (Improvement · n = 12), or None where there is no verdict."""
    from evolution.core import outcomes as verdicts

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
    """The cycle's rounds: the plain rows the fleet read with it (``fleet.live_cycles``: ``rounds_read``), or its
    prefetched ones listed once a cycle, not once a call (a row asks for them four or five times: its newest
    round, its PR round, its waits, each in-flight entry)."""
    read = cycle.__dict__.get("rounds_read")
    if read is not None:
        return list(read)
    cached = getattr(cycle, "_prefetched_objects_cache", None)
    if not cached or "rounds" not in cached:
        return list(cycle.rounds.all())
    listed = cycle.__dict__.get("_rounds_listed")
    if listed is None or listed[0] is not cached["rounds"]:
        listed = cycle.__dict__["_rounds_listed"] = (cached["rounds"], list(cached["rounds"]))
    return list(listed[1])


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


def entity_named(
    target_kind: str | None, target_id: str | None, *, names: tuple[str, str] = ("targetKind", "targetId")
) -> Entity | None:
    """The entity ``target_kind`` + ``target_id`` name, None when both are empty (``names``: how the asker spells
    the two parameters in its refusal).

    Raises ValueError when only one half is given or the kind is no kind, NotFound when they name nothing. A kind
    named one deploy back (workflow, pipeline, chat) is read as the kind it named (R5.21).
    """
    if not target_kind and not target_id:
        return None
    if not target_kind or not target_id:
        missing = names[0] if not target_kind else names[1]
        raise ValueError(f"{missing}: name both {names[0]} and {names[1]}, or neither (the whole fleet)")
    from grading.target_names import target_kind_named

    kind = target_kind_named(target_kind, name=names[0])  # an old name (workflow, pipeline, chat) reads as its kind
    entity = Entity.objects.filter(target_kind=kind, slug=target_id).first()
    if entity is None:
        raise NotFound(f"{kind}:{target_id} names no entity")
    return entity


def needs_you(cycle: Cycle) -> list[dict[str, Any]]:
    """What ``cycle`` waits on a person for, from its stored rows (rounds prefetched with their cards).

    A pending decide or retry card; a PR open under a human merge gate; a
    revert PR being followed (``evolution.needs_you.cycle_items``). Each item
    names the gate, the round, since and until when, the card or the PR, and
    who acts next.
    """
    from evolution.steering.needs_you import cycle_items, public

    return public(cycle_items(cycle, _live_rounds(cycle), timezone.now()))


def paused_reason(entity: Entity) -> str:
    """Why the loop is paused for ``entity`` ("" when it is not): the breaker's pause, or a hold."""
    return paused_reasons([entity]).get(entity.pk, "")


def paused_reasons(entities: list[Entity]) -> dict[int, str]:
    """Why each paused or held entity is (only those are keys), in a fixed number of queries."""
    from evolution.steering import autonomy, supervision

    held = supervision.holds_many(entities) if hasattr(supervision, "holds_many") else {}
    return {**held, **autonomy.paused_many(entities)}
