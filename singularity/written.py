"""Written-out reads: a statement whose text is fixed, its values passed through each field's own conversion.

The hot reads of the loop and the fleet (a batch of landings, every live cycle of the fleet's page) are written
out rather than built by the ORM: building their statements and their model rows cost more than running them.
What the ORM would still have done for them is converting each value the database hands back (SQLite's
instants arrive as text, a JSON column as text everywhere): ``Columns`` does that, for the columns that need it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Field, Model, QuerySet


@dataclass(frozen=True)
class Columns:
    """The select list of a written-out statement (``sql``) and how to convert what it reads (``convert``)."""

    sql: str
    #: (the value's place in a row, its column, the conversions it goes through): only the columns that have one.
    steps: tuple[tuple[int, Any, tuple[Any, ...]], ...]

    def convert(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` as the ORM would have handed their values: each row a tuple, converted where a column asks."""
        if not self.steps:
            return rows
        converted = []
        for row in rows:
            values = list(row)
            for index, column, steps in self.steps:
                for step in steps:
                    values[index] = step(values[index], column, connection)
            converted.append(tuple(values))
        return converted


def columns(
    fields: list[tuple[str, type[Model], str]], *, extra: tuple[str, ...] = (), instead: dict[str, str] | None = None
) -> Columns:
    """The select list of ``fields``, each (a table's alias in the statement, its model, a field's name), then
    ``extra`` (expressions read as the database gives them), with the conversions of the fields that need one.

    ``instead`` reads an expression in a field's place (by the field's name), as the database gives it: what a
    reader asks of a column without reading it whole (whether a JSON document is empty, say)."""
    quote = connection.ops.quote_name
    parts, steps = [], []
    for index, (alias, model, name) in enumerate(fields):
        if instead and name in instead:
            parts.append(instead[name])
            continue
        field: Field[Any, Any] = model._meta.get_field(name)  # type: ignore[assignment]
        parts.append(f"{alias}.{quote(field.column)}")
        column = field.get_col(model._meta.db_table)
        convert = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if convert:
            steps.append((index, column, tuple(_any_connection(step) for step in convert)))
    return Columns(", ".join([*parts, *extra]), tuple(steps))


# --- Statements compiled once a process ----------------------------------------------------------------------

#: How many compiled statements a process keeps (the oldest is dropped first): a key that names a page's ids
#: (``fleet.with_months``) adds one for each page read, most keys one in all.
KEEP = 512


@dataclass(frozen=True)
class Compiled:
    """A ``values_list`` statement as the ORM compiled it: its text, its parameters, how wide a row is, and the
    conversions of the columns that need one (as ``Columns.steps``); ``sql`` None: the ORM's empty result
    (``EmptyResultSet``), read without a statement."""

    sql: str | None
    params: tuple[Any, ...]
    width: int
    steps: tuple[tuple[int, Any, tuple[Any, ...]], ...]
    #: A model queryset's rows to model rows (``objects_compiled_once``), as its iteration builds them.
    make: Callable[[list[tuple[Any, ...]]], list[Any]] | None = None


_compiled: OrderedDict[tuple[Any, ...], Compiled] = OrderedDict()

#: When True (the test suite sets it: tests/conftest.py), every call that finds its statement compiled already
#: compiles ``build()`` afresh too and refuses a key that names two different statements: a key missing one of
#: the inputs (an instant, an id, a scope) is caught by the test that changes that input, not by a person
#: reading a stale page.
CHECK_KEYS = False


class KeyTooNarrow(AssertionError):
    """Two calls with one key built different statements: the key misses something ``build`` reads."""


def rows_compiled_once(key: tuple[Any, ...], build: Callable[[], QuerySet[Any]]) -> list[tuple[Any, ...]]:
    """``list(build())`` of a ``values_list`` queryset (tuples), its statement built and compiled by the ORM once
    a process for ``key`` and run as written after that: what building and compiling a short statement costs
    (about a millisecond of CPU each) is most of what a fleet page's reads cost.

    Danger: ``key`` must name everything ``build`` reads that can change between calls (a scope: ``key_of``; ids;
    a search's words; an instant). Two calls with one key run the same statement with the same parameters.
    """
    return _rows(_compiled_for(("values", *key), build, models=False))


def objects_compiled_once(key: tuple[Any, ...], build: Callable[[], QuerySet[Any]]) -> list[Any]:
    """``list(build())`` of a model queryset (its ``select_related``, ``only`` / ``defer`` and annotations too),
    compiled once a process for ``key`` as ``rows_compiled_once`` is (the same danger: ``key`` names all that
    ``build`` reads), each row built into model rows as the queryset's own iteration builds them."""
    compiled = _compiled_for(("objects", *key), build, models=True)
    assert compiled.make is not None
    return compiled.make(_rows(compiled))


def _compiled_for(key: tuple[Any, ...], build: Callable[[], QuerySet[Any]], *, models: bool) -> Compiled:
    memo = (connection.alias, connection.vendor, *key)
    compiled = _compiled.get(memo)
    if compiled is None:
        compiled = _compile(build(), models=models)
        _compiled[memo] = compiled
        while len(_compiled) > KEEP:
            _compiled.popitem(last=False)
    elif CHECK_KEYS:
        fresh = _compile(build(), models=models)
        if fresh.sql != compiled.sql or not _same_params(fresh.params, compiled.params):
            raise KeyTooNarrow(
                f"the key {key!r} named two statements: {compiled.sql!r} with {compiled.params!r}, "
                f"then {fresh.sql!r} with {fresh.params!r}; name what differs in the key"
            )
    return compiled


def _same_params(one: tuple[Any, ...], other: tuple[Any, ...]) -> bool:
    """Equal parameters; a driver's wrapper that compares by identity (psycopg's ``Jsonb``) by what it wraps."""
    return len(one) == len(other) and all(
        a == b or (type(a) is type(b) and repr(a) == repr(b)) for a, b in zip(one, other, strict=True)
    )


def _rows(compiled: Compiled) -> list[tuple[Any, ...]]:
    """What ``compiled`` reads now, each row converted as the ORM converts it."""
    if compiled.sql is None:
        return []
    with connection.cursor() as cursor:
        cursor.execute(compiled.sql, compiled.params)
        fetched = cursor.fetchall()
    width = compiled.width
    if not compiled.steps:
        return [tuple(row[:width]) if len(row) != width else tuple(row) for row in fetched]
    answer = []
    for row in fetched:
        values = list(row[:width])
        for index, column, steps in compiled.steps:
            for step in steps:
                values[index] = step(values[index], column, connection)
        answer.append(tuple(values))
    return answer


def _compile(queryset: QuerySet[Any], *, models: bool) -> Compiled:
    """``queryset``'s statement and conversions, as its iteration would have compiled them: a ``values_list``
    (tuples) or, ``models``, a model queryset with no prefetch and no known related rows."""
    from django.core.exceptions import EmptyResultSet
    from django.db.models.query import ModelIterable, ValuesListIterable

    kind = queryset._iterable_class  # type: ignore[attr-defined]
    if models and (kind is not ModelIterable or queryset._prefetch_related_lookups or queryset._known_related_objects):  # type: ignore[attr-defined]
        raise TypeError("objects_compiled_once reads a plain model queryset (no prefetch)")
    if not models and kind is not ValuesListIterable:
        raise TypeError("rows_compiled_once reads a values_list(...) queryset (tuples)")
    compiler = queryset.query.get_compiler(using=queryset.db)
    try:
        sql, params = compiler.as_sql()
    except EmptyResultSet:
        return Compiled(None, (), 0, (), (lambda rows: []) if models else None)
    width = compiler.col_count
    fields = [s[0] for s in compiler.select[:width]]
    if compiler.has_composite_fields(fields):
        raise TypeError("a statement compiled once reads no composite field")
    converters = compiler.get_converters(fields)
    steps = tuple(
        (index, expression, tuple(_any_connection(step) for step in convs))
        for index, (convs, expression) in sorted(converters.items())
    )
    return Compiled(sql, tuple(params), width, steps, _maker(compiler, queryset.db) if models else None)


def _maker(compiler: Any, db: str) -> Callable[[list[tuple[Any, ...]]], list[Any]]:
    """Model rows from converted rows, as Django's ``ModelIterable`` builds them (``select_related`` rows by its
    populators, annotations set by name)."""
    from django.db.models.query import get_related_populators

    select, klass_info, annotations = compiler.select, compiler.klass_info, compiler.annotation_col_map
    model = klass_info["model"]
    start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    names = [f[0].target.attname for f in select[start:end]]
    populators = get_related_populators(klass_info, select, db)
    placed = list((annotations or {}).items())

    def make(rows: list[tuple[Any, ...]]) -> list[Any]:
        answer = []
        for row in rows:
            obj = model.from_db(db, names, row[start:end])
            for populator in populators:
                populator.populate(row, obj)
            for name, at in placed:
                setattr(obj, name, row[at])
            answer.append(obj)
        return answer

    return make


def _any_connection(step: Any) -> Any:
    """A conversion kept past the call that made it: one bound to the backend's operations of the connection it
    was made on (each thread has its own) is called on the operations of the connection it is given instead."""
    owner = getattr(step, "__self__", None)
    if owner is None or owner is not getattr(getattr(owner, "connection", None), "ops", None):
        return step
    method = step.__func__
    return lambda value, expression, conn: method(conn.ops, value, expression, conn)


def key_of(queryset: QuerySet[Any]) -> tuple[str, tuple[Any, ...]]:
    """What names ``queryset``'s rows in a key of ``rows_compiled_once``: its statement and parameters, compiled
    once for the queryset object (a scope handed down one page's reads is compiled once, not once a read)."""
    from django.core.exceptions import EmptyResultSet

    known = queryset.__dict__.get("_written_key")
    if known is None:
        try:
            sql, params = queryset.query.sql_with_params()
        except EmptyResultSet:
            sql, params = "", ()  # no row whatever it is asked
        known = (sql, tuple(params))
        queryset.__dict__["_written_key"] = known
    return known  # type: ignore[no-any-return]


def pks_of(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset.values("pk")`` (a subquery of its ids), named in a key of ``rows_compiled_once`` by
    ``queryset``'s own key: not compiled again to be named."""
    pks = queryset.values("pk")
    pks.__dict__["_written_key"] = ("pks", key_of(queryset))
    return pks


def known_as(queryset: QuerySet[Any], *key: Any) -> QuerySet[Any]:
    """``queryset``, named in keys of ``rows_compiled_once`` by ``key`` instead of its compiled statement
    (``key_of``). Danger: ``key`` must name everything that makes its rows (the filter's values too)."""
    queryset.__dict__["_written_key"] = ("known as", *key)
    return queryset
