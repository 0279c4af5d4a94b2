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

from django.db import connection
from django.db.models import F, OuterRef, Prefetch, Q, QuerySet, Subquery
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


def _settles(entity_ids: list[int]) -> dict[int, list[Cycle]]:
    """Each entity's shipped settles after its last re-arm, newest first, with their rounds prefetched: every one
    of them (``streak``, ``announce_if_crossed``); the fleet's breaker reads only those it can still read
    (``_bounded``). One statement whatever the number of entities (the re-arm is a correlated subquery)."""
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
    # What the breaker and the verdict's strength read, no more: a cycle's brief, window and terms stay unread.
    rounds = Prefetch("rounds", queryset=Round.objects.only(*BREAKER_ROUND_FIELDS))
    cycles = cycles.only(*BREAKER_CYCLE_FIELDS).prefetch_related(rounds)
    by_entity: dict[int, list[Cycle]] = {}
    for cycle in cycles.order_by("-completed_at", "-id"):
        by_entity.setdefault(cycle.entity_id, []).append(cycle)
    return by_entity


def _shipped_unattended(cycle: Cycle) -> bool:
    known = getattr(cycle, "autonomous", None)  # read with the settle by ``_bounded``
    if known is not None:
        return bool(known)
    return any(r.merge_sha and r.merge_gate == AUTO for r in cycle.rounds.all())


def _confounded(cycle: Any) -> bool:
    """Whether another change landed inside ``cycle``'s watch (a sibling's, or an edit no cycle shipped)."""
    return bool(getattr(cycle, "confounded_by", None) or getattr(cycle, "confounded_by_edit", None))


def _pause_of(entity: Entity, settles: list[Cycle]) -> str | None:
    """Why ``settles`` (newest first, after the last re-arm) pause the entity, or None."""
    return _pause_under(policy(entity), settles)


def _pause_under(terms: dict[str, Any], settles: list[Cycle]) -> str | None:
    """Why ``settles`` pause an entity whose ``loop.autonomy`` block is ``terms``, or None."""
    from evolution.core.outcomes import strength

    ceiling = terms.get("maxConsecutiveRegressions", 2)
    if terms.get("onUnmeasured", "pause") != "continue":
        for cycle in settles:
            if not _shipped_unattended(cycle):
                continue
            if _confounded(cycle):  # R19.12: blind whatever its check or comparator read
                return f"cycle {cycle.pk} shipped unattended and another change confounded its watch (counted as blind)"
            if strength(cycle) == "blind":
                return f"cycle {cycle.pk} shipped unattended and nothing measured it"
    if ceiling is None:
        return None
    regressed: list[int] = []
    for cycle in settles:
        if cycle.status == Cycle.Status.VALIDATED or getattr(cycle, "after_validated", True) is False:
            break  # ``_bounded``: a settle at or before the newest validated one ends the streak as that one would
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
    return _answers(entities, _bounded(ids))


def settles_in(scope: QuerySet[Entity]) -> dict[int, list[Any]]:
    """The settles the breaker reads of every entity of ``scope`` (a queryset, read as a subquery): one
    statement (two when a change shipped through an autonomous merge), each settle with its entity's
    ``loop.autonomy`` block; only the entities that are keys can be paused (``pauses_of`` answers for them)."""
    return _bounded(scope, with_policy=True)


@dataclass
class _Settle:
    """A settle as the bounded read hands it to ``_pause_under``: its id and what the streak reads; a change
    shipped through an autonomous merge is the whole ``Cycle`` instead (the unmeasured rule reads its rounds)."""

    pk: int
    entity_id: int
    status: str
    reverted_by_policy: bool
    #: Whether the settle closed after its entity's newest validated one (the streak stops at the first not).
    after_validated: bool
    autonomous: bool = False
    policy_block: Any = None


def _bounded_sql(scope_sql: str, with_policy: bool) -> str:
    """The bounded read in one statement: the cycles shipped through an autonomous merge, read once (``auto``);
    the candidate settles of the scope's entities (``cand``): the regressed ones, and apart the others shipped
    through an autonomous merge (two index reads, ``cycle_shipped`` and ``round_autonomous``, where one ``OR`` of
    the two scanned the cycles); then, once for each entity with one, its last re-arm and newest validated settle
    (the correlated subqueries the ORM would repeat in the WHERE and the SELECT of every row: the newest validated
    is the first entry of ``cycle_shipped`` for it); then the candidates after the re-arm that the breaker can
    read, newest first. ``scope_sql`` is spelled twice (once for each kind of candidate): ``_bounded_params``."""
    q = connection.ops.quote_name
    cycle, rnd, sup, ent = (q(m._meta.db_table) for m in (Cycle, Round, Supervision, Entity))
    policy = ""
    if with_policy:  # the short column the database keeps from the terms (``Entity.loop_autonomy``)
        policy = f", (SELECT e.loop_autonomy FROM {ent} e WHERE e.id = d.entity_id) AS policy_block"
    shipped = "c.analysed = %s AND c.merged_at IS NOT NULL"
    # Spelled as the condition of ``round_autonomous``, literals and all: SQLite reads a partial index only for a
    # query that repeats its terms (Postgres proves it either way).
    autonomous = f"r.merge_gate = '{AUTO}' AND NOT (r.merge_sha = '')"
    return f"""
WITH auto AS MATERIALIZED (
  SELECT r.cycle_id FROM {rnd} r WHERE {autonomous}
), cand AS MATERIALIZED (
  SELECT c.id, c.entity_id, c.status, c.completed_at, c.reverted_by_policy, c.id IN (SELECT cycle_id FROM auto) AS autonomous
  FROM {cycle} c
  WHERE c.entity_id IN ({scope_sql}) AND c.status = %s AND {shipped}
  UNION ALL
  SELECT c.id, c.entity_id, c.status, c.completed_at, c.reverted_by_policy, TRUE AS autonomous
  FROM {cycle} c
  WHERE c.entity_id IN ({scope_sql}) AND c.status IN (%s, %s) AND {shipped} AND c.id IN (SELECT cycle_id FROM auto)
), per AS MATERIALIZED (
  SELECT d.entity_id,
    (SELECT s.created_at FROM {sup} s WHERE s.entity_id = d.entity_id AND s.kind = %s
     ORDER BY s.created_at DESC LIMIT 1) AS rearmed_at,
    (SELECT v.completed_at FROM {cycle} v WHERE v.entity_id = d.entity_id AND v.status = %s AND v.analysed = %s
     AND v.merged_at IS NOT NULL ORDER BY v.completed_at DESC, v.id DESC LIMIT 1) AS validated_at{policy}
  FROM (SELECT DISTINCT entity_id FROM cand) d
)
SELECT cand.id, cand.entity_id, cand.status, cand.reverted_by_policy, cand.autonomous,
  (per.validated_at IS NULL OR cand.completed_at > per.validated_at) AS after_validated{", per.policy_block" if with_policy else ""}
FROM cand JOIN per ON per.entity_id = cand.entity_id
WHERE (per.rearmed_at IS NULL OR cand.completed_at > per.rearmed_at)
  AND ((cand.status = %s AND (per.validated_at IS NULL OR cand.completed_at > per.validated_at)) OR cand.autonomous)
ORDER BY cand.completed_at DESC, cand.id DESC"""


def _bounded_params(scope_params: tuple[Any, ...]) -> list[Any]:
    """The parameters of ``_bounded_sql``, in the order of its placeholders."""
    regressed, validated = Cycle.Status.REGRESSED, Cycle.Status.VALIDATED
    others = [status for status in SHIPPED if status != regressed]  # shipped, not regressed: a candidate if autonomous
    return [
        *scope_params,
        regressed,
        True,
        *scope_params,
        *others,
        True,
        Supervision.Kind.REARM,
        validated,
        True,
        regressed,
    ]


def _bounded(entity_ids: list[int] | QuerySet[Entity], *, with_policy: bool = False) -> dict[int, list[Any]]:
    """``_settles(entity_ids, bounded=True)`` as the breaker reads it, without a model row a settle: each is a
    ``_Settle`` (the same answer from ``_pause_under``, ``tests/evolution/test_breaker_scale.py``) but for a
    change shipped through an autonomous merge, read whole with its rounds in one more statement (the
    unmeasured rule's strength reads them)."""
    if isinstance(entity_ids, QuerySet):
        scope_sql, scope_params = entity_ids.order_by().values("pk").query.sql_with_params()
    else:
        scope_sql, scope_params = ", ".join(["%s"] * len(entity_ids)), tuple(entity_ids)
    with connection.cursor() as cursor:
        cursor.execute(_bounded_sql(scope_sql, with_policy), _bounded_params(tuple(scope_params)))
        rows = cursor.fetchall()
    decoded: dict[Any, Any] = {}  # each text of a block decoded once: a fleet's entities mostly share one policy
    settles = [
        _Settle(
            row[0],
            row[1],
            row[2],
            bool(row[3]),
            bool(row[5]),
            bool(row[4]),
            _block_once(row[6], decoded) if with_policy else None,
        )
        for row in rows
    ]
    whole = _autonomous_whole([s for s in settles if s.autonomous])
    by_entity: dict[int, list[Any]] = {}
    for settle in settles:
        cycle = whole.get(settle.pk, settle)
        by_entity.setdefault(settle.entity_id, []).append(cycle)
    return by_entity


def _block_once(value: Any, decoded: dict[Any, Any]) -> Any:
    """``_block(value)``, a text decoded once in ``decoded`` (its readers copy a block before they change it:
    ``pauses_of``)."""
    if not isinstance(value, str):
        return _block(value)
    if value not in decoded:
        decoded[value] = _block(value)
    return decoded[value]


def _block(value: Any) -> Any:
    """A ``loop.autonomy`` block as the statement hands it back: JSON text (decoded) or already decoded."""
    if isinstance(value, (str, bytes, bytearray)):
        import json

        return json.loads(value)
    return value


def _autonomous_whole(settles: list[_Settle]) -> dict[int, Cycle]:
    """The settles shipped through an autonomous merge as ``Cycle`` rows with their rounds prefetched (what
    ``strength`` reads), in one statement: their rounds, each with its cycle."""
    if not settles:
        return {}
    known = {s.pk: s for s in settles}
    rounds = (
        Round.objects.filter(cycle_id__in=sorted(known))
        .select_related("cycle")
        .only(*BREAKER_ROUND_FIELDS, *(f"cycle__{name}" for name in BREAKER_CYCLE_FIELDS))
        .order_by("cycle_id", "number")
    )
    whole: dict[int, Cycle] = {}
    theirs: dict[int, list[Round]] = {}
    for rnd in rounds:
        cycle = whole.setdefault(rnd.cycle_id, rnd.cycle)
        rnd.cycle = cycle
        theirs.setdefault(cycle.pk, []).append(rnd)
    for pk, cycle in whole.items():
        cached = Round.objects.filter(cycle=cycle).order_by("number")
        cached._result_cache = theirs[pk]  # type: ignore[attr-defined]
        cached._prefetch_done = True  # type: ignore[attr-defined]
        cycle._prefetched_objects_cache = {"rounds": cached}  # type: ignore[attr-defined]
        cycle.autonomous = True  # type: ignore[attr-defined]
        cycle.after_validated = known[pk].after_validated  # type: ignore[attr-defined]
        cycle.policy_block = known[pk].policy_block  # type: ignore[attr-defined]
    return whole


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


def calibration_doubts(entity: Entity) -> list[str]:
    """Under requireCalibration: for each metric the seed's rule reads calibrated while its chance-corrected
    agreement's interval reaches below 0.4, "<metric>: <why>" (issue 31) — the gates that rule releases rest on it."""
    if not policy(entity).get("requireCalibration"):
        return []
    from grading.calibration import calibration

    return [f"{m.metric_id}: {m.warning}" for m in calibration(entity) if m.warning]


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
