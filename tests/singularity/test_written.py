"""Statements compiled once a process (``singularity.written``): the rows are the queryset's own, read afresh on
every call, converted as the ORM converts them; only the statement's building and compiling is kept."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Value
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle, WaitingWindow
from grading.models import Entity
from singularity import written
from tests.evolution.page_helpers import in_loop, make_cycle

pytestmark = pytest.mark.django_db


def cycles_of(slugs):
    return (
        Cycle.objects.filter(entity__slug__in=slugs)
        .order_by("id")
        .values_list("id", "entity__slug", "spent_usd", "started_at", "window")
    )


def test_the_rows_are_the_querysets_converted_and_read_afresh_each_call(monkeypatch):
    monkeypatch.setattr(written, "CHECK_KEYS", False)  # as in production: the statement is not built again
    first = make_cycle(in_loop("wr-a"), spent_usd=Decimal("1.234567"), window={"ready": False})
    key = ("test-cycles", "wr-a", "wr-b")
    assert written.rows_compiled_once(key, lambda: cycles_of(["wr-a", "wr-b"])) == list(cycles_of(["wr-a", "wr-b"]))
    (row,) = written.rows_compiled_once(key, lambda: cycles_of(["wr-a", "wr-b"]))
    assert row == (first.pk, "wr-a", Decimal("1.234567"), first.started_at, {"ready": False})  # exact, aware, JSON
    second = make_cycle(in_loop("wr-b"), spent_usd=Decimal("0.5"))
    again = written.rows_compiled_once(key, lambda: pytest.fail("compiled once: not built again"))
    assert [r[0] for r in again] == [first.pk, second.pk]  # the statement runs again: the new row is read
    assert again == list(cycles_of(["wr-a", "wr-b"]))


def test_a_key_that_differs_builds_its_own_statement():
    make_cycle(in_loop("wr-c"))
    make_cycle(in_loop("wr-d"))
    assert [r[1] for r in written.rows_compiled_once(("test-one", "wr-c"), lambda: cycles_of(["wr-c"]))] == ["wr-c"]
    assert [r[1] for r in written.rows_compiled_once(("test-one", "wr-d"), lambda: cycles_of(["wr-d"]))] == ["wr-d"]


def test_under_the_tests_a_key_that_misses_an_input_is_refused():
    assert written.CHECK_KEYS  # tests/conftest.py: every test's compiled-once reads are checked
    make_cycle(in_loop("wr-e"))
    written.rows_compiled_once(("test-narrow",), lambda: cycles_of(["wr-e"]))
    with pytest.raises(written.KeyTooNarrow, match="test-narrow"):
        written.rows_compiled_once(("test-narrow",), lambda: cycles_of(["wr-f"]))  # the slug is not in the key
    written.rows_compiled_once(("test-narrow",), lambda: cycles_of(["wr-e"]))  # the same statement: read


def test_a_statement_the_orm_knows_is_empty_runs_no_query():
    with CaptureQueriesContext(connection) as read:
        got = written.rows_compiled_once(("test-empty",), lambda: Entity.objects.filter(pk__in=[]).values_list("pk"))
    assert got == []
    assert len(read.captured_queries) == 0


def test_model_rows_are_built_as_the_querysets_with_their_related_row_deferred_columns_and_annotations():
    entity = in_loop("wr-e")
    WaitingWindow.objects.create(entity=entity, have=2, need=5, unit="runs", moved_at=timezone.now())
    in_loop("wr-f")

    def statement():
        return (
            Entity.objects.filter(slug__in=["wr-e", "wr-f"])
            .select_related("waiting_window")
            .defer("body", "description")
            .annotate(marked=Value(7))
            .order_by("slug")
        )

    got = written.objects_compiled_once(("test-entities",), statement)
    again = written.objects_compiled_once(("test-entities",), statement)
    expected = list(statement())
    for rows in (got, again):
        assert [e.pk for e in rows] == [e.pk for e in expected]
        assert [e.marked for e in rows] == [7, 7]
        assert rows[0].get_deferred_fields() == expected[0].get_deferred_fields() == {"body", "description"}
        assert rows[0].terms == expected[0].terms
    with CaptureQueriesContext(connection) as read:
        assert (got[0].waiting_window.have, got[0].waiting_window.need) == (2, 5)  # read with the row
        assert not hasattr(got[1], "waiting_window") or got[1].waiting_window is None
    assert len(read.captured_queries) == 0
    assert got[0] is not again[0]  # rows are built each call, never shared


def test_it_refuses_what_it_does_not_read_as_the_orm_does():
    with pytest.raises(TypeError):
        written.rows_compiled_once(("test-dicts",), lambda: Entity.objects.values("pk"))
    with pytest.raises(TypeError):
        written.objects_compiled_once(("test-prefetch",), lambda: Entity.objects.prefetch_related("executions"))


def test_a_scope_is_named_by_its_statement_and_its_ids_by_its_own_name():
    on = Entity.objects.filter(loop_enabled=True, present=True)
    assert written.key_of(on) == written.key_of(Entity.objects.filter(loop_enabled=True, present=True))
    assert written.key_of(on) != written.key_of(on.filter(slug__icontains="x"))
    assert written.key_of(Entity.objects.filter(pk__in=[])) == ("", ())  # the ORM's empty result, named
    assert written.key_of(written.pks_of(on)) == ("pks", written.key_of(on))
    assert list(written.pks_of(on)) == list(on.values("pk"))


def test_a_conversion_kept_past_its_call_runs_on_the_connection_it_is_handed():
    """A compiled statement outlives the thread that compiled it: a conversion bound to the backend operations of
    that thread's connection is called on the operations of the connection reading the rows now."""

    class Ops:
        def __init__(self, connection):
            self.connection = connection

        def convert(self, value, expression, connection):
            return (self.connection.name, value)

    class Connection:
        def __init__(self, name):
            self.name = name
            self.ops = Ops(self)

    compiled_on, read_on = Connection("compiled"), Connection("reading")
    assert written._any_connection(compiled_on.ops.convert)(1, None, read_on) == ("reading", 1)
    field = Entity._meta.get_field("terms")
    assert written._any_connection(field.from_db_value) == field.from_db_value  # a field's own: kept as it is
