"""Every place the loop waits for a person, from stored facts (seed 003 "Where the loop waits for a person",
"A window that waits"; CONFORMANCE §21).

``items`` answers the one list the dashboard's "N need you" (the navigation
count and ``/evolution/needs-you/``), ``loop_status``'s ``needsYou`` and the
daily digest are built on. One query per source, whatever the fleet holds:

- decide / retry: a round's pending card (producer ``loop``), since the card
  opened, until it expires;
- grant: a pending approval card of ``loop-idea``, ``loop-supervise`` or
  ``loop-settings`` (or a ``loop`` grant card), named by its payload's
  ``entity`` (or the idea it approves) and ``cycle``;
- merge: a cycle in its merge wait whose PR waits on a person's merge
  (merge gate not armed auto), since the change was applied, until the
  merge deadline;
- revert: a revert PR being followed under a person's merge, until its
  deadline;
- rearm: an entity the breaker paused (``autonomy.paused_many``);
- budget: an entity with no live cycle whose loop spend this calendar month reached the brain's
  ``loop.budget.maxUsdPerMonth`` (issue 16), until the month turns;
- window / stall: the recorded waiting window (``evolution.cadence``) of an
  entity in the loop that is not paused, held or owned by a cycle — a
  person's move the window named (``awaitingPerson``), else a window whose
  count stopped moving (never both);
- failure: a failed cycle nobody dismissed (``supervision.failures_unread``);
- config: an entity in the loop whose definition does not load;
- stuck: a step of a live cycle that has been due with no worker on it for
  longer than a few ticks (``evolution.core.due``): an accepted change
  nobody is applying, an analysis nobody has started.
- forge: GitHub's rate limit (``evolution.forges.rate_limit``, issue 32): the
  polls, applies, checks and withdraws wait until its reset — the fleet's
  answer only, until the reset.

A wait past its own bound (``until``) is over and is not listed. Each item
is {gate, targetKind, targetId, name, cycleId, round, since, until, cardId,
card, pr, url, next, clause}: ``next`` says who acts and where, ``url`` is
where the person acts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils import timezone

from evolution.core import due, spend
from evolution.core.cycles import when
from evolution.core.links import absolute, cycle_path
from evolution.models import Cycle, Idea, Round
from evolution.steering import cadence
from evolution.steering.live import (  # noqa: F401 - the waits' columns, named here as before
    CARD_WAIT_FIELDS,
    CYCLE_WAIT_FIELDS,
    NAMED,
    ROUND_WAIT_FIELDS,
    in_the_loop,
    live_rows,
    named_entity,
)
from grading.models import Entity
from hitl.models import Card, Notice
from singularity import written

log = logging.getLogger(__name__)

#: The producers whose pending approval cards are a person's grant gate.
GRANT_PRODUCERS = ("loop-idea", "loop-supervise", "loop-settings")
#: The producer of the decide and retry cards (and the digest notice).
LOOP = "loop"
CARD_GATES = (Card.Kind.DECIDE, Card.Kind.RETRY)
#: The order a page lists gates in when two waits started at the same instant.
GATES = (
    "decide",
    "retry",
    "grant",
    "merge",
    "revert",
    "rearm",
    "budget",
    "window",
    "stall",
    "failure",
    "config",
    "stuck",
    "forge",
)
PAGE_PATH = "/evolution/needs-you/"
#: What no wait reads of an entity (the definition's text and frontmatter): left unread for a whole fleet.
UNREAD = ("body", "description", "frontmatter", "provenance")
DIGEST_KIND = "needs-you-digest"
#: A digest posted this recently is not posted again (a beat that fires twice in a day posts once).
DIGEST_GAP = timedelta(hours=20)


# --- Pauses -------------------------------------------------------------------------


def pauses(entities: Iterable[Entity]) -> tuple[dict[int, str], dict[int, str]]:
    """({entity id: the breaker's pause}, {entity id: the hold standing on it}) for ``entities``."""
    from evolution.steering import autonomy, supervision

    entities = list(entities)
    if not entities:
        return {}, {}
    paused_many = getattr(autonomy, "paused_many", None)
    holds_many = getattr(supervision, "holds_many", None)
    breaker = paused_many(entities) if paused_many is not None else {}
    held = holds_many(entities) if holds_many is not None else {}
    return dict(breaker), dict(held)


# --- One item -----------------------------------------------------------------------


def _item(gate: str, entity: Entity | None, *, next: str, url: str, **fields: Any) -> dict[str, Any]:
    card = fields.pop("card", None)
    item = {
        "gate": gate,
        "targetKind": entity.target_kind if entity is not None else None,
        "targetId": entity.slug if entity is not None else None,
        "name": (entity.name or entity.slug) if entity is not None else "",
        "cycleId": fields.pop("cycle_id", None),
        "round": fields.pop("round", None),
        "since": fields.pop("since", None),
        "until": fields.pop("until", None),
        "cardId": str(card.pk) if card is not None else None,
        "card": {"id": str(card.pk), "url": absolute(card.get_absolute_url())} if card is not None else None,
        "pr": fields.pop("pr", None),
        "url": url,
        "next": next,
        "clause": fields.pop("clause", ""),
    }
    item["_entity"] = entity.pk if entity is not None else None
    return item


def _open(until: datetime | None, now: datetime) -> bool:
    """Whether a wait bounded by ``until`` still stands at ``now``."""
    return until is None or until > now


def card_item(cycle: Cycle, rnd: Round, card: Card) -> dict[str, Any]:
    """A pending decide or retry card of ``rnd``: a person answers it in the inbox (or the HITL chat)."""
    verb = "Accept / Skip, or reply to refine" if card.kind == Card.Kind.DECIDE else "Retry / Skip, or reply"
    url = absolute(card.get_absolute_url())
    return _item(
        card.kind,
        cycle.entity,
        cycle_id=cycle.pk,
        round=rnd.number,
        since=card.created_at,
        until=card.expires_at,
        card=card,
        url=url,
        next=f"a person answers the {card.kind} card of cycle {cycle.pk} · r{rnd.number} ({verb}), "
        "in the inbox or the HITL chat",
    )


def pr_item(cycle: Cycle, rnd: Round, *, revert: bool) -> dict[str, Any]:
    """A PR a person merges (or closes): the change's under a human merge gate, or the revert being followed."""
    if revert:
        number, url = rnd.revert_pr_number, rnd.revert_pr_url or f"/evolution/pulls/{rnd.revert_pr_number}/"
        since, until = rnd.revert_opened_at, rnd.revert_deadline
        words = f"a person merges or closes revert PR #{number} of cycle {cycle.pk}"
    else:
        number, url = rnd.pr_number, rnd.pr_url or f"/evolution/pulls/{rnd.pr_number}/"
        since, until = cycle.applied_at, cycle.merge_deadline
        words = f"a person merges or closes PR #{number} of cycle {cycle.pk}"
    url = absolute(url)
    return _item(
        "revert" if revert else "merge",
        cycle.entity,
        cycle_id=cycle.pk,
        round=rnd.number,
        since=since,
        until=until,
        pr={"number": number, "url": url},
        url=url,
        next=f"{words}, on its page on the forge",
    )


def cycle_items(cycle: Cycle, rounds: list[Round], now: datetime) -> list[dict[str, Any]]:
    """What a live ``cycle`` waits on a person for, read from ``rounds`` (its rounds with their cards, by number).

    A pending decide or retry card; the PR open under a person's merge gate
    while the cycle is in its merge wait; the revert PR being followed under
    a person's merge. A wait past its bound is not listed.
    """
    found = []
    for gate, rnd, what in cycle_waits(cycle, rounds, now):
        if gate == "stuck":
            found.append(stuck_item(cycle, rnd, what, now))
        elif gate == "card":
            found.append(card_item(cycle, rnd, what))
        else:
            found.append(pr_item(cycle, rnd, revert=gate == "revert"))
    return found


def cycle_waits(cycle: Any, rounds: list[Any], now: datetime) -> list[tuple[str, Any, Any]]:
    """(what, round, its fact) of each wait ``cycle_items`` lists, in its order: ("stuck", round, since),
    ("card", round, card), ("merge", round, None), ("revert", round, None).

    Reads only the columns ``CYCLE_WAIT_FIELDS``, ``ROUND_WAIT_FIELDS`` and ``CARD_WAIT_FIELDS`` name, as
    attributes: of model rows, or of the plain rows ``count`` reads.
    """
    if cycle.phase == Cycle.Phase.SETTLED:
        return []
    found: list[tuple[str, Any, Any]] = []
    for rnd in rounds:
        since = due.stuck_since(cycle, rnd, now)
        if since is not None:
            found.append(("stuck", rnd, since))
        card = rnd.card
        pending = card is not None and card.status == Card.Status.PENDING  # Card.is_pending
        if pending and card.kind in CARD_GATES and _open(card.expires_at, now):
            found.append(("card", rnd, card))
    if cycle.phase == Cycle.Phase.MERGE_WAIT:
        with_pr = [r for r in rounds if r.pr_number]
        rnd = with_pr[-1] if with_pr else None
        if (
            rnd is not None
            and rnd.status == Round.Status.APPLIED
            and rnd.merge_gate != "auto"
            and _open(cycle.merge_deadline, now)
        ):
            found.append(("merge", rnd, None))
    if cycle.phase == Cycle.Phase.REVERTING:
        reverts = [r for r in rounds if r.revert_pr_number and not r.revert_outcome]
        if reverts and reverts[-1].revert_merge_gate != "auto" and _open(reverts[-1].revert_deadline, now):
            found.append(("revert", reverts[-1], None))
    return found


def _grant_item(card: Card, entity: Entity | None) -> dict[str, Any]:
    payload = card.payload if isinstance(card.payload, dict) else {}
    url = absolute(card.get_absolute_url())
    cycle_id = payload.get("cycle") if isinstance(payload.get("cycle"), int) else None
    return _item(
        "grant",
        entity,
        cycle_id=cycle_id,
        since=card.created_at,
        until=card.expires_at,
        card=card,
        url=url,
        clause=card.title,
        next=f"a person approves or declines “{card.title}” in the inbox: {url}",
    )


def _rearm_item(entity: Entity, reason: str) -> dict[str, Any]:
    url = absolute(entity.get_absolute_url())
    return _item(
        "rearm",
        entity,
        url=url,
        clause=reason,
        next=f"a person re-arms {entity} (its page's Supervision section, or the admin) once they have read why: "
        f"{reason}",
    )


def stuck_item(cycle: Cycle, rnd: Round, since: datetime, now: datetime) -> dict[str, Any]:
    """A step due with no worker on it: the loop hands it over on every tick, so the workers are what is wrong."""
    url = absolute(cycle_path(cycle.pk))
    found = due.stuck_step(cycle, rnd, now)
    what = found[0] if found is not None else "its step"
    waited = max(int((now - since).total_seconds() // 60), 1)
    return _item(
        "stuck",
        cycle.entity,
        cycle_id=cycle.pk,
        round=rnd.number,
        since=since,
        url=url,
        clause=f"{what} of cycle {cycle.pk} · r{rnd.number} has waited {waited} min for a worker",
        next=f"a person checks that the dashboard's worker and its message broker are running "
        f"(the loop hands {what} over again on every tick): {url}",
    )


def _span(delta: timedelta) -> str:
    """A wait's length in words: "15 days", "1 day", "30 hours"."""
    hours = int(delta.total_seconds() // 3600)
    if hours >= 48:
        days = hours // 24
        return f"{days} days"
    return f"{hours} hour{'s' if hours != 1 else ''}"


def window_item(entity: Entity, row: Any, now: datetime) -> dict[str, Any] | None:
    """The entity's window item — a person's move its window named, else a stall — or None."""
    if not cadence.waiting(row):
        return None
    page = absolute(entity.get_absolute_url())
    awaiting = row.awaiting_person
    if awaiting:
        what = str(awaiting.get("what") or "")
        url = str(awaiting.get("url") or "") or page
        return _item(
            "window",
            entity,
            since=row.moved_at,
            url=url,
            clause=f"waiting on you: {what}",
            next=f"a person does it at {url}: {what} (the next cycle of {entity} waits on it)",
        )
    if cadence.stalled(entity, row, now):
        counted = f"{row.have} of {row.need} {row.unit or 'runs'}"
        clause = f"the next cycle's window has not moved in {_span(now - row.moved_at)} ({counted})"
        if row.reason:
            clause = f"{clause}: {row.reason}"
        return _item(
            "stall",
            entity,
            since=row.moved_at,
            url=page,
            clause=clause,
            next=f"a person looks at why the window of {entity} stopped moving, on its page: {page}",
        )
    return None


def _failure_item(cycle: Any) -> dict[str, Any]:
    url = absolute(cycle_path(cycle.pk))
    return _item(
        "failure",
        cycle.entity,
        cycle_id=cycle.pk,
        since=cycle.completed_at,
        url=url,
        clause=cycle.reason,
        next=f"a person reads why cycle {cycle.pk} failed and dismisses it (its story, or the Supervision section): "
        f"{url}",
    )


def _budget_item(entity: Entity, refusal: str, now: datetime) -> dict[str, Any]:
    """The entity's month reached ``loop.budget.maxUsdPerMonth`` (issue 16): no new cycle until the month turns."""
    url = absolute(entity.get_absolute_url())
    turns = spend.turns_at(now)
    return _item(
        "budget",
        entity,
        since=spend.month_of(now)[0],
        until=turns,
        url=url,
        clause=spend.ceiling_sentence(refusal),
        next=f"a person raises loop.budget.maxUsdPerMonth in constitution/MANIFEST.yaml for new cycles of {entity} "
        f"to open before {when(turns)}, or lets the month turn (its spend, month by month, on its page: {url})",
    )


def _config_item(entity: Entity) -> dict[str, Any]:
    url = absolute(entity.get_absolute_url())
    return _item(
        "config",
        entity,
        url=url,
        clause=entity.load_error,
        next=f"a person fixes {entity.path} in the brain: {entity.load_error}",
    )


def _forge_items(now: datetime) -> list[dict[str, Any]]:
    """GitHub's rate limit, while it stands: every GitHub call of the loop waits for its reset."""
    from evolution.forges import rate_limit, rate_limit_words

    limit = rate_limit()
    if limit is None:
        return []
    until, reason = limit
    words = rate_limit_words(until)
    return [
        _item(
            "forge",
            None,
            since=now,
            until=until,
            url=absolute(PAGE_PATH),
            clause=f"{words}: {reason}",
            next=f"{words}: the loop's polls, applies, checks and withdraws wait until then; nobody need act, "
            "but GitHub asks for fewer calls (a webhook instead of polling, a GitHub App's higher limit)",
        )
    ]


# --- The sources --------------------------------------------------------------------


def _live_cycles(entity_ids: list[int] | QuerySet[Any] | None) -> list[Cycle]:
    """Every live cycle (the gates and the claims), rounds and cards prefetched (two queries).

    ``entity_ids`` (ids, or a ``values("pk")`` subquery) keeps those of some entities; None keeps all.
    """
    cycles = Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
    if entity_ids is not None:
        cycles = cycles.filter(entity_id__in=entity_ids)
    return list(
        cycles.select_related("entity")
        .defer(*(f"entity__{name}" for name in UNREAD))
        .prefetch_related(live_rounds())
        .order_by("started_at", "id")
    )


def live_rounds() -> Prefetch:
    """A live cycle's rounds with their cards, by number (``core.due`` reads whether a brief was written)."""
    return Prefetch("rounds", queryset=Round.objects.select_related("card").order_by("number"))


def _grant_pending() -> QuerySet[Card]:
    """Pending approval cards of the loop's producers (or a ``loop`` grant card)."""
    return Card.objects.filter(status=Card.Status.PENDING).filter(
        Q(producer__in=GRANT_PRODUCERS) | Q(producer=LOOP, kind=Card.Kind.GRANT)
    )


def _grant_cards() -> list[Card]:
    """Pending approval cards of the loop's producers, each with the entity of the idea it approves (if any)."""

    def statement() -> QuerySet[Card]:
        idea = Idea.objects.filter(card=OuterRef("pk")).values("entity_id")[:1]
        return _grant_pending().annotate(idea_entity=Subquery(idea)).order_by("created_at")

    return written.objects_compiled_once(("grant_cards",), statement)


def _card_entity_id(card: Card) -> int | None:
    payload = card.payload if isinstance(card.payload, dict) else {}
    named = payload.get("entity")
    if isinstance(named, int) and not isinstance(named, bool):
        return named
    return getattr(card, "idea_entity", None)


def _unread_failures() -> QuerySet[Cycle]:
    """Failed cycles nobody dismissed (``supervision.failures_unread``)."""
    from evolution.steering import supervision

    unread = getattr(supervision, "failures_unread", None)
    return unread() if unread is not None else Cycle.objects.filter(status=Cycle.Status.FAILED)


def _failures(entity_ids: list[int] | QuerySet[Any] | None) -> list[SimpleNamespace]:
    """Failed cycles nobody dismissed (``supervision.failures_unread``), with their entities: plain rows of what
    a failure's item reads (``pk``, ``completed_at``, ``reason``; the entity's ``NAMED``, ``pk`` for its id), in
    one statement and no model row (every page of the fleet lists them)."""
    named = [f"entity__{name}" for name in NAMED]

    def statement() -> QuerySet[Any]:
        failed = _unread_failures()
        if entity_ids is not None:
            failed = failed.filter(entity_id__in=entity_ids)
        return failed.values_list("pk", "completed_at", "reason", *named)

    if isinstance(entity_ids, QuerySet):
        which: Any = written.key_of(entity_ids)
    else:
        which = None if entity_ids is None else tuple(entity_ids)
    rows = []
    for pk, completed_at, reason, *entity in written.rows_compiled_once(("failures", which), statement):
        rows.append(SimpleNamespace(pk=pk, completed_at=completed_at, reason=reason, entity=named_entity(entity)))
    return rows


def collect(
    now: datetime,
    *,
    entities: list[Entity],
    live: list[Any] | None = None,
    breaker: dict[int, str] | None = None,
    held: dict[int, str] | None = None,
    whole: bool = True,
    scope: QuerySet[Entity] | None = None,
    budget: dict[int, str] | None = None,
    unbuilt: Iterable[Any] = (),
) -> list[dict[str, Any]]:
    """The items for ``entities`` (read with ``select_related("waiting_window")``), oldest wait first.

    ``live`` are their live cycles with rounds and cards prefetched (read
    here when None); ``breaker`` and ``held`` the pauses (read here when
    None). ``whole`` keeps the items of no entity among ``entities`` too (a
    grant card naming none, a failure of an entity out of the loop): the
    fleet's answer; False keeps only theirs. With ``scope`` (the entities
    the answer is about, a queryset) ``entities`` need only be those of it
    that can raise a wait of their own (``candidates``): a card, a cycle or
    a failure of any entity of ``scope`` is kept. ``budget`` are the monthly ceiling's refusals
    (``spend.month_refusals``, read here for ``entities`` when None). ``unbuilt`` are live cycles whose items
    are the caller's (each need carry only its ``entity_id`` and ``claim``): they claim and run their entities
    here, and raise nothing.
    """
    by_id = {e.pk: e for e in entities}
    ids: list[int] | QuerySet[Any] | None = None
    if not whole:
        ids = written.pks_of(scope) if scope is not None else sorted(by_id)
    if live is None:
        live = _live_cycles(ids)
    if breaker is None or held is None:
        breaker, held = pauses([e for e in entities if e.loop_enabled])
    if budget is None:
        budget = spend.month_refusals([e for e in entities if e.loop_enabled], now=now)
    found: list[dict[str, Any]] = []
    claimed = {c.claim for cycles in (live, unbuilt) for c in cycles if c.claim}
    running = {c.entity_id for cycles in (live, unbuilt) for c in cycles}
    for cycle in live:
        if cycle.entity_id in by_id:
            cycle.entity = by_id[cycle.entity_id]
        rounds = cycle.rounds if isinstance(cycle.rounds, list) else list(cycle.rounds.all())  # plain, or models
        found.extend(cycle_items(cycle, rounds, now))
    cards = [c for c in _grant_cards() if _open(c.expires_at, now)]
    named = {_card_entity_id(c) for c in cards} - {None} - set(by_id)
    others: dict[Any, Entity] = {}
    if named and (whole or scope is not None):
        others = (Entity.objects if whole or scope is None else scope).in_bulk(sorted(named))  # type: ignore[arg-type]
    for card in cards:
        pk = _card_entity_id(card)
        entity = (by_id.get(pk) or others.get(pk)) if pk is not None else None
        if entity is None and not whole:
            continue
        found.append(_grant_item(card, entity))
    for entity in entities:
        found.extend(_entity_items(entity, now, breaker=breaker, held=held, budget=budget, claimed=claimed,
                                   running=running))  # fmt: skip
    found.extend(_failure_item(c) for c in _failures(ids))
    if whole:
        found.extend(_forge_items(now))
    far = now + timedelta(days=36500)
    found.sort(key=lambda i: (i["since"] or far, GATES.index(i["gate"]) if i["gate"] in GATES else len(GATES)))
    return found


def _entity_items(
    entity: Entity,
    now: datetime,
    *,
    breaker: dict[int, str],
    held: dict[int, str],
    budget: dict[int, str],
    claimed: set[Any],
    running: set[int],
) -> list[dict[str, Any]]:
    """The waits of an entity's own: config, rearm, budget (no live cycle), and its window (not paused, held
    or owned by a cycle: ``claimed`` are the live cycles' claims, ``running`` their entities)."""
    if not entity.loop_enabled or not entity.present:
        return []
    found = []
    if entity.load_error:
        found.append(_config_item(entity))
    if entity.pk in breaker:
        found.append(_rearm_item(entity, breaker[entity.pk]))
    if entity.pk in budget and entity.pk not in running:  # a live cycle carries on: it asks nobody
        found.append(_budget_item(entity, budget[entity.pk], now))
    if entity.pk in breaker or entity.pk in held or entity.pk in claimed:
        return found  # paused, held or owned by a cycle: no window item (seed "A window that waits")
    item = window_item(entity, cadence.window_of(entity), now)
    if item is not None:
        found.append(item)
    return found


def candidates(scope: QuerySet[Entity], also: Iterable[int] = ()) -> list[Entity]:
    """The entities of ``scope`` in the loop that can raise a wait of their own, in one indexed read.

    A load error (config), a standing waiting window (window, stall), a lock group named in its terms (a
    sibling's change may hold it), or an id of ``also`` (those the breaker pauses: rearm).
    Every other wait is a card's, a live cycle's or a failed cycle's, read from those rows: the fleet's waits
    cost what waits, not the fleet.
    """
    from evolution.steering.supervision import may_join_groups

    also = sorted(also)

    def statement() -> QuerySet[Entity]:
        stands = Q(waiting_window__isnull=False, waiting_window__ended_at__isnull=True)
        return (
            scope.filter(loop_enabled=True, present=True)
            .filter(~Q(load_error="") | stands | may_join_groups() | Q(pk__in=also))
            .select_related("waiting_window")
            .defer(*UNREAD)
        )

    return written.objects_compiled_once(("candidates", written.key_of(scope), tuple(also)), statement)


@dataclass
class Fleet:
    """What ``fleet_collect`` read: the waits, the breaker's pauses, the holds, and the entities it read whole."""

    found: list[dict[str, Any]]
    breaker: dict[int, str]
    held: dict[int, str]
    read: list[Entity]


def fleet_collect(
    now: datetime,
    scope: QuerySet[Entity],
    *,
    live: list[Any] | None = None,
    whole: bool = True,
    items_of_live: bool = True,
) -> Fleet:
    """The waits of ``scope``'s entities (a queryset) without reading every entity, in a fixed number of reads.

    The breaker's settles of the whole scope and the policy of the entities with one (two statements), then
    only the entities ``candidates`` names (one), the holds (one), the live cycles (``live``, read here when None), the pending cards and the
    failures. ``whole`` keeps the waits of no entity of ``scope`` too, as ``collect`` does.

    ``items_of_live`` False builds no item of the ``live`` cycles (each need carry only its ``entity_id`` and
    ``claim``: ``collect``'s ``unbuilt``): they still claim and run their entities (no window or budget item
    stands beside them), and their own waits are the caller's to count (``cycle_waits``) or build
    (``cycle_items``): the fleet's page builds those of the rows it shows only.
    """
    from evolution.steering import autonomy, supervision

    unbuilt: list[Any] = []
    if not items_of_live and live is not None:
        live, unbuilt = [], live
    breaker = autonomy.pauses_of(autonomy.settles_in(scope))
    budget = spend.month_refusals_in(scope, now=now)  # one statement: the monthly ceiling (issue 16)
    read = candidates(scope, [*breaker, *budget])
    held = supervision.holds_in(scope)
    found = collect(
        now, entities=read, live=live, breaker=breaker, held=held, whole=whole, scope=scope, budget=budget,
        unbuilt=unbuilt,
    )  # fmt: skip
    return Fleet(found, breaker, held, read)


def items(now: datetime | None = None, *, entity: Entity | None = None) -> list[dict[str, Any]]:
    """Every wait on a person in the fleet (or of ``entity``), oldest first; see the module's docstring.

    The fleet's list reads the rows that wait (live cycles, pending cards, standing windows, load errors, the
    breaker's settles, holds, failures) in a fixed number of statements, never every entity in the loop.
    """
    now = now or timezone.now()
    if entity is not None:
        entities = list(Entity.objects.filter(pk=entity.pk).select_related("waiting_window"))
        return public(collect(now, entities=entities, whole=False))
    return public(_fleet_waits(now))


def page(now: datetime | None = None, *, start: int = 0, stop: int | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(``len(items(now))``, ``items(now)[start:stop]``): the fleet's waits counted, and only those shown built.

    A live cycle's waits are placed in the list from their plain rows (``cycle_waits``: the gate and since when)
    and built into items (``cycle_items``' ``stuck_item``, ``card_item``, ``pr_item``) only for the page: with a
    worker down every live cycle waits (a thousand stuck analyses), and the needs-you page shows fifty. The waits of
    no live cycle (cards, an entity's own, failures, the forge) are few and built as ``items`` builds them. The
    order is ``collect``'s: the oldest wait first, then by gate, ties in the order ``collect`` builds them.
    """
    now = now or timezone.now()
    scope, read, breaker, budget, held, live = _fleet_read(now)
    others = collect(now, entities=read, live=[], breaker=breaker, held=held, whole=True, scope=scope,
                     budget=budget, unbuilt=live)  # fmt: skip
    far = now + timedelta(days=36500)

    def key(since: datetime | None, gate: str) -> tuple[datetime, int]:
        return (since or far, GATES.index(gate) if gate in GATES else len(GATES))

    by_id = {e.pk: e for e in read}
    placed: list[tuple[tuple[datetime, int], Any]] = []  # (its place, the item or the wait to build it from)
    for cycle in live:
        for gate, rnd, what in cycle_waits(cycle, cycle.rounds, now):
            if gate == "stuck":
                placed.append((key(what, "stuck"), (cycle, gate, rnd, what)))
            elif gate == "card":
                placed.append((key(what.created_at, what.kind), (cycle, gate, rnd, what)))
            elif gate == "merge":
                placed.append((key(cycle.applied_at, "merge"), (cycle, gate, rnd, what)))
            else:
                placed.append((key(rnd.revert_opened_at, "revert"), (cycle, gate, rnd, what)))
    # ``collect`` lists the live cycles' items first, then the rest, and sorts stably: the same order here.
    placed.extend((key(item["since"], item["gate"]), item) for item in others)
    placed.sort(key=lambda entry: entry[0])
    shown = []
    for _, entry in placed[start:stop]:
        if isinstance(entry, tuple):
            cycle, gate, rnd, what = entry
            if cycle.entity_id in by_id:
                cycle.entity = by_id[cycle.entity_id]
            if gate == "stuck":
                entry = stuck_item(cycle, rnd, what, now)
            elif gate == "card":
                entry = card_item(cycle, rnd, what)
            else:
                entry = pr_item(cycle, rnd, revert=gate == "revert")
        shown.append(entry)
    return len(placed), public(shown)


def _standing(scope: QuerySet[Entity], also: Iterable[int]) -> list[Entity]:
    """The entities of ``scope`` in the loop with a wait of their own to build (``collect``): a load error, a
    standing waiting window, or an id of ``also`` (the breaker's pauses and the monthly ceiling's refusals).

    ``candidates`` less the entities it reads only for their lock groups (the fleet's holders): their terms
    are never searched here, so the statement reads no entity's terms but those it returns.
    """
    also = sorted(also)

    def statement() -> QuerySet[Entity]:
        stands = Q(waiting_window__isnull=False, waiting_window__ended_at__isnull=True)
        return (
            scope.filter(loop_enabled=True, present=True)
            .filter(~Q(load_error="") | stands | Q(pk__in=also))
            .select_related("waiting_window")
            .defer(*UNREAD)
        )

    return written.objects_compiled_once(("standing", written.key_of(scope), tuple(also)), statement)


def _fleet_waits(now: datetime) -> list[dict[str, Any]]:
    """Every wait on a person in the fleet (``items`` and ``count``): the breaker's settles, the monthly
    ceiling, the entities with a wait of their own, the holds, the live cycles (rounds and cards), the
    pending grant cards and the failures, each read once and only as far as its waits read it."""
    scope, read, breaker, budget, held, live = _fleet_read(now)
    return collect(now, entities=read, live=live, breaker=breaker, held=held, whole=True, scope=scope, budget=budget)


def _fleet_read(now: datetime) -> tuple[Any, ...]:
    """What the fleet's waits are built from, each read once: the entities in the loop, those of them with a
    wait of their own, the breaker's settles, the monthly ceiling's refusals, the holds and the live cycles."""
    from evolution.steering import autonomy, supervision

    scope = in_the_loop()
    breaker = autonomy.pauses_of(autonomy.settles_in(scope))
    budget = spend.month_refusals_in(scope, now=now)
    read = _standing(scope, [*breaker, *budget])
    held = supervision.holds_in(scope)
    return scope, read, breaker, budget, held, live_rows(None, named=True)


def public(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items without their bookkeeping key (``_entity``, the one ``_item`` adds): what the API, the pages and
    the digest read. A copy of each: the fleet's reads keep the items with it."""
    answer = []
    for item in found:
        item = item.copy()
        item.pop("_entity", None)
        answer.append(item)
    return answer


def count(now: datetime | None = None) -> int:
    """How many waits on a person the fleet holds (the navigation's "N need you"): ``len(items(now))``.

    Counted, not listed: the live cycles' waits from plain rows of the columns they read (``cycle_waits``),
    the pending grant cards and the unread failures by ``COUNT``; the breaker, the monthly ceiling, the
    holds and the entities with a wait of their own read as ``items`` reads them.
    """
    from evolution.steering import autonomy, supervision

    now = now or timezone.now()
    scope = in_the_loop()
    breaker = autonomy.pauses_of(autonomy.settles_in(scope))
    budget = spend.month_refusals_in(scope, now=now)
    held = supervision.holds_in(scope)
    live = live_rows(None)
    n = sum(len(cycle_waits(cycle, cycle.rounds, now)) for cycle in live)
    claimed = {c.claim for c in live if c.claim}
    running = {c.entity_id for c in live}
    for entity in _standing(scope, [*breaker, *budget]):
        n += len(_entity_items(entity, now, breaker=breaker, held=held, budget=budget, claimed=claimed,
                               running=running))  # fmt: skip
    n += _grant_pending().filter(expires_at__gt=now).count()  # ``_open``: an expiry is never empty
    n += _unread_failures().count()
    n += len(_forge_items(now))
    return n


def line(item: dict[str, Any]) -> str:
    """One item as the digest lists it: "decide · scenario:triage · <who acts and where> (until Nov 30, 14:05 UTC)"."""
    target = f"{item['targetKind']}:{item['targetId']}" if item.get("targetKind") else ""
    head = " · ".join(part for part in (item["gate"], target, item.get("clause") or "") if part)
    until = f" (until {when(item['until'])})" if item.get("until") else ""
    return f"{head} — {item['next']}{until}"


def digest(now: datetime | None = None) -> Notice | None:
    """Post the daily notice listing every wait on a person; None (nothing posted) when nothing waits.

    A digest posted in the last 20 hours is not posted again.
    """
    from hitl.actions import post_notice

    now = now or timezone.now()
    found = items(now)
    if not found:
        log.info("loop: the needs-you digest: nothing waits on a person; no notice")
        return None
    if Notice.objects.filter(producer=LOOP, kind=DIGEST_KIND, created_at__gt=now - DIGEST_GAP).exists():
        log.info("loop: the needs-you digest was posted in the last %s; not again", DIGEST_GAP)
        return None
    n = len(found)
    text = "\n".join(f"• {line(item)}" for item in found)
    notice = post_notice(
        producer=LOOP,
        kind=DIGEST_KIND,
        title=f"{n} need{'s' if n == 1 else ''} you",
        text=text,
        url=absolute(PAGE_PATH),
        subject="the loop",
    )
    log.info("loop: the needs-you digest listed %d waits on a person (notice %s)", n, notice.pk)
    return notice
