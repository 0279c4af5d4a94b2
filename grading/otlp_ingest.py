"""Receiving OTLP spans: which entity each trace is of, the pending spans kept, late spans attached to their run.

``ingest(received, rejected, user)`` takes what ``grading.otlp_decode`` read
from one export request. Each trace names its entity (``entity_of``): a
span's ``singularity.entity`` (``scenario:triage``, or the plain slug where
only one entity has it), else its resource's, else ``service.name``; a trace
already received keeps the entity it was first given. A trace naming no
entity of the brain is refused whole — nothing of it is kept but a count
under the name in ``UnknownAgent``, for the Entities page. The rest is
written in one transaction: a pending ``OtlpTrace`` per new trace, each span
once as its protobuf bytes (``OtlpSpan`` is unique by trace and span id, and a
span its trace holds already is left out, so a retried export doubles
nothing), and a trace's root span (no parent) marks it due for assembly
(``grading.otlp_assemble``). A span of a trace already assembled is appended
to its run's trace, once. A trace that would go over ``TRACE_MAX_SPANS``
refuses the request whole (``TraceTooLarge``, a 413).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, router, transaction
from django.db.models import F, Q
from django.utils import timezone

from grading import spans
from grading.executions import storable
from grading.grade import json_rows, recordset
from grading.models import Entity, Execution, OtlpSpan, OtlpTrace, UnknownAgent
from grading.otlp_decode import ENTITY_ATTRIBUTE, SERVICE_NAME, Received, Rejected

_SLUG_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


class TraceTooLarge(Exception):
    """A trace of the request would hold more spans than ``TRACE_MAX_SPANS``; the message names it."""


@dataclass
class Outcome:
    """What one export request did: spans kept (or already kept), spans refused and the first reasons."""

    accepted: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def refuse(self, count: int, reason: str) -> None:
        self.rejected += count
        if reason not in self.reasons:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str:
        shown = self.reasons[:5]
        more = len(self.reasons) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def file_to_add(name: str) -> str:
    """The brain file that would make ``name`` an entity: ``features/<slug>/<slug>.scenario.md`` (or heartbeat)."""
    kind, _, slug = name.rpartition(":")
    slug = _SLUG_CHARS.sub("-", slug).strip("-_")[:100] or "my-agent"
    suffix = "heartbeat" if kind == Entity.TargetKind.HEARTBEAT else "agent" if kind == "role" else "scenario"
    return f"features/{slug}/{slug}.{suffix}.md"


def unknown_reason(trace_id: str, name: str, why: str = "") -> str:
    """The refusal of a trace naming no entity: the name, and the file that would make it one."""
    if not name:
        return (
            f"trace {trace_id}: names no entity; set the resource or span attribute {ENTITY_ATTRIBUTE} "
            f"(e.g. scenario:triage) or {SERVICE_NAME} to an entity of the brain"
        )
    return (
        f"trace {trace_id}: {name!r} {why or 'names no entity in the brain'}; add {file_to_add(name)} to the brain "
        f"(or set {ENTITY_ATTRIBUTE} to an entity it has)"
    )


def resolve(names: set[str]) -> dict[str, Entity | str]:
    """Return each name's entity, or why it names none: ``kind:slug`` exactly, a plain slug when only one has it."""
    query = Q()
    for name in names:
        kind, colon, slug = name.partition(":")
        query |= Q(target_kind=kind, slug=slug) if colon else Q(slug=name)
    found: dict[str, Entity | str] = {}
    if not names:
        return found
    entities = list(Entity.objects.filter(query, present=True))
    for name in names:
        kind, colon, slug = name.partition(":")
        if colon:
            matches = [e for e in entities if e.target_kind == kind and e.slug == slug]
        else:
            matches = [e for e in entities if e.slug == name]
        if len(matches) == 1:
            found[name] = matches[0]
        elif matches:
            named = ", ".join(sorted(str(e) for e in matches))
            found[name] = f"names more than one entity ({named}); name one as <kind>:<slug>"
        else:
            found[name] = "names no entity in the brain"
    return found


def entity_of(spans_in: list[Received]) -> tuple[str, str]:
    """Return the name a trace's spans give their entity (the root's first), and the service name."""
    ordered = sorted(spans_in, key=lambda r: r.parent_id is not None)
    named = next((r.entity for r in ordered if r.entity), "")
    service = next((r.service for r in ordered if r.service), "")
    return named, service


def _note_unknown(counts: dict[str, int]) -> None:
    """Count the spans of agents naming no entity (one row per name, first and last seen)."""
    now = timezone.now()
    for name, count in counts.items():
        name = name[:200]
        updated = UnknownAgent.objects.filter(name=name).update(span_count=F("span_count") + count, last_seen=now)
        if not updated:
            UnknownAgent.objects.bulk_create(
                [UnknownAgent(name=name, span_count=count, first_seen=now, last_seen=now)], ignore_conflicts=True
            )


def ingest(received: list[Received], rejected: list[Rejected], *, user: Any) -> Outcome:
    """Keep the spans of one export request (see the module); return what was kept and what refused, and why.

    A handful of statements whatever the request's size: the traces already
    known, the entities named, then in one transaction the new traces (one
    insert), the request's traces locked, the spans they hold (one select),
    the spans (one ``COPY``) and the roots that came after their children.
    """
    outcome = Outcome()
    for refusal in rejected:
        outcome.refuse(1, refusal.reason)
    by_trace: dict[str, dict[str, Received]] = {}
    for item in received:
        by_trace.setdefault(item.trace_id, {})[item.span_id] = item  # a span repeated keeps its last
    if not by_trace:
        return outcome
    known = set(OtlpTrace.objects.filter(trace_id__in=list(by_trace)).values_list("trace_id", flat=True))
    names: dict[str, str] = {}
    for trace_id, items in by_trace.items():
        if trace_id not in known:
            named, service = entity_of(list(items.values()))
            names[trace_id] = named or service
    entities = resolve({name for name in names.values() if name})
    unknown: dict[str, int] = {}
    accepted: dict[str, tuple[Entity | None, dict[str, Received]]] = {}
    for trace_id, items in by_trace.items():
        if trace_id in known:
            accepted[trace_id] = (None, items)
            continue
        name = names[trace_id]
        entity = entities.get(name) if name else None
        if isinstance(entity, Entity) and not entity.run_refusal():
            accepted[trace_id] = (entity, items)
            continue
        why = entity.run_refusal() if isinstance(entity, Entity) else entity or ""
        outcome.refuse(len(items), unknown_reason(trace_id, name, why))
        if name and not isinstance(entity, Entity):
            unknown[name] = unknown.get(name, 0) + len(items)
    now = timezone.now()
    with transaction.atomic():
        if unknown:
            _note_unknown(unknown)
        person = _person(user)
        # In trace id order: two exports inserting the same new traces wait on each other in one order, never both.
        new = sorted(
            (trace_id, entity.pk, now, person.pk if person else None, _root_of(items) or "")
            for trace_id, (entity, items) in accepted.items()
            if trace_id not in known and entity is not None
        )
        if new:
            _insert_traces(new)
        # Locked, in one order (no deadlock between two exports): the sweep skips a trace held here, and a trace
        # it assembled meanwhile is seen assembled, so its spans attach to the run instead of waiting forever. The
        # lock also orders two exports of one trace: each sees the spans the other kept (a retry doubles nothing).
        locked = {
            row[1]: Locked(*row)
            for row in OtlpTrace.objects.select_for_update()
            .filter(trace_id__in=list(accepted))
            .order_by("pk")
            .values_list("pk", "trace_id", "assembled_at", "execution_id", "root_span_id", "root_received_at")
        }
        pending = [trace.pk for trace in locked.values() if trace.assembled_at is None]
        held: dict[int, set[str]] = {}
        if pending:
            for trace_pk, span_id in OtlpSpan.objects.filter(trace_id__in=pending).values_list("trace_id", "span_id"):
                held.setdefault(trace_pk, set()).add(span_id)
        _check_span_limit(accepted, locked, held)
        rows: list[tuple[int, str, bytes]] = []
        rooted: list[tuple[int, str]] = []
        for trace_id, (_, items) in accepted.items():
            trace = locked[trace_id]
            if trace.assembled_at is not None:
                if trace.execution_id is not None:
                    attach_late(trace, [item.stored() for item in items.values()])
                continue
            has = held.get(trace.pk, set())
            rows.extend((trace.pk, span_id, item.raw) for span_id, item in items.items() if span_id not in has)
            root = _root_of(items)
            if root is not None and trace.root_received_at is None:
                rooted.append((trace.pk, root))  # the root came after its children: the trace is due from now
        if rows:
            insert_spans(rows)
        if rooted:
            _mark_rooted(rooted, now)
        outcome.accepted = sum(len(items) for _, items in accepted.values())
    return outcome


@dataclass
class Locked:
    """A trace of the request as its locked row says."""

    pk: int
    trace_id: str
    assembled_at: Any
    execution_id: int | None
    root_span_id: str
    root_received_at: Any


def _insert_traces(new: list[tuple[str, int, Any, int | None, str]]) -> None:
    """Insert the request's new traces (trace id, entity, now, person, root span id or ""), one already there kept."""
    objects = [
        OtlpTrace(
            trace_id=trace_id,
            entity_id=entity_pk,
            first_received_at=now,
            started_by_id=person_pk,
            root_span_id=root,
            root_received_at=now if root else None,
        )
        for trace_id, entity_pk, now, person_pk, root in new
    ]
    connection = connections[router.db_for_write(OtlpTrace)]
    if connection.vendor != "postgresql":
        OtlpTrace.objects.bulk_create(objects, ignore_conflicts=True)
        return
    quote = connection.ops.quote_name
    fields = [
        OtlpTrace._meta.get_field(name)
        for name in ("trace_id", "entity", "first_received_at", "started_by", "root_span_id", "root_received_at")
    ]
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join(f"v.{quote(f.column)}" for f in fields)
    sql = (
        f"INSERT INTO {quote(OtlpTrace._meta.db_table)} ({columns}) SELECT {values} "
        f"FROM {recordset(connection, fields)} ON CONFLICT DO NOTHING"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [json_rows(objects, fields)])


def _mark_rooted(rooted: list[tuple[int, str]], now: Any) -> None:
    """Note each trace's root span, arrived now: the trace is due for assembly from now."""
    for trace_pk, root in rooted:  # rare (a root later than its children, in another request): one each
        OtlpTrace.objects.filter(pk=trace_pk, root_received_at=None).update(root_span_id=root, root_received_at=now)


def insert_spans(rows: list[tuple[int, str, bytes]]) -> None:
    """Insert pending spans (trace, span id, protobuf bytes), none already kept: on PostgreSQL one binary ``COPY``.

    The caller holds the traces' rows locked and has left out the spans they
    hold, so nothing conflicts (the unique constraint still guards it). A
    ``COPY`` costs the database a third of an ``INSERT … SELECT … ON
    CONFLICT`` of the same rows, and the driver sends the bytes as they are.
    """
    connection = connections[router.db_for_write(OtlpSpan)]
    if connection.vendor != "postgresql":
        OtlpSpan.objects.bulk_create([OtlpSpan(trace_id=t, span_id=s, raw=r) for t, s, r in rows])
        return
    quote = connection.ops.quote_name
    fields = [OtlpSpan._meta.get_field(name) for name in ("trace", "span_id", "raw")]
    sql = f"COPY {quote(OtlpSpan._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) FROM STDIN (FORMAT BINARY)"
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        copy.set_types(["int8", "varchar", "bytea"])
        for row in rows:
            copy.write_row(row)
    if connection.queries_logged:  # counted with the other statements (the debug cursor does not see a COPY)
        connection.queries_log.append(
            {"sql": f"{sql} -- {len(rows)} rows", "time": f"{time.monotonic() - started:.3f}"}
        )


def _root_of(items: dict[str, Received]) -> str | None:
    """The id of the trace's root span (no parent) among ``items``, or None."""
    return next((span_id for span_id, item in items.items() if item.parent_id is None), None)


def _person(user: Any) -> Any:
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def _check_span_limit(
    accepted: dict[str, tuple[Entity | None, dict[str, Received]]],
    locked: dict[str, Locked],
    held: dict[int, set[str]],
) -> None:
    """Raise ``TraceTooLarge`` when a trace of the request would pass ``TRACE_MAX_SPANS`` with what it has.

    Spans already kept (a retry) are not counted twice.
    """
    limit = spans.max_spans()
    for trace_id, (_, items) in accepted.items():
        trace = locked[trace_id]
        has: set[str] = set()
        if trace.assembled_at is None:
            has = held.get(trace.pk, set())
        elif trace.execution_id is not None:
            stored = Execution.objects.values_list("trace", flat=True).get(pk=trace.execution_id) or []
            has = {str(span.get("spanId")) for span in stored if isinstance(span, dict)}
        total = len(has | set(items))
        if total > limit:
            raise TraceTooLarge(
                f"trace {trace_id}: {total:,} spans, over the limit of {limit:,} spans a run (TRACE_MAX_SPANS)"
            )


def attach_late(trace: OtlpTrace | Locked, late: list[dict[str, Any]]) -> int:
    """Append spans that arrived after their trace became a run to the run's trace, each once; return how many.

    The root span is the run itself: a late copy of it is not added (unless
    the run was closed without it, when it arrives as any other span).
    """
    execution = Execution.objects.select_for_update().only("pk", "trace").get(pk=trace.execution_id)
    stored = list(execution.trace or [])
    have = {str(span.get("spanId")) for span in stored if isinstance(span, dict)}
    fresh = [span for span in late if span["spanId"] not in have and span["spanId"] != trace.root_span_id]
    ids = have | {span["spanId"] for span in fresh}
    added = [tree_span(span, ids) for span in fresh]
    added = storable({"trace": added})["trace"]  # as the run was built (``validate_report``): U+FFFD for a NUL
    if added:
        Execution.objects.filter(pk=execution.pk).update(trace=stored + added)
    return len(added)


def tree_span(span: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """Return a span as the run's tree holds it: one whose parent is not in the tree (the root: the run) is a root."""
    parent = span["parentSpanId"]
    if parent is not None and parent not in ids:
        return {**span, "parentSpanId": None}
    return span
