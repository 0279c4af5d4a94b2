"""Executions from start to terminal, and runs reported already finished (contract 4)."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from grading.executions import finish_execution, report_execution, report_many, start_execution
from grading.models import Entity, Execution
from singularity.errors import ConfigError, StateError
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db

T0 = "2026-03-01T12:00:00Z"


def run(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": "succeeded",
        "started_at": "2026-03-01T11:59:00Z",
        "completed_at": "2026-03-01T11:59:30.250Z",
        "cost_usd": "0.000000000001",
        "tool_failures": 1,
        "input": {"ticket": "refund please"},
        "output": {"label": "billing"},
        "trace": [{"tool": "kb__search", "status": "success"}],
    }
    data.update(over)
    return data


def test_start_records_the_entitys_commit_and_definition_hash_and_runs(alice):
    entity = make_entity(commit="a" * 40, definition_hash="b" * 64)
    execution = start_execution(entity, input={"x": 1}, source="manual", user=alice)
    execution.refresh_from_db()
    assert execution.status == "running"
    assert (execution.commit, execution.definition_hash) == ("a" * 40, "b" * 64)
    assert execution.run_kind == "workflow"
    assert execution.input == {"x": 1}
    assert execution.started_by == alice
    assert execution.loop_launched is False


def test_a_heartbeats_runs_are_heartbeat_runs_and_a_replay_is_marked_loop_launched():
    entity = make_entity("tick", kind=Entity.Kind.HEARTBEAT)
    execution = start_execution(entity, input=None, source="loop", loop_launched=True)
    assert (execution.run_kind, execution.input, execution.loop_launched) == ("heartbeat", {}, True)


def test_start_refuses_an_unknown_source():
    with pytest.raises(ConfigError, match="source"):
        start_execution(make_entity(), input={}, source="cron")


def test_finish_sets_the_terminal_fields_and_the_duration():
    entity = make_entity()
    with time_machine.travel(T0, tick=False):
        execution = start_execution(entity, input={}, source="manual")
    completed = execution.started_at + timedelta(seconds=2, milliseconds=500)
    finish_execution(
        execution,
        status="succeeded",
        output={"result": "ok"},
        cost_usd=Decimal("0.000000000003"),
        tool_failures=2,
        trace=[{"tool": "echo__echo"}],
        completed_at=completed,
    )
    execution.refresh_from_db()
    assert execution.status == "succeeded"
    assert execution.output == {"result": "ok"}
    assert execution.cost_usd == Decimal("0.000000000003")
    assert execution.tool_failures == 2
    assert execution.duration_ms == 2500
    assert execution.completed_at == completed
    assert execution.trace == [{"tool": "echo__echo"}]


def test_an_execution_is_finished_only_once():
    execution = start_execution(make_entity(), input={}, source="manual")
    finish_execution(execution, status="failed", error="boom")
    with pytest.raises(StateError, match="it is failed"):
        finish_execution(execution, status="succeeded")
    execution.refresh_from_db()
    assert (execution.status, execution.error) == ("failed", "boom")


def test_finish_refuses_a_status_that_is_not_terminal():
    execution = start_execution(make_entity(), input={}, source="manual")
    with pytest.raises(ConfigError, match="running"):
        finish_execution(execution, status="running")


def test_finish_books_the_run_only_after_the_transaction_commits(django_capture_on_commit_callbacks):
    execution = start_execution(make_entity(), input={}, source="manual")
    with django_capture_on_commit_callbacks() as callbacks:
        finish_execution(execution, status="succeeded")
    assert len(callbacks) == 1


@pytest.mark.django_db(transaction=True)
def test_finish_hands_the_run_to_booking_on_commit():
    pytest.importorskip("grading.booking")
    entity = make_entity(terms={})
    execution = start_execution(entity, input={}, source="manual")
    finish_execution(execution, status="succeeded")
    execution.refresh_from_db()
    assert execution.sampling != ""


# --- reported runs ---------------------------------------------------------------


@time_machine.travel(T0, tick=False)
def test_a_reported_run_is_recorded_terminal_with_its_exact_cost(bob):
    execution = report_execution(make_entity(), run(), user=bob)
    execution.refresh_from_db()
    assert execution.status == "succeeded"
    assert execution.source == "api"
    assert execution.cost_usd == Decimal("0.000000000001")
    assert execution.duration_ms == 30250
    assert execution.tool_failures == 1
    assert execution.input == {"ticket": "refund please"}
    assert execution.output == {"label": "billing"}
    assert execution.started_by == bob


@time_machine.travel(T0, tick=False)
def test_a_cost_given_as_a_json_number_is_read_through_its_decimal_text(bob):
    execution = report_execution(make_entity(), run(cost_usd=0.1), user=bob)
    execution.refresh_from_db()
    assert execution.cost_usd == Decimal("0.1")


@time_machine.travel(T0, tick=False)
@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"status": "running"}, "status"),
        ({"status": None}, "status"),
        ({"started_at": None}, "started_at"),
        ({"started_at": "yesterday"}, "started_at"),
        ({"started_at": "2026-03-01T11:59:00"}, "started_at"),
        ({"completed_at": "2026-03-01T11:58:00Z"}, "completed_at"),
        ({"completed_at": "2026-03-02T12:00:00Z"}, "completed_at"),
        ({"cost_usd": "-0.01"}, "cost_usd"),
        ({"cost_usd": "lots"}, "cost_usd"),
        ({"cost_usd": "NaN"}, "cost_usd"),
        ({"cost_usd": True}, "cost_usd"),
        ({"cost_usd": "0.0000000000001"}, "cost_usd"),
        ({"tool_failures": -1}, "tool_failures"),
        ({"tool_failures": 1.5}, "tool_failures"),
        ({"tool_failures": True}, "tool_failures"),
        ({"input": ["a"]}, "input"),
        ({"trace": {"tool": "x"}}, "trace"),
        ({"trace": ["x"]}, r"trace\[0\]"),
        ({"trace": [{"spanId": "a", "name": "n", "kind": "agent", "startTime": T0}]}, r"trace\[0\] \(span 'a'\)\.kind"),
        ({"error": 3}, "error"),
        ({"score": 1}, "score"),
    ],
)
def test_a_reported_run_is_refused_naming_the_field(bob, over, field):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        report_execution(make_entity(), run(**over), user=bob)
    assert Execution.objects.count() == 0


@time_machine.travel(T0, tick=False)
def test_a_batch_is_recorded_whole_or_refused_naming_the_row(bob):
    entity = make_entity()
    rows = [(entity, run()), (entity, run(tool_failures=-2))]
    with pytest.raises(ConfigError, match=r"^runs\[1\]\.tool_failures: "):
        report_many(rows, user=bob)
    assert Execution.objects.count() == 0
    created = report_many([(entity, run()), (entity, run(status="failed", error="timeout"))], user=bob)
    assert [e.status for e in created] == ["succeeded", "failed"]
    assert Execution.objects.filter(entity=entity, source="api").count() == 2


def _insert_batches(rows: int) -> int:
    """How many INSERT statements the backend needs for ``rows`` executions (SQLite caps parameters)."""
    fields = [f for f in Execution._meta.concrete_fields]
    per_batch = connection.ops.bulk_batch_size(fields, [None] * rows)
    return math.ceil(rows / per_batch)


@time_machine.travel(T0, tick=False)
def test_a_batchs_queries_do_not_grow_with_its_rows(bob, django_assert_num_queries):
    entity = make_entity()
    report_many([(entity, run())], user=bob)  # warm the content type and other caches

    def queries(rows: int) -> int:
        # One savepoint pair around the batch plus the inserts themselves.
        return 2 + _insert_batches(rows)

    with django_assert_num_queries(queries(10)):
        report_many([(entity, run()) for _ in range(10)], user=bob)
    with django_assert_num_queries(queries(100)):
        report_many([(entity, run()) for _ in range(100)], user=bob)
    if connection.vendor == "postgresql":
        assert queries(100) == queries(10)
    assert Execution.objects.count() == 111


@time_machine.travel(T0, tick=False)
def test_a_batch_books_every_run_on_commit(bob, django_capture_on_commit_callbacks):
    entity = make_entity()
    with django_capture_on_commit_callbacks() as callbacks:
        created = report_many([(entity, run()) for _ in range(3)], user=bob)
    assert len(callbacks) == 1  # the batch is booked in one pass (grading.booking.on_terminal_many)
    with django_capture_on_commit_callbacks():  # what the booking enqueues is not this test's business
        callbacks[0]()
    assert all(Execution.objects.get(pk=e.pk).sampling for e in created)


def test_completed_at_defaults_to_now(settings):
    execution = start_execution(make_entity(), input={}, source="manual")
    before = timezone.now()
    finish_execution(execution, status="succeeded")
    assert execution.completed_at >= before


def test_an_engine_runs_nul_characters_are_kept_as_the_replacement_character():
    # What a model or a tool answered an engine's run is its evidence, as a reported run's: PostgreSQL cannot hold
    # U+0000, so both databases keep U+FFFD.
    execution = start_execution(make_entity(), input={}, source="manual")
    finish_execution(
        execution,
        status="failed",
        output={"reply": "bill\x00ing", "k\x00": 1},
        error="tool crashed\x00",
        trace=[{"tool": "echo__echo", "result": "a\x00b"}],
    )
    stored = Execution.objects.get(pk=execution.pk)
    assert stored.output == {"reply": "bill\ufffding", "k\ufffd": 1}
    assert stored.error == "tool crashed\ufffd"
    assert stored.trace == [{"tool": "echo__echo", "result": "a\ufffdb"}]
    assert (execution.output, execution.error) == (stored.output, stored.error)
