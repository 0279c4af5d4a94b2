"""Holds and lock groups as they stood at a past instant (a backtest replays the entity's history through them).

The live gates read what stands now (``supervision.holds_many``,
``groups.holders_many``, ``groups.changed_at``); these read each one's
timeline once — rows bounded by the entity's supervision and its group's
cycles, never by its runs — and answer for any instant with the same words.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q

from evolution.models import Cycle, Supervision
from evolution.steering import groups
from evolution.steering.supervision import _STANDING, _sentence, groups_of
from grading.models import Entity


@dataclass
class HoldHistory:
    """Every hold and release that ever stood on the entity or its groups, oldest first."""

    own: list[Supervision] = field(default_factory=list)
    by_group: dict[str, list[Supervision]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, entity: Entity) -> HoldHistory:
        """One read of the entity's and its groups' hold and release rows."""
        names = groups_of(entity)
        rows = Supervision.objects.filter(kind__in=_STANDING).filter(
            Q(entity=entity) | Q(entity__isnull=True, group__in=names)
        )
        history = cls(order=names)
        for row in rows.order_by("created_at", "id"):
            if row.entity_id == entity.pk:
                history.own.append(row)
            else:
                history.by_group.setdefault(row.group, []).append(row)
        return history

    def refusal_at(self, at: datetime) -> str | None:
        """``hold_refusal`` at ``at``: the entity's own standing hold first, else its first held group's."""
        row = _standing(self.own, at)
        if row is not None:
            return _sentence(row)
        for group in self.order:
            row = _standing(self.by_group.get(group, []), at)
            if row is not None:
                return _sentence(row, group)
        return None


def _standing(rows: list[Supervision], at: datetime) -> Supervision | None:
    """The hold standing at ``at`` among ``rows`` (oldest first): the newest row by then, when it is a hold."""
    index = bisect_right([r.created_at for r in rows], at)
    newest = rows[index - 1] if index else None
    return newest if newest is not None and newest.kind == Supervision.Kind.HOLD else None


@dataclass
class GroupHistory:
    """The entity's lock groups over time: the siblings' changes past their Accept, and every change's instant."""

    #: (from, until or None while live, the sentence) of each sibling's change that held a locking group.
    spans: list[tuple[datetime, datetime | None, str]] = field(default_factory=list)
    #: Every merge and revert merge of the groups' members (the entity included), oldest first: the clean bases.
    changes: list[datetime] = field(default_factory=list)

    @classmethod
    def read(cls, entity: Entity) -> GroupHistory:
        """One read of the members, of the siblings' analysed cycles and of the groups' changes."""
        names = groups_of(entity)
        if not names:
            return cls()
        members = groups.members_of(names)
        everyone = sorted({m.pk for found in members.values() for m in found} | {entity.pk})
        history = cls(changes=sorted(when for when, _cycle, _how in groups._changes(everyone)))
        locking = groups.locking(entity)
        siblings = {m.pk: group for group in locking for m in members.get(group, []) if m.pk != entity.pk}
        if siblings:
            held = Cycle.objects.filter(entity_id__in=sorted(siblings), analysed=True).exclude(applied_at=None)
            for cycle in held.select_related("entity").order_by("applied_at", "pk"):
                who = cycle.entity.name or cycle.entity.slug
                sentence = f"lock group {siblings[cycle.entity_id]}: {who}'s change (cycle {cycle.pk}) held it"
                history.spans.append((cycle.applied_at, cycle.completed_at, sentence))
        return history

    def changed_at(self, at: datetime) -> datetime | None:
        """The clean base at ``at``: the last change of any member at or before it, or None."""
        index = bisect_right(self.changes, at)
        return self.changes[index - 1] if index else None

    def refusal_at(self, at: datetime) -> str | None:
        """The group refusal at ``at``: a sibling's change past its Accept and not yet settled then."""
        for start, until, sentence in self.spans:
            if start <= at and (until is None or at < until):
                return sentence
        return None
