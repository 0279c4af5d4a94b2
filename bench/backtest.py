#!/usr/bin/env python
"""A backtest's own cost: one entity's graded history replayed through its policy, at 10k and 100k runs.

Issue 16's figures: a backtest of one entity over 100,000 graded runs answers in under 5 s on Postgres, and its
queries do not grow with the history (the runs are streamed once, in time order, by one server-side cursor on
Postgres and one cursor read in chunks on SQLite). The history is built with bulk inserts: runs every 26 s
over 30 days, bad in bursts (about one run in five), so the trigger opens and every gate refuses; 20 real
cycles settled before the period give the median hold and the median cost per cycle.

    .venv/bin/python bench/backtest.py                         # SQLite, histories of 10k and 100k runs
    .venv/bin/python bench/backtest.py --pg-url postgres://postgres@127.0.0.1:5432/bench_backtest
    .venv/bin/python bench/backtest.py --histories 10000 100000 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}
DAYS = 30


def configure(pg_url: str, *, keep: bool = False) -> Path:
    var = Path(tempfile.mkdtemp(prefix="bench-backtest-"))
    os.environ.update(
        SINGULARITY_VAR_DIR=str(var),
        DATABASE_URL=pg_url or f"sqlite:///{var}/bench.sqlite3",
        CELERY_BROKER_URL="memory://localhost/",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="singularity.settings",
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if pg_url and not keep:
        call_command("flush", interactive=False, verbosity=0)
    return var


def entity(slug: str):
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    frontmatter = {
        "name": slug,
        "evaluation": {"enabled": True, "method": "none"},
        "loop": {"enabled": True, "cooldownHours": 2, "trigger": {"windowRuns": 5, "minFailures": 2}},
    }
    terms, _provenance = resolve_terms("workflow", {}, frontmatter, entity_label=slug)
    return Entity.objects.create(
        slug=slug,
        target_kind="scenario",
        kind="workflow",
        path=f"features/{slug}/{slug}.scenario.md",
        name=slug,
        frontmatter=frontmatter,
        terms=terms,
        commit="0" * 40,
        evaluation_enabled=True,
        loop_enabled=True,
    )


def bad(i: int) -> bool:
    """About one run in five: bursts of three every 29 runs, and every 11th."""
    return i % 29 < 3 or i % 11 == 0


def history(target, runs: int) -> None:
    """``runs`` graded runs of ``target`` over the last 30 days, oldest first, in bulk; 20 settled cycles before."""
    from django.db import connection
    from django.utils import timezone

    from evolution.models import Cycle
    from grading.models import Execution, Grade

    now = timezone.now()
    start = now - timedelta(days=DAYS)
    step = timedelta(days=DAYS) / runs
    batch = 20_000
    for first in range(0, runs, batch):
        executions, grades = [], []
        for i in range(first, min(runs, first + batch)):
            at = start + step * (i + 1)
            execution = Execution(
                id=uuid.uuid4(),
                entity=target,
                run_kind="workflow",
                status="succeeded",
                source="demo",
                input={"text": f"ticket {i % 500}"},
                output={"result": "general"},
                started_at=at,
                completed_at=at,
                commit="0" * 40,
            )
            executions.append(execution)
            grades.append(
                Grade(
                    execution=execution,
                    entity=target,
                    status="graded",
                    reason="sampled",
                    day=at.date(),
                    booked_at=at,
                    due_at=at,
                    graded_at=at,
                    passed=not bad(i),
                    judge=JUDGE,
                )
            )
        Execution.objects.bulk_create(executions, batch_size=2000)
        Grade.objects.bulk_create(grades, batch_size=2000)
    Cycle.objects.bulk_create(
        Cycle(
            entity=target,
            key=f"bench:{target.slug}:{n}",
            origin=Cycle.Origin.GRADE,
            phase=Cycle.Phase.SETTLED,
            status=Cycle.Status.UNVALIDATED,
            analysed=True,
            spent_usd=Decimal("0.0125") * (n % 4 + 1),
            started_at=start - timedelta(days=40) + timedelta(days=n),
            completed_at=start - timedelta(days=40) + timedelta(days=n, hours=3),
            moved_at=start,
        )
        for n in range(20)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # what autovacuum does after a load this size
            cursor.execute("ANALYZE grading_execution")
            cursor.execute("ANALYZE grading_grade")


def one(target) -> dict[str, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from evolution.loop import backtest

    now = timezone.now()
    since = now - timedelta(days=DAYS, hours=1)
    with CaptureQueriesContext(connection) as seen:
        began = time.perf_counter()
        report = backtest.backtest(target, since=since, now=now)
        took = time.perf_counter() - began
    return {
        "seconds": took,
        "queries": len(seen.captured_queries),
        "runs": report["graded_runs"],
        "opened": report["opened"],
        "refused": report["refused"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg-url", default="")
    parser.add_argument("--keep", action="store_true", help="Postgres: reuse the histories a previous run built.")
    args = parser.parse_args()
    configure(args.pg_url, keep=args.keep)
    from grading.models import Entity, Execution

    database = "Postgres" if args.pg_url else "SQLite"
    print(f"{database}: a backtest of one entity's last {DAYS} days (median of {args.repeat})")
    print("history | seconds | queries | replayed | opened | refused")
    for runs in args.histories:
        began = time.perf_counter()
        target = Entity.objects.filter(slug=f"bench{runs}").first() if args.keep else None
        if target is None or Execution.objects.filter(entity=target).count() != runs:
            Entity.objects.filter(slug=f"bench{runs}").delete()
            target = entity(f"bench{runs}")
            history(target, runs)
        built = time.perf_counter() - began
        rows = [one(target) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"{runs:>7,} | {med['seconds']:7.2f} | {med['queries']:7.0f} | {med['runs']:>8,.0f} | {med['opened']:6.0f}"
            f" | {med['refused']:7,.0f}   (history built in {built:.0f} s)"
        )


if __name__ == "__main__":
    main()
