"""A being's durable save per step: as few statements as the database allows, guarded by the lease and the
journal's head (the head lives in the process that holds the lease; the database is its check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from singularity.being import store
from singularity.being.export import verify_being
from singularity.being.lease import LeaseLost
from singularity.being.runtime import DEBIT_FIELDS, Prices
from singularity.being.store import Journal, JournalMoved, Pending
from singularity.models import Being, Cycle, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import ROOT, make_being, make_runtime

REMEMBER = ("self__remember", {"key": "k", "value": "v"})
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


def stored_events(being: Being) -> list[tuple[int, str]]:
    return list(Event.objects.filter(being=being).order_by("seq").values_list("seq", "hash"))


def foreign_append(being: Being, owner: str) -> None:
    """Another writer (a second process given the same owner, a hand-run script) appends one event."""
    other = Being.objects.get(pk=being.pk)
    journal = Journal(other)
    journal.emit(Event.Kind.WARNING, {"message": "written elsewhere"})
    journal.save(owner=owner)


def ran_a_cycle(fake_gateway, catalogue) -> tuple[Being, Any]:
    """A being with 10 USD and its runtime, after one cycle of the replies scripted."""
    being = make_being(starting="10")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(1, 1, 1))
    runtime.run_cycle()
    return being, runtime


@contextmanager
def django_log() -> Iterator[list[str]]:
    """The statements Django's cursor runs inside the block (its query log)."""
    seen: list[str] = []
    with CaptureQueriesContext(connection) as ctx:
        yield seen
    seen.extend(query["sql"] for query in ctx.captured_queries)


@contextmanager
def sqlite_trace() -> Iterator[list[str]]:
    """The statements SQLite itself runs inside the block, whoever sends them (its trace callback)."""
    seen: list[str] = []
    connection.connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        connection.connection.set_trace_callback(None)


def rounds_seen(runtime: Any, reader: Any) -> list[list[str]]:
    """Each model round's save from now on, as ``reader`` sees it: its statements' first words, a list a round."""
    rounds: list[list[str]] = []
    debit = runtime._debit

    def watched(*args: Any, **kwargs: Any) -> Any:
        with reader() as seen:
            answer = debit(*args, **kwargs)
        rounds.append([sql.split()[0].upper() for sql in seen])
        return answer

    runtime._debit = watched
    return rounds


def assert_two_rounds_saved(being: Being) -> None:
    """The two-round cycle's saves, read back: the ledger's sum, the tokens, the rounds, the chain whole."""
    being.refresh_from_db()
    assert being.api_spent + being.instance_spent == Decimal(10) - being.remaining
    assert being.total_tokens == 220
    assert Cycle.objects.get(being=being).rounds == 2
    assert verify_being(being).whole


@pytest.mark.django_db(transaction=True)  # outside a test's own transaction, so the save's own shows
def test_a_model_rounds_save_is_one_statement_on_postgres_and_one_short_transaction_on_sqlite(fake_gateway, catalogue):
    fake_gateway.script(Reply(tool_calls=[REMEMBER], usage=USAGE), Reply(content="done", usage=USAGE))
    being = make_being(starting="10")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(1, 1, 1))
    rounds = rounds_seen(runtime, django_log)
    runtime.run_cycle()
    assert len(rounds) == 2
    for statements in rounds:
        if connection.vendor == "postgresql":
            # The being's UPDATE, the cycle's and the events' INSERT in one WITH, committed on its own.
            assert statements == ["WITH"]
        else:
            assert statements == ["BEGIN", "UPDATE", "UPDATE", "INSERT", "COMMIT"]
    assert_two_rounds_saved(being)


@pytest.mark.django_db(transaction=True)
def test_a_sqlite_step_nothing_watches_goes_to_the_driver_as_the_same_short_transaction(
    fake_gateway, catalogue, monkeypatch
):
    # With no query log or execute wrapper to see it (the test above has one), a step's save runs on the driver's
    # connection: the same statements, BEGIN IMMEDIATE to COMMIT, and the same rows.
    if connection.vendor != "sqlite":
        pytest.skip("Postgres's step is one statement through Django's cursor")
    direct = []
    real = store._sqlite_direct
    monkeypatch.setattr(store, "_sqlite_direct", lambda db, statements: direct.append(1) or real(db, statements))
    fake_gateway.script(Reply(tool_calls=[REMEMBER], usage=USAGE), Reply(content="done", usage=USAGE))
    being = make_being(starting="10")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(1, 1, 1))
    rounds = rounds_seen(runtime, sqlite_trace)
    runtime.run_cycle()
    assert len(direct) == 4  # two rounds and a tool call, then the cycle's end
    assert rounds == [["BEGIN", "UPDATE", "UPDATE", "INSERT", "COMMIT"]] * 2
    assert not connection.connection.in_transaction
    assert_two_rounds_saved(being)


@pytest.mark.django_db(transaction=True)
def test_a_step_on_the_driver_that_fails_or_is_refused_writes_nothing_and_leaves_no_transaction(
    fake_gateway, catalogue
):
    fake_gateway.script(Reply(content="one", usage=USAGE))
    being, runtime = ran_a_cycle(fake_gateway, catalogue)
    before, stored = stored_events(being), Being.objects.get(pk=being.pk)
    # An event already stored at the next number (written past the being's counter): the INSERT fails after the
    # being's UPDATE matched, and the whole step is rolled back, raised as Django's IntegrityError.
    Event.objects.bulk_create([Pending(being.pk, being.event_seq + 1, 1, "warning", {}, "x").event()])
    being.remaining -= Decimal(1)
    runtime.journal.emit(Event.Kind.WARNING, {"message": "mine"})
    with pytest.raises(IntegrityError):
        runtime.journal.save(owner=runtime.owner, fields=DEBIT_FIELDS)
    if connection.vendor == "sqlite":
        assert not connection.connection.in_transaction
    assert Being.objects.get(pk=being.pk).remaining == stored.remaining
    assert stored_events(being)[: len(before)] == before and len(stored_events(being)) == len(before) + 1
    Event.objects.filter(being=being, seq__gt=stored.event_seq).delete()
    runtime.journal.discard()

    foreign_append(being, runtime.owner)
    runtime.journal.emit(Event.Kind.WARNING, {"message": "mine"})
    with pytest.raises(JournalMoved):
        runtime.journal.save(owner=runtime.owner, fields=DEBIT_FIELDS)
    if connection.vendor == "sqlite":
        assert not connection.connection.in_transaction
    assert Being.objects.get(pk=being.pk).remaining == stored.remaining


@pytest.mark.django_db(transaction=True)  # appending counts on a committed write: outside a test's transaction
def test_a_saves_messages_are_appended_and_the_row_holds_the_whole_conversation(fake_gateway, catalogue, monkeypatch):
    appends = []
    real = store._cycle_value
    monkeypatch.setattr(
        store,
        "_cycle_value",
        lambda cycle, name, db, appended: (
            (name == store.MESSAGES_APPENDED and appends.append(appended)) or real(cycle, name, db, appended)
        ),
    )
    fake_gateway.script(
        Reply(tool_calls=[REMEMBER, REMEMBER], usage=USAGE),
        Reply(tool_calls=[("self__remember", {"key": "é", "value": "\u0000 ü"})], usage=USAGE),
        Reply(content="done", usage=USAGE),
    )
    being = make_being(starting="10")
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue, prices=Prices(1, 1, 1))
    runtime.run_cycle()
    # The first round writes the conversation whole (nothing of it stored yet); every later save appends.
    assert appends == [1, 2, 3, 4, 5]
    cycle = Cycle.objects.get(being=being)
    assert [m["role"] for m in cycle.messages] == ["assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert cycle.messages[-1]["content"] == "done"
    assert cycle.messages == fake_gateway.requests[-1].json["messages"][2:] + [cycle.messages[-1]]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT messages FROM singularity_cycle WHERE id = %s", [cycle.pk])
            (text,) = cursor.fetchone()
        assert text == json.dumps(cycle.messages)  # byte for byte what writing it whole would have written


@pytest.mark.django_db
def test_a_round_writes_only_what_its_debit_changed(fake_gateway, catalogue):
    # The mind is as the last save left it (only the model call ran since): the round leaves it alone, so a
    # change made by someone holding no lease to a column the round does not own is not overwritten by it.
    assert "memories" not in DEBIT_FIELDS and "remaining" in DEBIT_FIELDS and "event_hash" in DEBIT_FIELDS
    fake_gateway.script(Reply(content="done", usage=USAGE))
    being, runtime = ran_a_cycle(fake_gateway, catalogue)
    being.refresh_from_db()
    assert being.remaining == Decimal(10) - Decimal("0.000110") - being.instance_spent
    assert [kind for kind in Event.objects.filter(being=being).order_by("seq").values_list("kind", flat=True)] == [
        "cycle_started",
        "model_completed",
        "cost_debited",
    ]


@pytest.mark.django_db
def test_a_journal_appended_to_by_another_writer_stops_the_runtime_with_nothing_written(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="one", usage=USAGE))
    being, runtime = ran_a_cycle(fake_gateway, catalogue)
    foreign_append(being, runtime.owner)
    before = stored_events(being)
    stored = Being.objects.get(pk=being.pk)

    fake_gateway.script(Reply(content="two", usage=USAGE))
    with pytest.raises(JournalMoved, match="another writer appended to it, so nothing was saved"):
        runtime.run_cycle()
    assert stored_events(being) == before  # nothing written: the other writer's event is the head still
    after = Being.objects.get(pk=being.pk)
    assert (after.event_seq, after.event_hash, after.remaining) == (
        stored.event_seq,
        stored.event_hash,
        stored.remaining,
    )
    assert verify_being(after).whole


@pytest.mark.django_db
def test_a_rounds_save_after_another_writer_appended_is_refused_whole(fake_gateway, catalogue):
    # The step's save (not a cycle's first) checks the head too: no event, no debit, no cycle change is written.
    fake_gateway.script(Reply(content="one", usage=USAGE))
    being, runtime = ran_a_cycle(fake_gateway, catalogue)
    cycle = Cycle.objects.get(being=being)
    foreign_append(being, runtime.owner)
    before, remaining = stored_events(being), Being.objects.get(pk=being.pk).remaining

    being.remaining -= Decimal(1)
    cycle.rounds = 9
    runtime.journal.emit(Event.Kind.WARNING, {"message": "mine"})
    with pytest.raises(JournalMoved):
        runtime.journal.save(owner=runtime.owner, cycle=cycle, cycle_fields=("rounds",), fields=DEBIT_FIELDS)
    assert stored_events(being) == before
    assert Being.objects.get(pk=being.pk).remaining == remaining
    assert Cycle.objects.get(pk=cycle.pk).rounds == 1


@pytest.mark.django_db
def test_a_save_after_the_lease_went_elsewhere_is_lease_lost_not_a_moved_journal(fake_gateway, catalogue):
    fake_gateway.script(Reply(content="one", usage=USAGE))
    being, runtime = ran_a_cycle(fake_gateway, catalogue)
    Being.objects.filter(pk=being.pk).update(lease_owner="someone-else")
    before = stored_events(being)
    runtime.journal.emit(Event.Kind.WARNING, {"message": "mine"})
    with pytest.raises(LeaseLost) as caught:
        runtime.journal.save(owner=runtime.owner, fields=DEBIT_FIELDS)
    assert not isinstance(caught.value, JournalMoved)
    assert "lease lost" in str(caught.value)
    assert stored_events(being) == before


@pytest.mark.django_db
def test_sqlite_commits_are_fsynced_only_when_asked(tmp_path):
    # NORMAL (the default) survives a killed process; FULL fsyncs every commit; anything else is refused by name.
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    script = (
        "import django; django.setup(); from django.db import connection; "
        "print(connection.cursor().execute('PRAGMA synchronous').fetchone()[0])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SINGULARITY_")}
    env |= {"DATABASE_URL": f"sqlite:///{tmp_path}/s.sqlite3", "DJANGO_SETTINGS_MODULE": "singularity.settings"}
    read = {}
    for value in ("full", "EXTRA"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env | {"SINGULARITY_SQLITE_SYNCHRONOUS": value},
            capture_output=True,
            text=True,
            timeout=60,
        )
        read[value] = (done.returncode, done.stdout.strip(), done.stderr)
    assert read["full"][:2] == (0, "2")  # FULL
    assert read["EXTRA"][0] != 0
    assert "SINGULARITY_SQLITE_SYNCHRONOUS: expected NORMAL or FULL, got 'EXTRA'" in read["EXTRA"][2]
