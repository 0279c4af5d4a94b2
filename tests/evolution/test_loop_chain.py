"""The loop's action log and supervision log are hash-chained like the being's journal (issue 34): every row
carries the hash of the row before it and its own, and ``manage.py loop verify`` names the first row whose
chain breaks — an edited reason, a deleted row — or says both logs are whole (exit 0).
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from evolution.core import chain
from evolution.models import ActionLog, Supervision
from evolution.steering import supervision
from tests.concurrency import each_at_once
from tests.evolution.loop_helpers import looped


def verify() -> str:
    out = StringIO()
    call_command("loop", "verify", stdout=out)
    return out.getvalue()


def _moves(entity, n: int = 3) -> None:
    for i in range(n):
        supervision.hold(entity, actor="alice", reason=f"hold {i}")
        supervision.release(entity, actor="alice", reason=f"release {i}")


@pytest.mark.django_db
def test_every_row_links_to_the_one_before_and_both_logs_verify_whole():
    _moves(looped())
    rows = list(Supervision.objects.order_by("id"))
    assert rows[0].prev_hash == "" and all(len(r.hash) == 64 for r in rows)
    assert [r.prev_hash for r in rows[1:]] == [r.hash for r in rows[:-1]]
    assert rows[-1].hash == chain.head(Supervision)
    out = verify()
    assert "action log: 6 entries, chain whole" in out and "supervision log: 6 entries, chain whole" in out


@pytest.mark.django_db
def test_an_edited_reason_is_named_by_its_row():
    _moves(looped())
    edited = Supervision.objects.order_by("id")[2]
    Supervision.objects.filter(pk=edited.pk).update(reason="nobody held anything")  # behind the log's back
    with pytest.raises(CommandError) as broken:
        verify()
    assert f"supervision log: the chain breaks at entry {edited.pk} (3 of 6)" in str(broken.value)
    assert "its content does not match its hash" in str(broken.value)


@pytest.mark.django_db
def test_a_deleted_row_breaks_the_chain_at_the_row_after_it():
    _moves(looped())
    rows = list(ActionLog.objects.order_by("id"))
    rows[1].delete()
    with pytest.raises(CommandError) as broken:
        verify()
    assert f"action log: the chain breaks at entry {rows[2].pk} (2 of 5)" in str(broken.value)
    assert "the entry before it is not the one it was chained to" in str(broken.value)


@pytest.mark.django_db
def test_rows_written_before_the_chain_began_are_counted_not_refused():
    entity = looped()
    Supervision.objects.create(kind="hold", entity=entity, actor="old", reason="before chaining")
    Supervision.objects.filter(actor="old").update(hash="", prev_hash="")  # as the migration left old rows
    chain.reset_head(Supervision)
    _moves(entity, 1)
    assert "supervision log: 3 entries, chain whole (1 older entry written before chaining began)" in verify()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_writers_in_parallel_never_fork_the_chain():
    if connection.vendor != "postgresql":
        pytest.skip("real parallel writers need Postgres (SQLite serialises every write); CI runs this there")
    entities = [looped(f"e{i}") for i in range(4)]
    each_at_once([lambda entity=entity: _moves(entity, 5) for entity in entities])
    assert Supervision.objects.count() == 40
    assert "supervision log: 40 entries, chain whole" in verify()
