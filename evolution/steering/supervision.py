"""Holds, releases, re-arms and dismissed failures (seed 003 "Supervision — re-arm, hold, release").

Four moves supervise an entity from outside its cycles. Each is a
``Supervision`` row stamped with who made it and why, and an ``ActionLog``
row (op ``hold``, ``release``, ``rearm``, ``dismiss``):

- ``hold`` stops new cycles of an entity, or of every member of a lock group
  declared under ``loop.groups`` (membership read when the loop asks). It
  never stops a revert or a cycle already running: ``opening.refusal`` asks
  ``hold_refusal`` before it opens a cycle, and nothing else reads a hold.
- ``release`` lifts the hold standing on that same target. A hold stands
  while the newest hold/release row of its target is a hold.
- ``rearm`` acknowledges the breaker's pause; the breaker
  (``evolution.autonomy``) reads ``last_rearm`` and nothing else lifts it.
- ``dismiss`` takes a failed cycle off the unread failures
  (``failures_unread``).

A person's move applies at once. An agent may hold at once (loop:hold asks
nobody); its release, re-arm or dismissal hands oversight back, so it waits
on a person's approval card (hitl kind "grant", producer
``loop-supervise``) and is applied by ``on_card`` when a person approves
(DESIGN decision 9). Refusals raise ``Refusal`` with the API's code:
``not_found``, ``precondition`` or ``refused``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from evolution.models import ActionLog, Cycle, Supervision
from evolution.steering import asks
from grading.models import Entity

log = logging.getLogger(__name__)

#: The hitl producer of the approval cards an agent's release, re-arm or dismissal waits on.
PRODUCER = "loop-supervise"
APPROVE, DECLINE = "approve", "decline"
#: What an action-log row names for a group hold: the brain tier, where groups are declared.
MANIFEST = "constitution/MANIFEST.yaml"
#: How long an approval card waits when the entity says nothing (loop.reviewDeadlineHours).
APPROVAL_HOURS = 72

_STANDING = (Supervision.Kind.HOLD, Supervision.Kind.RELEASE)
_VERB = {
    Supervision.Kind.HOLD: "hold",
    Supervision.Kind.RELEASE: "release",
    Supervision.Kind.REARM: "re-arm",
    Supervision.Kind.DISMISS: "dismiss the failure of",
}


class Refusal(Exception):
    """A supervision move refused: ``code`` is not_found, precondition, refused or too_many_pending (an agent's
    cards waiting on people at the cap); the message says why."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Target:
    """What a hold or release stands on: one entity, or a lock group declared in the manifest."""

    entity: Entity | None = None
    group: str = ""

    @property
    def subject(self) -> str:
        """The action log's subject: "<kind>:<id>", or the manifest for a group."""
        return f"{self.entity.target_kind}:{self.entity.slug}" if self.entity is not None else MANIFEST

    @property
    def label(self) -> str:
        """The target in words: "scenario:triage" or "lock group audience"."""
        return str(self.entity) if self.entity is not None else f"lock group {self.group}"

    def rows(self) -> QuerySet[Supervision]:
        """This target's own supervision rows (a group's rows carry no entity)."""
        if self.entity is not None:
            return Supervision.objects.filter(entity=self.entity)
        return Supervision.objects.filter(entity__isnull=True, group=self.group)


# --- Groups -------------------------------------------------------------------------


def declared_groups() -> dict[str, dict[str, Any]]:
    """The lock groups the manifest declares under ``loop.groups``, as the last brain sync resolved them.

    Every entity's resolved terms carry the manifest's groups; the union over
    present entities is read in one query.
    """
    groups: dict[str, dict[str, Any]] = {}
    for declared in Entity.objects.filter(present=True).values_list("terms__loop__groups", flat=True):
        if isinstance(declared, dict):
            for group_id, decl in declared.items():
                groups.setdefault(str(group_id), decl if isinstance(decl, dict) else {})
    return groups


def groups_of(entity: Entity) -> list[str]:
    """The declared groups ``entity`` is in now (``loop.group``; a name the manifest does not declare joins none)."""
    loop = (entity.terms or {}).get("loop") or {}
    declared = loop.get("groups") or {}
    joined = loop.get("group") or []
    if not isinstance(joined, list) or not isinstance(declared, dict):
        return []
    return sorted({str(name) for name in joined if name in declared})


def may_join_groups() -> Q:
    """The entities whose terms can put them in a lock group (``groups_of``): a non-empty ``loop.group`` and
    ``loop.groups`` — for reading only those of a fleet: the column the database keeps from the terms
    (``Entity.loop_grouped``, ``grading.models.LOOP_GROUPED``), no entity's terms unpacked to find them."""
    return Q(loop_grouped=True)


def members(group: str) -> list[Entity]:
    """The present entities in ``group`` now, by target kind and slug."""
    return [entity for entity in Entity.objects.filter(present=True) if group in groups_of(entity)]


def target_of(target: Any) -> Target:
    """Read a hold's target: an Entity, a Target, or {"group": id}.

    Raises Refusal("refused") for a group ``loop.groups`` does not declare, and
    Refusal("not_found") for anything else.
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, Entity):
        return Target(entity=target)
    if isinstance(target, dict) and set(target) <= {"group", "kind"} and target.get("group"):
        group = str(target["group"])
        declared = declared_groups()
        if group not in declared:
            named = ", ".join(sorted(declared)) or "none"
            raise Refusal(
                "refused", f"lock group {group!r} is not declared under loop.groups in {MANIFEST} (declared: {named})"
            )
        return Target(group=group)
    raise Refusal("not_found", f"{target!r} names no entity and no lock group")


# --- Reads --------------------------------------------------------------------------


def _newest_standing(rows: QuerySet[Supervision]) -> Supervision | None:
    return rows.filter(kind__in=_STANDING).order_by("-created_at", "-id").first()


def standing_hold(target: Any) -> Supervision | None:
    """The hold row standing on ``target`` itself (not through a group), or None."""
    newest = _newest_standing(target_of(target).rows())
    return newest if newest is not None and newest.kind == Supervision.Kind.HOLD else None


def _sentence(row: Supervision, group: str = "") -> str:
    where = f" (lock group {group})" if group else ""
    return f"held by {row.actor}{where}: {row.reason}"


#: The hold standing on each of some entities (``{ids}``: ``cycles.among``): its newest hold-or-release row is a hold.
OWN_HOLDS = """
SELECT s.entity_id, s.actor, s.reason FROM evolution_supervision s
WHERE s.entity_id {ids} AND s.kind = %s AND s.id = (
    SELECT u.id FROM evolution_supervision u WHERE u.entity_id = s.entity_id AND u.kind IN (%s, %s)
    ORDER BY u.created_at DESC, u.id DESC LIMIT 1
)
"""
#: The same of some lock groups (rows naming no entity; ``{groups}``: ``cycles.among``).
GROUP_HOLDS = """
SELECT s."group", s.actor, s.reason FROM evolution_supervision s
WHERE s.entity_id IS NULL AND s."group" {groups} AND s.kind = %s AND s.id = (
    SELECT u.id FROM evolution_supervision u WHERE u.entity_id IS NULL AND u."group" = s."group" AND u.kind IN (%s, %s)
    ORDER BY u.created_at DESC, u.id DESC LIMIT 1
)
"""


def holds_many(entities: Iterable[Entity]) -> dict[int, str]:
    """{entity id: "held by <actor>: <reason>"} for each of ``entities`` a hold stands on, in at most two queries.

    An entity's own hold comes first; else the first held group it is in
    ("held by <actor> (lock group <id>): <reason>"). Membership is read from
    the entities' terms as given (the last sync's). Both statements are written out (``OWN_HOLDS``,
    ``GROUP_HOLDS``): the trigger asks them every batch of landings.
    """
    from django.db import connection

    from evolution.core.cycles import among

    entities = list(entities)
    if not entities:
        return {}
    kinds = [Supervision.Kind.HOLD.value, Supervision.Kind.HOLD.value, Supervision.Kind.RELEASE.value]
    ids, params = among(sorted({e.pk for e in entities}))
    with connection.cursor() as cursor:
        cursor.execute(OWN_HOLDS.format(ids=ids), [*params, *kinds])
        own = {pk: Supervision(actor=actor, reason=reason) for pk, actor, reason in cursor.fetchall()}
    joined = {e.pk: groups_of(e) for e in entities if e.pk not in own}
    wanted = sorted({g for groups in joined.values() for g in groups})
    held_groups: dict[str, Supervision] = {}
    if wanted:
        names, params = among(wanted)
        with connection.cursor() as cursor:
            cursor.execute(GROUP_HOLDS.format(groups=names), [*params, *kinds])
            held_groups = {group: Supervision(actor=actor, reason=reason) for group, actor, reason in cursor.fetchall()}
    answer = {pk: _sentence(row) for pk, row in own.items()}
    for pk, groups in joined.items():
        group = next((g for g in groups if g in held_groups), None)
        if group is not None:
            answer[pk] = _sentence(held_groups[group], group)
    return answer


def holds_in(scope: QuerySet[Entity]) -> dict[int, str]:
    """``holds_many`` for every entity of ``scope`` (a queryset, read as a subquery), never reading them all.

    The entities' own holds and the groups' in one statement; only when a group's hold stands are the
    entities whose terms name a group (``loop.group``) read, for their membership.
    """
    from singularity import written

    def statement() -> QuerySet[Any]:
        newest_of_entity = (
            Supervision.objects.filter(entity_id=OuterRef("entity_id"), kind__in=_STANDING)
            .order_by("-created_at", "-id")
            .values("pk")[:1]
        )
        newest_of_group = (
            Supervision.objects.filter(entity__isnull=True, group=OuterRef("group"), kind__in=_STANDING)
            .order_by("-created_at", "-id")
            .values("pk")[:1]
        )
        standing = Supervision.objects.filter(kind=Supervision.Kind.HOLD).filter(
            Q(entity__in=scope.values("pk"), pk=Subquery(newest_of_entity))
            | Q(entity__isnull=True, pk=Subquery(newest_of_group))
        )
        return standing.values_list("entity_id", "group", "actor", "reason")

    # What ``_sentence`` reads of a hold (its actor and reason), the statement compiled once a process.
    own: dict[int, Supervision] = {}
    held_groups: dict[str, Supervision] = {}
    for entity_id, group, actor, reason in written.rows_compiled_once(("holds_in", written.key_of(scope)), statement):
        row = Supervision(entity_id=entity_id, group=group, actor=actor, reason=reason)
        if entity_id is not None:
            own[entity_id] = row
        else:
            held_groups[group] = row
    answer = {pk: _sentence(row) for pk, row in own.items()}
    if held_groups:
        members = scope.filter(may_join_groups()).exclude(pk__in=list(own)).only("pk", "terms")
        for entity in members:
            group = next((g for g in groups_of(entity) if g in held_groups), None)
            if group is not None:
                answer[entity.pk] = _sentence(held_groups[group], group)
    return answer


def hold_refusal(entity: Entity) -> str | None:
    """The sentence when a hold stands on the entity (or a lock group it is in), else None."""
    return holds_many([entity]).get(entity.pk)


def last_rearm(entity: Entity) -> datetime | None:
    """When the entity was last re-armed (the breaker's pause lifts only for settles before it), or None."""
    row = (
        Supervision.objects.filter(entity=entity, kind=Supervision.Kind.REARM)
        .order_by("-created_at", "-id")
        .only("created_at")
        .first()
    )
    return row.created_at if row is not None else None


def failures_unread(entity: Entity | None = None) -> QuerySet[Cycle]:
    """Failed cycles nobody dismissed (of ``entity``, or of the fleet), newest first."""
    dismissed = Supervision.objects.filter(kind=Supervision.Kind.DISMISS, cycle=OuterRef("pk"))
    failed = Cycle.objects.filter(status=Cycle.Status.FAILED)
    if entity is not None:
        failed = failed.filter(entity=entity)
    return failed.exclude(Exists(dismissed)).order_by("-completed_at", "-id")


def _rows(entity: Entity | None = None, *, group: str = "") -> QuerySet[Supervision]:
    rows = Supervision.objects.select_related("entity", "cycle")
    if entity is not None:
        rows = rows.filter(Q(entity=entity) | Q(entity__isnull=True, group__in=groups_of(entity)))
    elif group:
        rows = rows.filter(entity__isnull=True, group=group)
    return rows.order_by("-created_at", "-id")


def rows_for(entity: Entity | None = None, *, group: str = "", limit: int = 50) -> list[Supervision]:
    """Supervision rows, newest first: the entity's own and its groups', one group's, or the fleet's."""
    return list(_rows(entity, group=group)[:limit])


def row_record(row: Supervision) -> dict[str, Any]:
    """A supervision row as the API and the pages show it (camelCase, the seed's names)."""
    entity = row.entity
    return {
        "id": row.pk,
        "kind": row.kind,
        "targetKind": entity.target_kind if entity is not None else None,
        "targetId": entity.slug if entity is not None else None,
        "group": row.group or None,
        "cycleId": row.cycle_id,
        "actor": row.actor,
        "reason": row.reason,
        "at": row.created_at,
    }


def overview(
    entity: Entity | None = None, *, group: str = "", limit: int = 50, cursor: str | None = None
) -> dict[str, Any]:
    """What supervises ``entity`` (or a group, or the fleet): the standing hold, the last re-arm, rows, failures.

    ``held`` is the hold sentence (None when nothing holds it); ``groups`` the
    declared groups the entity is in, each with whether a hold stands on it.
    ``rows`` come ``limit`` at a time, newest first, as every list pages
    (``apikit.pagination.page_of``): ``nextCursor`` asks for the next page,
    None on the last; ``cursor`` is a previous answer's (BadParameter naming
    it otherwise). The unread failures are the newest ``limit``, on every page.
    """
    from singularity.apikit.pagination import page_of

    failures = failures_unread(entity) if (entity is not None or not group) else Cycle.objects.none()
    rows, after = page_of(_rows(entity, group=group), cursor, limit)
    answer: dict[str, Any] = {
        "held": None,
        "lastRearm": None,
        "groups": [],
        "rows": [row_record(row) for row in rows],
        "nextCursor": after,
        "unreadFailures": [
            {"cycleId": c.pk, "targetKind": c.entity.target_kind, "targetId": c.entity.slug, "reason": c.reason,
             "at": c.completed_at}
            for c in failures.select_related("entity")[:limit]
        ],
    }  # fmt: skip
    if entity is not None:
        answer["held"] = hold_refusal(entity)
        answer["lastRearm"] = last_rearm(entity)
        answer["groups"] = [{"group": g, "held": standing_hold({"group": g}) is not None} for g in groups_of(entity)]
    elif group:
        row = standing_hold({"group": group})
        answer["held"] = _sentence(row, group) if row is not None else None
    return answer


# --- Writes -------------------------------------------------------------------------


def _write(kind: str, target: Target, *, actor: str, reason: str, cycle: Cycle | None = None) -> Supervision:
    """One supervision row and its action-log row, in one transaction."""
    now = timezone.now()
    with transaction.atomic():
        row = Supervision.objects.create(
            kind=kind,
            entity=target.entity,
            group=target.group,
            cycle=cycle,
            actor=actor,
            reason=reason,
            created_at=now,
        )
        what = f"cycle {cycle.pk} of {target.label}" if cycle is not None else target.label
        summary = f"{_VERB[kind]} {what}" + (f": {reason}" if reason else "")
        ActionLog.objects.create(
            actor=actor, op=kind, subject=target.subject, entity=target.entity, summary=summary, created_at=now
        )
    log.info("loop: %s by %s", summary, actor)
    return row


def _actor(actor: str) -> str:
    actor = (actor or "").strip()
    if not actor:
        raise Refusal("refused", "a supervision move needs the actor who makes it")
    return actor


def hold(target: Any, *, actor: str, reason: str) -> Supervision:
    """Hold the loop for an entity or a declared lock group: no new cycle opens until a release.

    Raises Refusal: precondition without a reason, refused for an undeclared group.
    """
    where = target_of(target)
    reason = (reason or "").strip()
    if not reason:
        raise Refusal("precondition", f"a hold needs a reason: say why the loop should stop for {where.label}")
    return _write(Supervision.Kind.HOLD, where, actor=_actor(actor), reason=reason)


def _check_release(where: Target) -> None:
    """Raise Refusal("precondition") when no hold stands on ``where`` itself."""
    newest = _newest_standing(where.rows())
    if newest is not None and newest.kind == Supervision.Kind.HOLD:
        return
    detail = f"nothing to release: no hold stands on {where.label}"
    if where.entity is not None:
        through = holds_many([where.entity]).get(where.entity.pk)
        if through:
            detail += f" itself ({through}: release the group)"
    raise Refusal("precondition", detail)


def release(target: Any, *, actor: str, reason: str) -> Supervision:
    """Lift the hold standing on an entity or a declared lock group.

    Raises Refusal("precondition") when nothing is held there.
    """
    where = target_of(target)
    _check_release(where)
    return _write(Supervision.Kind.RELEASE, where, actor=_actor(actor), reason=(reason or "").strip())


def _entity(entity: Any) -> Entity:
    if not isinstance(entity, Entity):
        raise Refusal("not_found", f"{entity!r} names no entity")
    return entity


def rearm(entity: Entity, *, actor: str, reason: str) -> Supervision:
    """Re-arm ``entity``: the breaker's pause lifts for every settle before this row (see autonomy)."""
    return _write(
        Supervision.Kind.REARM, Target(entity=_entity(entity)), actor=_actor(actor), reason=(reason or "").strip()
    )


def _check_dismiss(cycle: Cycle) -> None:
    """Raise Refusal("precondition") unless ``cycle`` failed and nobody dismissed it yet."""
    if cycle.status != Cycle.Status.FAILED:
        where = cycle.status or f"is live ({cycle.phase})"
        raise Refusal("precondition", f"nothing to dismiss: cycle {cycle.pk} did not fail ({where})")
    done = Supervision.objects.filter(kind=Supervision.Kind.DISMISS, cycle=cycle).order_by("created_at").first()
    if done is not None:
        raise Refusal("precondition", f"nothing to dismiss: {done.actor} dismissed cycle {cycle.pk}'s failure already")


def dismiss(cycle: Cycle, *, actor: str, reason: str) -> Supervision:
    """Take a failed cycle off the unread failures.

    Raises Refusal("precondition") when the cycle did not fail or was dismissed already.
    """
    if not isinstance(cycle, Cycle):
        raise Refusal("not_found", f"{cycle!r} names no cycle")
    _check_dismiss(cycle)
    return _write(
        Supervision.Kind.DISMISS,
        Target(entity=cycle.entity),
        actor=_actor(actor),
        reason=(reason or "").strip(),
        cycle=cycle,
    )


# --- Agents: a person approves what hands oversight back ----------------------------


@dataclass(frozen=True)
class Asked:
    """What a supervision move came to: the row written, or the approval card it waits on."""

    row: Supervision | None = None
    card: Any = None

    @property
    def applied(self) -> bool:
        return self.row is not None


def _deadline(target: Target, now: datetime) -> datetime:
    loop = ((target.entity.terms or {}).get("loop") or {}) if target.entity is not None else {}
    return now + timedelta(hours=float(loop.get("reviewDeadlineHours") or APPROVAL_HOURS))


def _approval_text(op: str, what: str, actor: str, reason: str) -> str:
    hands_back = {
        Supervision.Kind.RELEASE: "New cycles open again once released.",
        Supervision.Kind.REARM: "The breaker's pause lifts: the gates go back to what the entity's autonomy says.",
        Supervision.Kind.DISMISS: "The failure leaves the unread failures.",
    }[op]
    said = reason or "(no reason given)"
    return f"{actor} asks to {_VERB[op]} {what}.\n\nWhy: {said}\n\n{hands_back} Approve applies it; Decline leaves it."


def ask(op: str, target: Any, *, actor: str, reason: str, cycle: Cycle | None = None) -> Any:
    """Open the approval card an agent's release, re-arm or dismissal waits on (one per request); return it.

    The move's preconditions are checked first, so a card never asks for
    something that could not be applied now.
    """
    from evolution.core import links as status
    from hitl.actions import open_card
    from hitl.models import Card

    if op not in (Supervision.Kind.RELEASE, Supervision.Kind.REARM, Supervision.Kind.DISMISS):
        raise Refusal("refused", f"{op!r} needs no approval card")
    actor = _actor(actor)
    too_many = asks.over_cap(actor)  # the agent's cap of cards waiting on people (issue 27)
    if too_many:
        raise Refusal(asks.TOO_MANY, too_many)
    reason = (reason or "").strip()
    if op == Supervision.Kind.DISMISS:
        if not isinstance(cycle, Cycle):
            raise Refusal("not_found", f"{cycle!r} names no cycle")
        _check_dismiss(cycle)
        where = Target(entity=cycle.entity)
        what, url = f"cycle {cycle.pk} of {where.label}", status.absolute(status.cycle_path(cycle.pk))
    else:
        where = target_of(target) if op == Supervision.Kind.RELEASE else Target(entity=_entity(target))
        if op == Supervision.Kind.RELEASE:
            _check_release(where)
        what = where.label
        url = status.absolute(where.entity.get_absolute_url()) if where.entity is not None else ""
    now = timezone.now()
    return open_card(
        producer=PRODUCER,
        kind=Card.Kind.GRANT,
        key=f"{PRODUCER}:{op}:{uuid.uuid4().hex}",
        title=f"Approve: {_VERB[op]} {what}"[:200],
        subject=what[:200],
        subject_url=url,
        text=_approval_text(op, what, actor, reason),
        expires_at=_deadline(where, now),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={
            "op": op,
            "entity": where.entity.pk if where.entity is not None else None,
            "group": where.group,
            "cycle": cycle.pk if cycle is not None else None,
            "actor": actor,
            asks.ASKER: actor,
            "reason": reason,
        },
    )


def move(op: str, target: Any, *, actor: str, reason: str, agent: bool, cycle: Cycle | None = None) -> Asked:
    """Make a supervision move as a person (applied) or an agent (a hold applied, anything else asked for).

    The one door the API, the pages and the admin use. Raises Refusal.
    """
    if op == Supervision.Kind.HOLD:
        return Asked(row=hold(target, actor=actor, reason=reason))
    if agent:
        return Asked(card=ask(op, target, actor=actor, reason=reason, cycle=cycle))
    if op == Supervision.Kind.RELEASE:
        return Asked(row=release(target, actor=actor, reason=reason))
    if op == Supervision.Kind.REARM:
        return Asked(row=rearm(target, actor=actor, reason=reason))
    if op == Supervision.Kind.DISMISS:
        return Asked(row=dismiss(cycle, actor=actor, reason=reason))
    raise Refusal("refused", f"{op!r} is not a supervision move (hold, release, rearm, dismiss)")


def on_card(card: Any) -> None:
    """Hear a closed approval card (producer ``loop-supervise``): apply the move when a person approved it.

    A declined, cancelled or expired card applies nothing. A move that can no
    longer be applied (the hold was released meanwhile) is said in a notice.
    """
    from hitl.actions import post_notice
    from hitl.models import Card

    payload = card.payload or {}
    choice = (card.answer or {}).get("choice") if isinstance(card.answer, dict) else None
    if card.status != Card.Status.ANSWERED or choice != APPROVE:
        log.info("loop: %s (%s) not approved: %s", card.title, card.pk, card.status)
        return
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    actor = f"{payload.get('actor', '?')} (approved by {person})"[:200]
    op, reason = payload.get("op"), payload.get("reason", "")
    try:
        if op == Supervision.Kind.DISMISS:
            cycle = Cycle.objects.select_related("entity").filter(pk=payload.get("cycle")).first()
            dismiss(cycle, actor=actor, reason=reason)
        else:
            entity = Entity.objects.filter(pk=payload.get("entity")).first() if payload.get("entity") else None
            target: Any = entity if entity is not None else {"group": payload.get("group")}
            if payload.get("entity") and entity is None:
                raise Refusal("not_found", f"entity {payload.get('entity')} is gone")
            if op == Supervision.Kind.RELEASE:
                release(target, actor=actor, reason=reason)
            elif op == Supervision.Kind.REARM:
                rearm(entity, actor=actor, reason=reason)
            else:
                raise Refusal("refused", f"card {card.pk} asks for {op!r}, which is not a supervision move")
    except Refusal as refused:
        log.warning("loop: approved %s not applied: %s", card.title, refused.detail)
        post_notice(
            producer=PRODUCER,
            kind="not_applied",
            title=f"Not applied: {card.title}"[:200],
            text=f"{person} approved it, but it could not be applied: {refused.detail}",
            url=card.subject_url,
            subject=card.subject,
        )
