"""The main reads use an index, never a sequential scan of the grades or the runs (issue 18; Postgres only).

Every page and read API the dashboard serves at fleet scale is requested
once on a small data set; each statement it sent that reads
``grading_grade`` or ``grading_execution`` is EXPLAINed with sequential
scans priced out (``enable_seqscan = off``), so the planner takes an index
whenever one serves the statement — and a plan that still scans the table
means no index does.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.models import Cycle
from grading.models import Rating
from tests.evolution.page_helpers import graded_run, in_loop, make_cycle
from tests.grading.rating_helpers import JUDGE, make_entity, make_grade, make_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN plans are Postgres's"),
]

TABLES = ("grading_grade", "grading_execution")


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def pages(alice) -> list[str]:
    looped = [in_loop(f"e{i}") for i in range(3)]
    for entity in looped:
        for k in range(4):
            graded_run(entity, passed=k % 2 == 0, at=timezone.now() - timedelta(minutes=k + 1))
    make_cycle(looped[0], phase=Cycle.Phase.WATCHING)
    rated = make_entity("rated")
    for n in range(3):
        run = make_run(rated, completed_at=timezone.now() - timedelta(hours=n + 1))
        make_grade(run, metrics={"layout_fit": 0.75}, judge=JUDGE)
        Rating.objects.create(execution=run, metric_id="layout_fit", user=alice, value=3, normalized=0.5)
    entity = looped[1]
    return [
        "/evolution/",
        "/api/loop/status/",
        f"/api/loop/status/?targetKind=scenario&targetId={entity.slug}",
        "/evolution/rate/",
        "/evolution/needs-you/",
        "/evolution/needs-you/count/",
        f"/evolution/entities/scenario/{entity.slug}/",
        f"/evolution/entities/scenario/{entity.slug}/cycles/",
        "/evolution/entities/scenario/rated/",
        "/evolution/entities/",
        "/api/runs/",
        "/evolution/runs/",
        f"/evolution/runs/?entity=scenario:{entity.slug}&grade=bad",
        "/api/grades/",
        "/api/entities/",
    ]


def scans(statements: list[str]) -> list[str]:
    """The statements among ``statements`` whose plan still scans the grades or the runs with seqscan priced out."""
    found = []
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            for sql in statements:
                cursor.execute(f"EXPLAIN {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
                found += [f"{table}: {sql[:300]}" for table in TABLES if f"Seq Scan on {table}" in plan]
        finally:
            cursor.execute("SET enable_seqscan = on")
    return found


def test_no_main_read_scans_the_grades_or_the_runs(web, alice, monkeypatch):
    from grading.views import rate

    monkeypatch.setattr(rate, "FEW_ENTITIES", 0)  # Rate runs as for a fleet: the newest runs walked by index
    scanned, explained = [], 0
    for path in pages(alice):
        with CaptureQueriesContext(connection) as read:
            assert web.get(path).status_code == 200, path
        statements = [
            q["sql"]
            for q in read.captured_queries
            if any(t in q["sql"] for t in TABLES) and q["sql"].lstrip().upper().startswith("SELECT")
        ]
        explained += len(statements)
        scanned += [f"{path}: {found}" for found in scans(statements)]
    assert not scanned, "\n".join(scanned)
    assert explained >= 15


def test_the_check_sees_a_read_no_index_serves():
    assert scans(["SELECT count(*) FROM grading_grade WHERE feedback = 'x'"])


def test_the_triggers_batch_reads_and_the_freeze_at_an_opening_use_an_index():
    from evolution.loop import freeze
    from evolution.presets import ready
    from tests.evolution.evolve_helpers import MINUTE, graded_at, shop

    start = timezone.now() - timedelta(hours=2)
    shops = [shop(f"shop-{i}") for i in range(3)]
    for entity in shops:
        for k in range(4):
            graded_at(entity, start + k * MINUTE, {"revenue": 1000.0, "conversion": 0.4})
    looped = in_loop("frozen")
    runs = [graded_run(looped, passed=k % 2 == 0, at=start + k * MINUTE) for k in range(5)]
    with CaptureQueriesContext(connection) as read:
        ready.ready_at({e.pk: e for e in shops}, now=timezone.now())
        freeze.freeze(Cycle(entity=looped, anchor=runs[-1], window={}, judge={}), now=timezone.now())
    statements = [q["sql"] for q in read.captured_queries if any(t in q["sql"] for t in TABLES)]
    assert len(statements) >= 2
    assert not scans(statements), "\n".join(scans(statements))


def plan_of(sql: str, params) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET enable_seqscan = on")


def test_the_entity_pages_read_a_bounded_slice_of_the_history_by_index(web, alice):
    """The entity page's plots and recent runs read the newest rows by index under a LIMIT; calibration reads the
    entity's ratings by their own index (``rating_entity_metric``), never the entity's runs to find the rated
    ones (``execution_own``); nothing scans the grades, the runs or the ratings."""
    pages(alice)
    for path in ("/evolution/entities/scenario/rated/", "/evolution/entities/scenario/e1/"):
        with CaptureQueriesContext(connection) as read:
            assert web.get(path).status_code == 200
        plans = {
            q["sql"]: plan_of(q["sql"], None)
            for q in read.captured_queries
            if "grading_" in q["sql"] and q["sql"].lstrip().upper().startswith("SELECT")
        }
        assert len(plans) >= 3, path
        for sql, plan in plans.items():
            for table in ("grading_grade", "grading_execution", "grading_rating"):
                assert f"Seq Scan on {table}" not in plan, f"{path}: {sql[:200]}\n{plan}"
            assert "execution_own" not in plan, f"{path}: {sql[:200]}\n{plan}"
        plot = next(s for s in plans if '"grading_grade"."metrics" AS "metrics"' in s)
        runs = next(s for s in plans if s.startswith('SELECT "grading_execution"."id"') and "LIMIT" in s)
        for sql in (plot, runs):
            assert plans[sql].startswith("Limit"), f"{path}: {sql[:200]}\n{plans[sql]}"
        if "rated" in path:  # the pairs read filters the ratings by their entity, which an index of theirs serves
            assert any('"grading_rating"."entity_id" IN' in s for s in plans), path
            served = plan_of("SELECT 1 FROM grading_rating WHERE entity_id = 1 AND metric_id = 'layout_fit'", None)
            assert "rating_entity_metric" in served, served


def test_the_fleets_live_cycles_and_the_breakers_read_use_their_partial_indexes(web, alice):
    """The fleet's refresh reads the live cycles (a few hundred of a history of thousands) by ``cycle_live``, and
    the breaker's bounded read its candidates and each entity's newest validated settle by ``cycle_shipped``, the
    autonomous merges by ``round_autonomous``: none of them scans the cycles or the rounds (issue 18)."""
    from tests.evolution.test_autonomy import shipped

    pages(alice)
    for i, entity in enumerate(in_loop(f"b{i}") for i in range(3)):
        shipped(entity, "validated", minutes_ago=30)
        shipped(entity, "regressed", minutes_ago=20, merge_gate="auto" if i == 0 else "human")
        shipped(entity, "unvalidated", minutes_ago=10, merge_gate="auto")
    with CaptureQueriesContext(connection) as read:
        assert web.get("/evolution/", HTTP_HX_REQUEST="true").status_code == 200
    # The plans of this data, not of the statistics earlier tests left (the column statistics roll back with the
    # test; the tables' size estimates stay, as an autovacuum's would).
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE evolution_cycle, evolution_round, grading_entity")
    sent = [q["sql"] for q in read.captured_queries]
    live = [s for s in sent if s.startswith("SELECT") and 'NOT ("evolution_cycle"."phase" = \'settled\')' in s]
    breaker = [s for s in sent if "cand AS MATERIALIZED" in s]
    assert len(live) >= 2 and len(breaker) == 1, sent
    plans = {sql: plan_of(sql, None) for sql in live}
    for sql, plan in plans.items():
        assert "Seq Scan on evolution_cycle" not in plan, f"{sql[:300]}\n{plan}"
    # The whole fleet's live cycles (``live_rows``); a page of entities' live cycles (``live_cycles``) may reach
    # them from the entities' side instead. (Their rounds are read by the cycles' ids: ``live.plain_rounds``.)
    assert any("cycle_live" in plan for plan in plans.values()), "\n\n".join(plans.values())
    plan = plan_of(breaker[0], None)
    for table in ("evolution_cycle", "evolution_round"):
        assert f"Seq Scan on {table}" not in plan, plan
    assert "cycle_shipped" in plan and "round_autonomous" in plan, plan


def test_the_inbox_history_reads_a_page_from_its_index(web, alice):
    """The inbox's history (answered, expired and cancelled cards, the newest answer first) reads its page from the
    head of ``card_history``: never every card of the history sorted (issue 18)."""
    from hitl.models import Card

    now = timezone.now()
    for n in range(30):
        status = Card.Status.ANSWERED if n % 3 else Card.Status.EXPIRED
        Card.objects.create(
            producer="loop", kind=Card.Kind.DECIDE, key=f"h{n}", title=f"card {n}", status=status,
            responded_at=now - timedelta(minutes=n) if status == Card.Status.ANSWERED else None,
            expires_at=now + timedelta(days=1),
        )  # fmt: skip
    with CaptureQueriesContext(connection) as read:
        assert web.get("/inbox/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE hitl_card")
    history = [
        q["sql"]
        for q in read.captured_queries
        if q["sql"].startswith('SELECT "hitl_card"') and 'responded_at" DESC' in q["sql"] and "LIMIT" in q["sql"]
    ]
    assert len(history) == 1, [q["sql"][:200] for q in read.captured_queries]
    plan = plan_of(history[0], None)
    assert "card_history" in plan and "Sort" not in plan.split("->")[0], plan
    assert "Seq Scan on hitl_card" not in plan, plan


def test_a_cycles_watch_gradings_are_found_by_their_reason_not_among_every_grade_since_it_opened():
    """A cycle's cost finds the watch's exempt gradings of it (reason ``exempt:watch:<id>``) in ``grade_watch_exempt``,
    which holds those grades only, not by walking every grade of its entity booked since the cycle opened: the
    per-cycle read (``spend.with_cost``) and the month's written-out one (``economics.with_month``)."""
    from evolution.core import spend
    from evolution.reads import economics
    from grading.models import Entity, Execution, Grade

    entity = in_loop("busy")
    cycle = make_cycle(entity, phase=Cycle.Phase.SETTLED)
    now = timezone.now()
    runs = Execution.objects.bulk_create(
        Execution(entity=entity, run_kind="scenario", status="succeeded", started_at=now, completed_at=now)
        for _ in range(400)
    )
    reasons = [f"{spend.WATCH_REASON}{cycle.pk}" if n % 100 == 0 else "sampled" for n in range(len(runs))]
    Grade.objects.bulk_create(
        Grade(execution=run, entity=entity, status="graded", reason=reason, day=now.date(), due_at=now, booked_at=now)
        for run, reason in zip(runs, reasons, strict=True)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE grading_grade")
    with CaptureQueriesContext(connection) as read:
        list(spend.with_cost(Cycle.objects.filter(pk=cycle.pk)).values("watch_judge_usd"))
        list(economics.with_month(Entity.objects.filter(pk=entity.pk), now=now).values("month_watch_judge_usd"))
    assert len(read.captured_queries) == 2
    for query in read.captured_queries:
        plan = plan_of(query["sql"], None)
        assert "grade_watch_exempt" in plan, f"{query['sql'][:300]}\n{plan}"
