"""A trace that breaks its sweep batch is set aside with its error; every trace behind it still becomes a run.

The sweep (``grading.otlp_assemble.sweep_once``) takes a batch of due traces
in one transaction. Before, anything one trace broke (a value the database
refuses, stored bytes that do not read) rolled the batch back, and the next
sweep took the same batch again: every trace behind the poisoned one waited
for ever. The poison here is real: bytes that are not a span. (A NUL, which
PostgreSQL refuses, was one; a run's NUL is now kept as U+FFFD instead.)
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from grading import otlp_assemble
from grading.doctor import run_doctor
from grading.models import Entity, Execution, Grade, OtlpSpan, OtlpTrace
from singularity.models import ApiToken
from tests.grading.grading_helpers import make_entity
from tests.grading.otlp_helpers import agent_spans, encoded, export_in_process

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(django_user_model) -> str:
    _, key = ApiToken.issue(django_user_model.objects.create_user("agent-owner"), "otlp", is_agent=True)
    return key


@pytest.fixture
def triage(key) -> Entity:
    return make_entity("triage", evaluation={"method": "none", "sample": {"rate": 1.0, "maxPerDay": 1000}})


def traces(key: str, bodies: list[bytes]) -> list[OtlpTrace]:
    """One export request a body, each its own trace, received a second apart in that order (the sweep's order)."""
    for body in bodies:
        export_in_process(key, body)
    received = list(OtlpTrace.objects.order_by("pk"))
    assert len(received) == len(bodies)
    start = timezone.now() - timedelta(minutes=1)
    for index, trace in enumerate(received):
        OtlpTrace.objects.filter(pk=trace.pk).update(first_received_at=start + timedelta(seconds=index))
    return received


def with_nul() -> bytes:
    """A trace whose tool call's result holds a NUL character, which PostgreSQL's text and jsonb refuse."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoded(agent_spans()))
    span = request.resource_spans[0].scope_spans[0].spans[1]
    span.attributes.add(key="gen_ai.tool.call.result").value.string_value = "found\x00it"
    return request.SerializeToString()


LATER = timedelta(hours=1)


def test_bytes_that_do_not_read_set_their_trace_aside_and_the_rest_of_the_batch_become_runs(
    key, triage, caplog, django_capture_on_commit_callbacks
):
    taken = traces(key, [encoded(agent_spans()) for _ in range(5)])
    poisoned = taken[2]
    span = OtlpSpan.objects.filter(trace=poisoned).first()
    OtlpSpan.objects.filter(pk=span.pk).update(raw=b"\xff\xff\xff")  # not a span: the bytes do not read
    now = timezone.now() + LATER
    with (
        caplog.at_level(logging.WARNING, logger="grading.otlp"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert otlp_assemble.sweep_once(now=now) == 5
    assert Execution.objects.count() == 4
    # Booked once each on commit; nothing of the parts rolled back is booked.
    assert sorted(Grade.objects.values_list("execution", flat=True)) == sorted(
        Execution.objects.values_list("pk", flat=True)
    )
    healthy = OtlpTrace.objects.exclude(pk=poisoned.pk)
    assert None not in healthy.values_list("execution", flat=True)
    poisoned.refresh_from_db()
    assert poisoned.execution is None and poisoned.assembled_at == now
    assert poisoned.assembly_error.startswith("DecodeError: Error parsing message")
    warned = [
        record for record in caplog.records if record.name == "grading.otlp" and record.levelno >= logging.WARNING
    ]
    assert len(warned) == 1 and poisoned.trace_id in warned[0].getMessage()
    assert "DecodeError" in warned[0].getMessage()
    # Never taken again; its spans are kept as they came, for a person to read.
    assert otlp_assemble.sweep_once(now=now + timedelta(minutes=1)) == 0
    assert OtlpSpan.objects.filter(trace=poisoned).count() == 4
    assert OtlpSpan.objects.count() == 4 and Execution.objects.count() == 4


def test_a_nul_postgresql_refuses_no_longer_sets_its_trace_aside_it_becomes_its_run_with_u_fffd(key, triage, caplog):
    # Before, PostgreSQL refused the NUL (DataError) and the trace was set aside; SQLite kept it. A run's evidence is
    # kept the same on both: the NUL as U+FFFD (docs/decisions.md).
    taken = traces(key, [encoded(agent_spans()), encoded(agent_spans()), with_nul(), encoded(agent_spans())])
    now = timezone.now() + LATER
    with caplog.at_level(logging.INFO, logger="grading.otlp"):
        assert otlp_assemble.sweep_once(now=now) == 4
    assert [record for record in caplog.records if record.name == "grading.otlp"] == []  # no batch failed
    assert Execution.objects.count() == 4
    kept = OtlpTrace.objects.get(pk=taken[2].pk)
    assert kept.execution is not None and kept.assembly_error == ""
    tool = next(span for span in kept.execution.trace if span["kind"] == "tool")
    assert tool["attributes"]["gen_ai.tool.call.result"] == "found\ufffdit"
    assert not otlp_assemble.set_aside().exists()
    assert otlp_assemble.sweep_once(now=now + timedelta(minutes=1)) == 0


def test_a_trace_set_aside_is_kept_past_the_others_prune_and_a_late_span_of_it_is_dropped(key, triage):
    first, poisoned = traces(key, [encoded(agent_spans()), encoded(agent_spans())])
    OtlpSpan.objects.filter(trace=poisoned).update(raw=b"\x0a")
    now = timezone.now() + LATER
    assert otlp_assemble.sweep(now=now) == 2
    otlp_assemble.sweep(now=now + otlp_assemble.keep() + timedelta(seconds=1))
    assert list(OtlpTrace.objects.values_list("pk", flat=True)) == [poisoned.pk]
    assert OtlpSpan.objects.filter(trace=poisoned).count() == 4


def test_a_healthy_batch_is_one_transaction_of_as_many_statements_whatever_its_size(key, triage):
    def sweep(count: int) -> list[str]:
        traces(key, [encoded(agent_spans()) for _ in range(count)])
        with CaptureQueriesContext(connection) as queries:
            assert otlp_assemble.sweep_once(now=timezone.now() + LATER) == count
        OtlpTrace.objects.all().delete()
        return [query["sql"] for query in queries]

    # The traces locked, their entities, people and spans read, the runs inserted, the traces marked, the spans
    # deleted; and the savepoints of the sweep's transaction and of report_many's (nested in the test's).
    one, twenty = sweep(1), sweep(20)
    assert len(one) == len(twenty) == 11
    assert len([sql for sql in twenty if sql.startswith("SAVEPOINT")]) == 2


def test_the_doctor_counts_the_traces_set_aside_and_names_the_first_with_its_error(key, triage):
    assert [f.line() for f in run_doctor(only=["OTLP traces"])] == ["[pass] OTLP traces: nothing to report"]
    first, _, last = traces(key, [encoded(agent_spans()) for _ in range(3)])
    OtlpSpan.objects.filter(trace__in=[first, last]).update(raw=b"\xff")
    otlp_assemble.sweep_once(now=timezone.now() + LATER)
    (finding,) = run_doctor(only=["OTLP traces"])
    assert finding.level == "warn"
    assert finding.message.startswith("2 trace(s) sent to /v1/traces could not become runs")
    assert f"The first: trace {first.trace_id} of scenario:triage" in finding.message
    assert finding.message.endswith(
        "DecodeError: Error parsing message with type 'opentelemetry.proto.trace.v1.Span': Wire format was corrupt"
    )


def test_the_entities_page_lists_the_traces_set_aside_with_their_error(key, triage, client, django_user_model):
    client.force_login(django_user_model.objects.create_user("viewer"))
    assert "Traces that could not become runs" not in client.get("/evolution/entities/").content.decode()
    kept, poisoned = traces(key, [encoded(agent_spans()), encoded(agent_spans())])
    OtlpSpan.objects.filter(trace=poisoned).update(raw=b"\xff")
    otlp_assemble.sweep_once(now=timezone.now() + LATER)
    page = client.get("/evolution/entities/").content.decode()
    assert "Traces that could not become runs" in page and "1 trace sent to" in page
    assert poisoned.trace_id in page and kept.trace_id not in page
    assert OtlpTrace.objects.get(pk=poisoned.pk).assembly_error.split(":")[0] in page


def test_a_postgres_refusal_reads_in_short_as_its_first_line_and_detail():
    error = (
        'DataError: unsupported Unicode escape sequence\nLINE 1: ...FROM jsonb_to_recordset( E\'[{"id": ...\n'
        "        ^\nDETAIL:  \\u0000 cannot be converted to text.\nCONTEXT:  JSON data, line 1: ..."
    )
    assert otlp_assemble.error_in_short(error) == (
        "DataError: unsupported Unicode escape sequence (\\u0000 cannot be converted to text.)"
    )
    assert otlp_assemble.error_in_short("ValueError: bad") == "ValueError: bad"


def test_a_person_removes_a_trace_set_aside_or_has_it_taken_again_in_the_admin(key, triage, admin_client):
    kept, poisoned, removed = traces(key, [encoded(agent_spans()) for _ in range(3)])
    good = {pk: bytes(raw) for pk, raw in OtlpSpan.objects.filter(trace=poisoned).values_list("pk", "raw")}
    OtlpSpan.objects.filter(trace__in=[poisoned, removed]).update(raw=b"\xff")
    now = timezone.now() + LATER
    otlp_assemble.sweep_once(now=now)
    listed = admin_client.get("/admin/grading/otlptrace/").content.decode()
    assert poisoned.trace_id in listed and removed.trace_id in listed and kept.trace_id not in listed
    assert "/admin/grading/otlptrace/add/" not in listed
    admin_client.post(f"/admin/grading/otlptrace/{removed.pk}/delete/", {"post": "yes"})
    assert not OtlpTrace.objects.filter(pk=removed.pk).exists()
    for pk, raw in good.items():  # the cause mended: its spans read again
        OtlpSpan.objects.filter(pk=pk).update(raw=raw)
    response = admin_client.post(
        "/admin/grading/otlptrace/", {"action": "take_again", "_selected_action": [poisoned.pk]}, follow=True
    )
    assert "1 trace(s) will be taken again by the next sweep" in response.content.decode()
    assert otlp_assemble.sweep_once(now=now + timedelta(minutes=1)) == 1
    poisoned.refresh_from_db()
    assert poisoned.execution is not None and poisoned.assembly_error == ""
    assert Execution.objects.count() == 2 and len(poisoned.execution.trace) == 3


def test_a_set_aside_error_holding_a_nul_is_kept_with_u_fffd_as_a_runs_text_is():
    error = otlp_assemble._error_text(ValueError("bad\x00byte"))
    assert error == "ValueError: bad\ufffdbyte"
