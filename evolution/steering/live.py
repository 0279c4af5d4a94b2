"""Every live cycle as a plain row of what its waits read: the fleet's rank, its page, loop_status and the
needs-you list and count all read the live cycles this way (issue 18).

A live cycle, its rounds and their cards are read in two statements as light rows (named tuples built by
position; namespaces where a reader names the cycle's entity afterwards), of the columns ``needs_you.cycle_waits``
and ``cycle_items`` (and ``core.due``) read: never a model row, never the cycles' JSON, a round's brief only as
whether it is written. A row costs a few microseconds where a model row with its prefetched rounds cost tens.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from evolution.models import Cycle
from grading.models import Entity
from singularity import written

#: What a wait names of an entity it does not read whole (a card's, a cycle's, a failure's): its target and name.
NAMED = ("id", "slug", "target_kind", "name")
#: The columns of a live cycle, its rounds and their cards that ``cycle_items`` (and ``core.due``) read, and
#: ``collect`` (the claim): the fleet's list reads no more of them (their JSON — window, frozen set, terms,
#: refusals, files — stays unread).
CYCLE_WAIT_FIELDS = (
    "id",
    "entity",
    "claim",
    "phase",
    "status",
    "started_at",
    "applied_at",
    "moved_at",
    "check_deadline",
    "merge_deadline",
    "next_poll_at",
    "watch_deadline",
)
ROUND_WAIT_FIELDS = (
    "id",
    "cycle",
    "number",
    "status",
    "brief",
    "card",
    "merge_gate",
    "pr_number",
    "pr_url",
    "merge_sha",
    "revert_pr_number",
    "revert_pr_url",
    "revert_opened_at",
    "revert_deadline",
    "revert_outcome",
    "revert_merge_gate",
    "apply_claimed_at",
    "analysis_beat_at",
)
CARD_WAIT_FIELDS = ("id", "kind", "status", "expires_at", "created_at")


def in_the_loop() -> QuerySet[Entity]:
    """The entities in the loop (loop on, present in the brain): the fleet's scope, named in the keys of the
    statements its reads compile once (``written.known_as``) without compiling it to be named."""
    return written.known_as(Entity.objects.filter(loop_enabled=True, present=True), "in the loop")


def named_entity(values: Any) -> SimpleNamespace:
    """An entity as a wait names it, from its ``NAMED`` columns in order: ``pk`` for its id."""
    pk, *rest = values
    return SimpleNamespace(pk=pk, **dict(zip(NAMED[1:], rest, strict=True)))


def plain_rounds(cycles: list[int] | QuerySet[Any], *, named: bool) -> dict[int, list[Any]]:
    """The rounds of ``cycles`` (ids, or a ``values("pk")`` subquery) by their cycle's id, by number, as plain rows:
    ``named``, of ``needs_you.ROUND_WAIT_FIELDS`` with their card a ``Card`` of ``CARD_WAIT_FIELDS`` (to build
    items); else of ``RANK_ROUND_FIELDS`` with their card of ``RANK_CARD_FIELDS`` (to count waits). One written-out
    statement (``ROUNDS``): ids are one array on Postgres (``cycles.among``), a subquery is read as written.

    A round's ``brief`` is whether it is written (``BRIEF_WRITTEN``), not the documents: the waits read no more.
    Each round is a named tuple (``_row_type``) of its columns (``cycle_id`` for its cycle) and ``card``: a row of
    the fleet's page for every live cycle, where a model row or a namespace built from a dict cost more than the
    read."""
    from evolution.core.cycles import among
    from hitl.models import Card

    fields = ROUND_WAIT_FIELDS if named else RANK_ROUND_FIELDS
    plain = tuple("cycle_id" if name == "cycle" else name for name in fields if name != "card")
    carded = CARD_WAIT_FIELDS if named else RANK_CARD_FIELDS
    read = _round_columns(connection.alias, connection.vendor, plain, carded)
    if isinstance(cycles, QuerySet):
        subquery, params = cycles.order_by().query.sql_with_params()
        which, params = f"IN ({subquery})", list(params)
    else:
        which, params = among(cycles)
    with connection.cursor() as cursor:
        cursor.execute(ROUNDS.format(columns=read.sql, cycles=which), params)
        rows = read.convert(cursor.fetchall())
    round_type, card_type = _row_type((*plain, "card")), _row_type(carded)
    split = len(plain)
    answer: dict[int, list[Any]] = {}
    cycle_at = plain.index("cycle_id")
    # A named card is built as ``Card.objects.only(*carded)`` builds it (``from_db``: its columns in the model's
    # order, the rest deferred), not by ``Card(...)``, which makes every other field's default (a random short id).
    placed = _model_order(Card, carded)
    for values in rows:
        if values[-1] is None:
            card = None
        elif named:
            card = Card.from_db(connection.alias, carded, [values[split + at] for at in placed])
        else:
            card = card_type._make(values[split:-1])
        answer.setdefault(values[cycle_at], []).append(round_type(*values[:split], card))
    return answer


@functools.cache
def _model_order(model: Any, names: tuple[str, ...]) -> list[int]:
    """The places in ``names`` of ``model``'s concrete fields that ``names`` holds, in the model's order
    (``Model.from_db`` reads its values so)."""
    return [names.index(f.attname) for f in model._meta.concrete_fields if f.attname in names]


@functools.lru_cache(maxsize=16)
def _round_columns(alias: str, vendor: str, plain: tuple[str, ...], carded: tuple[str, ...]) -> written.Columns:
    """The select list of ``ROUNDS`` (``plain_rounds``): built once a process for each database and shape."""
    from evolution.models import Round
    from hitl.models import Card

    return written.columns(
        [("r", Round, "cycle" if name == "cycle_id" else name) for name in plain]
        + [("k", Card, name) for name in carded]
        + [("r", Round, "card")],
        instead={"brief": BRIEF_WRITTEN.get(vendor, BRIEF_WRITTEN["sqlite"])},
    )


#: Whether a round's brief is written (not the empty document a round starts with, ``Round.brief``'s default):
#: all that is read of it (``core.due``: an analysis is due while it is empty), not the documents themselves.
BRIEF_WRITTEN = {
    "postgresql": "COALESCE(r.brief <> '{}'::jsonb, FALSE)",
    "sqlite": "COALESCE(json(r.brief) <> '{}', 0)",
}
#: Rounds of some cycles (``{cycles}``) with their cards, by cycle and number (``plain_rounds``).
ROUNDS = """
SELECT {columns} FROM evolution_round r LEFT OUTER JOIN hitl_card k ON k.id = r.card_id
WHERE r.cycle_id {cycles} ORDER BY r.cycle_id, r.number
"""


def _namespace(names: tuple[str, ...]) -> Any:
    """A row of ``names`` built by position as a namespace: one that is written after it is read."""
    return lambda *values: SimpleNamespace(**dict(zip(names, values, strict=True)))


@functools.cache
def _row_type(names: tuple[str, ...]) -> type[Any]:
    """A light row of ``names``: a named tuple, built by position from a statement's row (read-only: what the
    waits and the rank read of a live cycle, a round or a card is only ever read)."""
    return namedtuple("Row", names)  # type: ignore[return-value]  # noqa: PYI024


#: What the fleet's page reads of every live cycle, its rounds and their cards (``live_rows``): what their waits
#: read (``needs_you.cycle_waits``, ``core.due``) and its rank (the claim), not what only an item says (when the
#: change was applied, since when a card or a revert waits, the PRs' addresses): each instant read costs a parse.
RANK_CYCLE_FIELDS = tuple(name for name in CYCLE_WAIT_FIELDS if name not in ("started_at", "applied_at"))
RANK_ROUND_FIELDS = tuple(name for name in ROUND_WAIT_FIELDS if name not in ("pr_url", "revert_pr_url",
                                                                                       "revert_opened_at"))  # fmt: skip
RANK_CARD_FIELDS = ("id", "kind", "status", "expires_at")


def live_rows(scope: QuerySet[Entity] | None, *, named: bool = False) -> list[Any]:
    """Every live cycle (of ``scope``'s entities; None: all), oldest first, as a plain row of the columns its
    waits read (``RANK_CYCLE_FIELDS``, ``pk`` for its id) and ``unready`` (its window said it is not ready:
    ``rank_state``), with ``rounds`` by number, each a plain row of ``RANK_ROUND_FIELDS`` with its ``card`` (of
    ``RANK_CARD_FIELDS``, or None): two statements, no model row, none of the cycles' JSON.

    What the fleet reads of every live cycle, to rank and count: its rows read whole the cycles they show
    (``live_cycles``). ``named`` (to build their items: ``needs_you.cycle_items``) reads what an item says too
    (``needs_you.CYCLE_WAIT_FIELDS``, ``ROUND_WAIT_FIELDS``), gives each cycle its ``entity`` (a plain row of
    ``needs_you.NAMED``, in the same statement) and each card as a ``Card`` of ``CARD_WAIT_FIELDS``.

    Each row is a named tuple (``_row_type``): read, never written (its ``rounds`` a list filled here); a
    ``named`` one a namespace, whose ``entity`` the needs-you list replaces with the entity read whole.
    """
    from django.db.models import BooleanField, Case, Value, When

    fields = CYCLE_WAIT_FIELDS if named else RANK_CYCLE_FIELDS
    columns = tuple(f"{name}_id" if name == "entity" else name for name in fields)
    names = [f"entity__{name}" for name in NAMED] if named else []
    keys = ("pk", *columns, *(("entity",) if named else ()), "unready", "rounds")
    row_type = _row_type(keys) if not named else _namespace(keys)  # ``needs_you.collect`` names a named row's entity
    width = len(columns)

    def live() -> QuerySet[Cycle]:
        cycles = Cycle.objects.exclude(phase=Cycle.Phase.SETTLED)
        return cycles if scope is None else cycles.filter(entity__in=scope.values("pk"))

    def statement() -> QuerySet[Any]:
        cycles = live()
        unready = Case(When(window__ready=False, then=Value(True)), default=Value(False), output_field=BooleanField())
        return cycles.annotate(unready=unready).order_by("started_at", "id").values_list(*columns, *names, "unready")

    scoped = written.key_of(scope) if scope is not None else None
    read: list[Any] = []
    for values in written.rows_compiled_once(("live_rows", named, scoped), statement):
        entity = (named_entity(values[width:-1]),) if named else ()
        read.append(row_type(values[0], *values[:width], *entity, values[-1], []))
    if not read:
        return []
    ids = [row.pk for row in read]
    rounds = plain_rounds(ids if connection.vendor == "postgresql" else live().values("pk"), named=named)
    for cycle in read:
        cycle.rounds.extend(rounds.get(cycle.pk, ()))
    return read
