"""Lock groups: one variable at a time across entities that share an outcome (seed 003, "Lock groups").

- ``held_by``: while a member of a locking group has a change past its Accept
  and not settled (applying, checking, its PR open, watching) or a regressed change whose
  revert is awaited, no other member's cycle opens and none is accepted — the
  refusal names the group, the holder's change and its PR. Under ``preset:
  repair`` a member of a group with ``repair: bypass`` (the default) is not held.
- ``lock_rows``: the Accept's arbiter — the group's row is locked in the
  Accept's transaction, so of two members accepted at once exactly one wins.
- ``sibling_change``: at a member's settle, a change another member shipped or
  had reverted after this cycle's baseline window ended (the watch is
  confounded).
- ``changed_at``: the clean base — the last merge or revert merge of any member
  of the entity's groups, itself included.

A group is declared in the manifest only (``loop.groups``); membership is
``loop.group`` at any tier (``evolution.steering.supervision.groups_of``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils.dateparse import parse_datetime

from evolution.core.outcomes import phase_label
from evolution.models import Cycle, GroupLock, Round
from evolution.steering.supervision import groups_of, may_join_groups
from grading.models import Entity

#: A change is past its Accept and not settled in these phases (reverting: a regressed change whose revert is awaited).
HOLDING = (
    Cycle.Phase.APPLYING,
    Cycle.Phase.CHECKING,
    Cycle.Phase.MERGE_WAIT,
    Cycle.Phase.WATCHING,
    Cycle.Phase.REVERTING,
)

DOING = {
    Cycle.Phase.APPLYING: "is being applied",
    Cycle.Phase.CHECKING: "is in its pre-merge check",
    Cycle.Phase.MERGE_WAIT: "has its PR open",
    Cycle.Phase.WATCHING: "is still watching its merged change",
    Cycle.Phase.REVERTING: "regressed and waits on its revert",
}


def declared(entity: Entity) -> dict[str, dict[str, Any]]:
    """The groups the manifest declares, with their engine terms (lock, repair), as the entity's terms carry them."""
    groups = ((entity.terms or {}).get("loop") or {}).get("groups") or {}
    return groups if isinstance(groups, dict) else {}


def members_of(groups: list[str], *, besides: Entity | None = None) -> dict[str, list[Entity]]:
    """The present entities of each group in ``groups`` (read once), leaving out ``besides``."""
    found: dict[str, list[Entity]] = {group: [] for group in groups}
    if not groups:
        return found
    for entity in Entity.objects.filter(may_join_groups(), present=True):
        if besides is not None and entity.pk == besides.pk:
            continue
        for group in groups_of(entity):
            if group in found:
                found[group].append(entity)
    return found


def _preset(entity: Entity) -> str:
    return str(((entity.terms or {}).get("loop") or {}).get("preset") or "repair")


def locking(entity: Entity) -> list[str]:
    """The entity's groups that hold it while a sibling's change is live (lock true; repair: bypass lets repair pass)."""
    terms = declared(entity)
    held = []
    for group in groups_of(entity):
        decl = terms.get(group) or {}
        if decl.get("lock", True) is False:
            continue
        if _preset(entity) == "repair" and (decl.get("repair") or "bypass") == "bypass":
            continue
        held.append(group)
    return held


@dataclass(frozen=True)
class Holder:
    group: str
    cycle: Cycle

    def _where(self) -> str:
        """The holder's PR as people name it: "PR #7", "revert PR #3", or "" when it has none yet."""
        if self.cycle.phase == Cycle.Phase.REVERTING:
            revert = self.cycle.rounds.exclude(revert_pr_number=None).order_by("-number").first()
            return f"revert PR #{revert.revert_pr_number}" if revert is not None else ""
        # The number, never the forge's address: this sentence is read on the dashboard's pages, where a
        # local forge's PR URL is the public address (a different host than the one the person is on).
        rnd = self.cycle.rounds.exclude(pr_number=None).order_by("-number").first()
        return f"PR #{rnd.pr_number}" if rnd is not None else ""

    def sentence(self) -> str:
        """Why a member's cycle does not open: "lock group audience is held: a change to … (PR #7) (cycle 4)"."""
        entity = self.cycle.entity
        where = self._where()
        doing = DOING.get(self.cycle.phase, phase_label(self.cycle.phase).lower())
        return (
            f"lock group {self.group} is held: a change to {entity.kind} {entity.slug} {doing}"
            f"{f' ({where})' if where else ''} (cycle {self.cycle.pk})"
        )

    def by_words(self) -> str:
        """What set an Accept aside: "lock group support is held by a change to workflow triage that regressed
        and waits on its revert (revert PR #3, cycle 5)"."""
        entity = self.cycle.entity
        where = self._where()
        doing = DOING.get(self.cycle.phase, phase_label(self.cycle.phase).lower())
        return (
            f"lock group {self.group} is held by a change to {entity.kind} {entity.slug} that {doing} "
            f"({f'{where}, ' if where else ''}cycle {self.cycle.pk})"
        )


def held_by(entity: Entity, *, besides: Cycle | None = None) -> Holder | None:
    """The sibling's change holding one of the entity's locking groups, or None when every group is free."""
    groups = locking(entity)
    if not groups:
        return None
    siblings = members_of(groups, besides=entity)
    ids = {member.pk: group for group in groups for member in siblings[group]}
    if not ids:
        return None
    live = Cycle.objects.filter(entity_id__in=list(ids), phase__in=HOLDING, status__in=["", Cycle.Status.REGRESSED])
    if besides is not None:
        live = live.exclude(pk=besides.pk)
    holder = live.select_related("entity").order_by("moved_at", "pk").first()
    return Holder(ids[holder.entity_id], holder) if holder is not None else None


def refusal(entity: Entity) -> str | None:
    """The sentence when a sibling's live change holds one of the entity's lock groups, else None."""
    holder = held_by(entity)
    return holder.sentence() if holder is not None else None


def holders_many(entities: list[Entity]) -> dict[int, str]:
    """The group refusal of each entity among ``entities`` a sibling's change holds (only those are keys).

    Entities in no locking group cost nothing; the rest share one read of the members and one of the live cycles.
    """
    wanted = {e.pk: locking(e) for e in entities}
    wanted = {pk: names for pk, names in wanted.items() if names}
    if not wanted:
        return {}
    names = sorted({name for names in wanted.values() for name in names})
    everyone = members_of(names)
    member_ids = {m.pk for found in everyone.values() for m in found}
    live = list(
        Cycle.objects.filter(entity_id__in=member_ids, phase__in=HOLDING, status__in=["", Cycle.Status.REGRESSED])
        .select_related("entity")
        .order_by("moved_at", "pk")
    )
    answers: dict[int, str] = {}
    for pk, groups_ in wanted.items():
        for group in groups_:
            siblings = {m.pk for m in everyone[group] if m.pk != pk}
            holder = next((c for c in live if c.entity_id in siblings), None)
            if holder is not None:
                answers[pk] = Holder(group, holder).sentence()
                break
    return answers


def lock_rows(entity: Entity) -> list[GroupLock]:
    """Lock the rows of the entity's locking groups (inside the caller's transaction), creating them on first use."""
    groups = locking(entity)
    for group in groups:
        GroupLock.objects.get_or_create(group=group)
    return list(GroupLock.objects.select_for_update().filter(group__in=groups).order_by("group"))


# --- The clean base and confounding ---------------------------------------------------


def _changes(entity_ids: list[int]) -> list[tuple[datetime, Cycle, str]]:
    """Every merge and revert merge of ``entity_ids``' cycles: (when, the cycle, "shipped" or "reverted")."""
    if not entity_ids:
        return []
    found: list[tuple[datetime, Cycle, str]] = []
    cycles = Cycle.objects.filter(entity_id__in=entity_ids).filter(
        Q(merged_at__isnull=False) | Q(rounds__revert_merged_at__isnull=False)
    )
    for cycle in cycles.select_related("entity").distinct():
        if cycle.merged_at is not None:
            found.append((cycle.merged_at, cycle, "shipped"))
    reverted = Round.objects.filter(cycle__entity_id__in=entity_ids, revert_merged_at__isnull=False).select_related(
        "cycle", "cycle__entity"
    )
    found += [(rnd.revert_merged_at, rnd.cycle, "reverted") for rnd in reverted]
    return found


def changed_at(entity: Entity) -> datetime | None:
    """The last merge or revert merge of any member of the entity's groups (itself included), or None outside groups."""
    groups = groups_of(entity)
    if not groups:
        return None
    ids = {member.pk for group_members in members_of(groups).values() for member in group_members} | {entity.pk}
    times = [when for when, _cycle, _how in _changes(sorted(ids))]
    return max(times) if times else None


def baseline_end(cycle: Cycle) -> datetime:
    """When the window the cycle opened on ended (its ``to``), else when the cycle opened."""
    end = (cycle.window or {}).get("to")
    parsed = parse_datetime(end) if isinstance(end, str) else None
    return parsed or cycle.started_at


def sibling_change(cycle: Cycle, *, now: datetime) -> dict[str, Any] | None:
    """A change another member of the cycle's groups shipped or had reverted after its baseline ended, or None.

    Any group counts, locking or not: a sibling that bypassed the lock, one in a group that does not lock, or
    one that shipped while this proposal waited for its Accept.
    """
    groups = groups_of(cycle.entity)
    if not groups:
        return None
    siblings = members_of(groups, besides=cycle.entity)
    group_of = {member.pk: group for group in groups for member in siblings[group]}
    since = baseline_end(cycle)
    landed = sorted(
        (c for c in _changes(sorted(group_of)) if since < c[0] <= now and c[1].pk != cycle.pk),
        key=lambda c: (c[0], c[1].pk),
    )
    if not landed:
        return None
    when, other, how = landed[0]
    rnd = other.rounds.exclude(pr_number=None).order_by("-number").first()
    return {
        "cycle": other.pk,
        "entity": f"{other.entity.target_kind}:{other.entity.slug}",
        "group": group_of[other.entity_id],
        "what": how,
        "pr": (rnd.pr_url or f"PR #{rnd.pr_number}") if rnd is not None else "",
        "at": when.isoformat(),
    }


def overview(entity: Entity) -> list[dict[str, Any]]:
    """The entity's groups for its page: each with whether it locks, the other members, and who holds it now."""
    names = groups_of(entity)
    if not names:
        return []
    terms = declared(entity)
    everyone = members_of(names, besides=entity)
    ids = [m.pk for found in everyone.values() for m in found]
    live = list(
        Cycle.objects.filter(entity_id__in=ids, phase__in=HOLDING, status__in=["", Cycle.Status.REGRESSED])
        .select_related("entity")
        .order_by("moved_at", "pk")
    )
    shown = []
    for name in names:
        others = everyone[name]
        holder = next((c for c in live if c.entity_id in {m.pk for m in others}), None)
        shown.append(
            {
                "name": name,
                "lock": (terms.get(name) or {}).get("lock", True) is not False,
                "repair": (terms.get(name) or {}).get("repair") or "bypass",
                "members": others,
                "holder": holder,
                "holding": Holder(name, holder).sentence() if holder is not None else "",
                "waits": name in locking(entity),
            }
        )
    return shown
