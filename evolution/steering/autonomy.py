"""Who answers the two gates: autonomy, the circuit breaker, the calibration hold, auto-accept grants (seed 003).

``loop.autonomy`` declares who answers decide (accept a proposal) and merge
(land its PR). Three things hand an auto gate back to a person:

- the breaker: ``maxConsecutiveRegressions`` regressed settles in a row, or
  one change that shipped through an autonomous merge and that nothing
  measured (unless ``onUnmeasured: continue``), pause the entity until a
  re-arm. The streak is derived from the entity's settled cycles after its
  last re-arm — never stored: validated resets it, a human-merged
  unvalidated neither counts nor resets it, a failure or skip never counts;
- ``requireCalibration``: both gates a person's while any judged
  ``human: true`` metric is not calibrated (lifts on its own);
- for merge only, a forge that refuses the arm (the round demotes).

A ``loop:auto_accept`` grant accepts on a person's behalf under a human
decide gate, burning one use; the breaker vetoes it, and it is never looked
up for a chat role.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, F, OuterRef, Prefetch, Q, QuerySet, Subquery, prefetch_related_objects
from django.utils import timezone

from evolution.models import AutoAcceptGrant, Cycle, Round, Supervision
from grading.models import Entity

log = logging.getLogger(__name__)

HUMAN, AUTO = "human", "auto"
SHIPPED = (Cycle.Status.VALIDATED, Cycle.Status.REGRESSED, Cycle.Status.UNVALIDATED)


@dataclass(frozen=True)
class Gates:
    """Who answers each gate now, and why a gate the policy makes auto is a person's (empty when it is not)."""

    decide: str
    merge: str
    note: str = ""
    #: The standing auto-accept grant that will answer the decide gate, when one does.
    grant: AutoAcceptGrant | None = None


def policy(entity: Entity) -> dict[str, Any]:
    """The entity's resolved ``loop.autonomy`` block."""
    return dict(((entity.terms or {}).get("loop") or {}).get("autonomy") or {})


# --- The breaker ----------------------------------------------------------------


#: The fields of a settle the breaker reads (``_pause_of``, ``outcomes.strength``).
BREAKER_CYCLE_FIELDS = (
    "id",
    "entity_id",
    "status",
    "analysed",
    "merged_at",
    "completed_at",
    "reverted_by_policy",
    "watch_verdict",
    "confounded_by",
    "confounded_by_edit",
)
BREAKER_ROUND_FIELDS = ("id", "cycle_id", "number", "merge_sha", "merge_gate", "check_verdict")


def _settles(
    entity_ids: list[int] | QuerySet[Entity], *, bounded: bool = False, with_policy: bool = False
) -> dict[int, list[Cycle]]:
    """Each entity's shipped settles after its last re-arm, newest first, with their rounds prefetched.

    One statement whatever the number of entities (the re-arm is a correlated subquery, not a ``Q`` per
    entity; ``entity_ids`` may be a queryset of entities, read as a subquery). ``bounded`` keeps only the
    settles the breaker can still read: the regressed ones after the entity's newest validated one (the streak
    stops there; each row carries ``validated_at``, which ends the streak as that settle would) and any
    shipped through an autonomous merge (the unmeasured rule reads every one since the re-arm) — what
    ``_pause_of`` answers is the same. The bounded read tells those apart before the correlated subqueries
    run (a regressed settle, or one among the autonomous merges' cycles read once), so they run for those
    settles only, not for every shipped one. ``with_policy`` reads each settle's entity's ``loop.autonomy``
    block in the same statement (``policy_block``, what ``pauses_of`` reads).
    """
    if isinstance(entity_ids, QuerySet):
        entity_ids = entity_ids.values("pk")
    rearm = (
        Supervision.objects.filter(entity_id=OuterRef("entity_id"), kind=Supervision.Kind.REARM)
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    cycles = (
        Cycle.objects.filter(entity_id__in=entity_ids, status__in=SHIPPED, analysed=True)
        .exclude(merged_at=None)
        .alias(rearmed_at=Subquery(rearm))
        .filter(Q(rearmed_at=None) | Q(completed_at__gt=F("rearmed_at")))
    )
    if bounded:
        validated = (
            Cycle.objects.filter(entity_id=OuterRef("entity_id"), status=Cycle.Status.VALIDATED, analysed=True)
            .exclude(merged_at=None)
            .order_by("-completed_at", "-id")
            .values("completed_at")[:1]
        )
        merged_by_auto = Round.objects.filter(merge_gate=AUTO).exclude(merge_sha="")
        autonomous = merged_by_auto.filter(cycle=OuterRef("pk"))
        after = Q(validated_at=None) | Q(completed_at__gt=F("validated_at"))
        candidates = Q(status=Cycle.Status.REGRESSED) | Q(pk__in=merged_by_auto.values("cycle_id"))
        cycles = (
            cycles.filter(candidates)
            .annotate(validated_at=Subquery(validated), autonomous=Exists(autonomous))
            .filter((after & Q(status=Cycle.Status.REGRESSED)) | Q(autonomous=True))
        )
    # What the breaker and the verdict's strength read, no more: a cycle's brief, window and terms stay unread.
    rounds = Prefetch("rounds", queryset=Round.objects.only(*BREAKER_ROUND_FIELDS))
    cycles = cycles.only(*BREAKER_CYCLE_FIELDS)
    if with_policy:
        cycles = cycles.annotate(policy_block=F("entity__terms__loop__autonomy"))
    if not bounded:
        cycles = cycles.prefetch_related(rounds)
    by_entity: dict[int, list[Cycle]] = {}
    read = list(cycles.order_by("-completed_at", "-id"))
    if bounded:
        # Only a change shipped through an autonomous merge has its rounds read (the unmeasured rule).
        prefetch_related_objects([c for c in read if c.autonomous], rounds)
    for cycle in read:
        by_entity.setdefault(cycle.entity_id, []).append(cycle)
    return by_entity


def _shipped_unattended(cycle: Cycle) -> bool:
    known = getattr(cycle, "autonomous", None)  # read with the settle by a bounded read
    if known is not None:
        return bool(known)
    return any(r.merge_sha and r.merge_gate == AUTO for r in cycle.rounds.all())


def _pause_of(entity: Entity, settles: list[Cycle]) -> str | None:
    """Why ``settles`` (newest first, after the last re-arm) pause the entity, or None."""
    return _pause_under(policy(entity), settles)


def _pause_under(terms: dict[str, Any], settles: list[Cycle]) -> str | None:
    """Why ``settles`` pause an entity whose ``loop.autonomy`` block is ``terms``, or None."""
    from evolution.core.outcomes import strength

    ceiling = terms.get("maxConsecutiveRegressions", 2)
    if terms.get("onUnmeasured", "pause") != "continue":
        for cycle in settles:
            if _shipped_unattended(cycle) and strength(cycle) == "blind":
                return f"cycle {cycle.pk} shipped unattended and nothing measured it"
    if ceiling is None:
        return None
    regressed: list[int] = []
    for cycle in settles:
        newest_validated = getattr(cycle, "validated_at", None)  # a bounded read: that settle is not in it
        if cycle.status == Cycle.Status.VALIDATED or (newest_validated and cycle.completed_at <= newest_validated):
            break
        if cycle.status == Cycle.Status.REGRESSED and not cycle.reverted_by_policy:
            regressed.append(cycle.pk)
    if len(regressed) >= int(ceiling):
        named = ", ".join(str(pk) for pk in reversed(regressed))
        return f"{len(regressed)} regressed settles in a row (cycles {named})"
    return None


def paused_many(entities: list[Entity]) -> dict[int, str]:
    """Why each paused entity among ``entities`` is paused (only paused ones are keys); two queries in all."""
    ids = [e.pk for e in entities]
    if not ids:
        return {}
    return _answers(entities, _settles(ids, bounded=True))


def settles_in(scope: QuerySet[Entity]) -> dict[int, list[Cycle]]:
    """The settles the breaker reads of every entity of ``scope`` (a queryset, read as a subquery): one
    statement, each settle with its entity's ``loop.autonomy`` block; only the entities that are keys can be
    paused (``pauses_of`` answers for them)."""
    return _settles(scope, bounded=True, with_policy=True)


def pauses_of(settles: dict[int, list[Cycle]]) -> dict[int, str]:
    """``paused_many`` over settles already read (``settles_in``), keyed by entity id: of the entities with a
    settle, only their ``loop.autonomy`` blocks are read (with the settles by ``settles_in``, else one
    statement), never their whole rows."""
    if not settles:
        return {}
    if all(hasattr(rows[0], "policy_block") for rows in settles.values()):
        blocks = sorted((pk, rows[0].policy_block) for pk, rows in settles.items())  # type: ignore[attr-defined]
    else:
        blocks = list(Entity.objects.filter(pk__in=sorted(settles)).values_list("pk", "terms__loop__autonomy"))
    answers: dict[int, str] = {}
    for pk, block in blocks:
        why = _pause_under(dict(block) if isinstance(block, dict) else {}, settles[pk])
        if why:
            answers[pk] = f"paused by the breaker: {why}; a re-arm hands the gates back"
    return answers


def _answers(entities: list[Entity], settles: dict[int, list[Cycle]]) -> dict[int, str]:
    answers: dict[int, str] = {}
    for entity in entities:
        why = _pause_of(entity, settles.get(entity.pk, []))
        if why:
            answers[entity.pk] = f"paused by the breaker: {why}; a re-arm hands the gates back"
    return answers


def paused(entity: Entity) -> str | None:
    """The sentence when the breaker has paused the entity (both gates a person's until a re-arm), else None."""
    return paused_many([entity]).get(entity.pk)


def streak(entity: Entity) -> int:
    """Regressed settles in a row since the last validated one (and the last re-arm)."""
    count = 0
    for cycle in _settles([entity.pk]).get(entity.pk, []):
        if cycle.status == Cycle.Status.VALIDATED:
            break
        if cycle.status == Cycle.Status.REGRESSED and not cycle.reverted_by_policy:
            count += 1
    return count


def announce_if_crossed(cycle: Cycle) -> bool:
    """At a settle: announce the pause once, when this settle is the one that crossed into it."""
    entity = cycle.entity
    now_paused = paused(entity)
    if not now_paused:
        return False
    before = [c for c in _settles([entity.pk]).get(entity.pk, []) if c.pk != cycle.pk]
    if _pause_of(entity, before):
        return False  # already paused before this settle: nothing further is announced
    from hitl.actions import post_notice

    post_notice(
        producer="loop",
        kind="paused",
        title=f"{entity.name or entity.slug}: the loop is paused",
        text=f"{now_paused}. Both gates are a person's until someone re-arms it (the entity's page or the API).",
        subject=f"{entity.target_kind}:{entity.slug}",
    )
    log.warning("loop: %s: paused at cycle %s: %s", entity, cycle.pk, now_paused)
    return True


# --- Calibration and grants -----------------------------------------------------------


def calibration_hold(entity: Entity) -> str | None:
    """Under requireCalibration: the sentence while a judged human: true metric is not calibrated, else None."""
    if not policy(entity).get("requireCalibration"):
        return None
    from grading.calibration import calibration

    low = [m for m in calibration(entity) if m.status != "ok"]
    if not low:
        return None
    named = ", ".join(f"{m.metric_id} ({m.reason})" if m.reason else m.metric_id for m in low)
    return f"⏸ Autonomy waits on calibration: {named}"


def active_grant(entity: Entity, now: datetime | None = None) -> AutoAcceptGrant | None:
    """The standing loop:auto_accept grant of the entity with a use left (never for a chat role), or None."""
    if entity.kind == Entity.Kind.ROLE:
        return None
    now = now or timezone.now()
    return (
        AutoAcceptGrant.objects.filter(entity=entity, revoked_at=None, expires_at__gt=now, calls__lt=F("max_calls"))
        .order_by("created_at")
        .first()
    )


def burn(grant: AutoAcceptGrant) -> bool:
    """Spend one use of ``grant``; False when a racing round spent the last one first."""
    return bool(AutoAcceptGrant.objects.filter(pk=grant.pk, calls__lt=F("max_calls")).update(calls=F("calls") + 1))


def gates(entity: Entity, *, now: datetime | None = None) -> Gates:
    """Who answers decide and merge for ``entity`` now."""
    terms = policy(entity)
    decide, merge = terms.get("decide", HUMAN), terms.get("merge", HUMAN)
    held = paused(entity) or calibration_hold(entity)
    if held:
        return Gates(decide=HUMAN, merge=HUMAN, note=held)
    grant = active_grant(entity, now) if decide == HUMAN else None
    return Gates(decide=decide, merge=merge, grant=grant)


def revert_gate(entity: Entity) -> str:
    """Who merges a revert: it inherits the policy's merge gate (the breaker never vetoes an undo)."""
    return policy(entity).get("merge", HUMAN)


def unattended(rnd: Round) -> bool:
    """Whether nobody stands behind the round (accepted under decide: auto)."""
    return rnd.acceptance == AUTO
