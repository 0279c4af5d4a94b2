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
    from grading import views

    monkeypatch.setattr(views, "FEW_ENTITIES", 0)  # Rate runs as for a fleet: the newest runs walked by index
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
