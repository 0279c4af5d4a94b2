#!/usr/bin/env python
"""Throughput of reporting and grading executions under ``method: none``.

Reports runs through ``grading.executions.report_many`` in batches; each
batch is booked when it commits (``grading.booking.on_terminal_many``: the
sampler, the daily slots, the ``Grade`` rows) and, its bookings being due now
under ``method: none``, graded together in this process right after the
booking commits (``grading.grade.grade_many``). Two entities of a copy of the
demo brain are measured:

- ``triage``: a workflow graded by its loop module's ``measure()`` (accuracy
  against the ticket's label), so every grading imports the module at the
  entity's commit;
- ``plain``: a scenario graded on the engine's catalog alone (no loop module).

Each is measured with 10,000 and then ``--history`` (default 1,000,000)
executions already recorded for it (graded, spread over the last 30 days),
pre-filled with ``bulk_create`` in batches (past 10,000, doubled in SQL:
see ``prefill``). It prints executions per second
reported-and-graded, and queries per execution, which must not grow with the
history.

    .venv/bin/python bench/grading_throughput.py --db sqlite --history 100000
    .venv/bin/python bench/grading_throughput.py --db postgres --pg-url postgres://postgres@127.0.0.1:5432/singularity_bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN_SCENARIO = """---
name: Plain
description: Graded on the engine's own measurements only.
evaluation:
  enabled: true
  method: none
  metrics:
    duration_ms: {role: objective, target: 60000}
---

Answer ok.
"""

BENCH_MANIFEST = """# The bench's manifest: every run graded, no daily ceiling.
evaluation:
  sample: {rate: 1}
"""


def make_brain() -> Path:
    """Return a bare git repository holding a copy of the demo brain with an uncapped manifest and a plain scenario."""
    from singularity.brain.git import init_bare_from

    work = Path(tempfile.mkdtemp(prefix="bench-brain-"))
    source = work / "source"
    shutil.copytree(ROOT / "demo_brain", source)
    (source / "constitution/MANIFEST.yaml").write_text(BENCH_MANIFEST)
    plain = source / "features/bench/plain"
    plain.mkdir(parents=True)
    (plain / "plain.scenario.md").write_text(PLAIN_SCENARIO)
    init_bare_from(source, work / "brain.git")
    return work / "brain.git"


def configure(db: str, pg_url: str) -> None:
    var = tempfile.mkdtemp(prefix="bench-var-")
    os.environ["SINGULARITY_VAR_DIR"] = var
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "true"
    os.environ["LOG_LEVEL"] = "WARNING"
    if db == "sqlite":
        os.environ["DATABASE_URL"] = f"sqlite:///{var}/bench.sqlite3"
    else:
        import psycopg

        base, _, name = pg_url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = pg_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "singularity.settings"
    os.environ["BRAIN_REPO"] = str(make_brain())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def prefill(entity: Any, upto: int, batch: int = 5000) -> None:
    """Give ``entity`` ``upto`` graded executions: the first BUILT_HISTORY built with ``bulk_create``, the rest copied.

    Building a million model objects costs most of an hour on a busy small
    machine, so past BUILT_HISTORY the history is doubled set-based in SQL
    (``copy_history``): the same rows under new ids, which is all the
    measurement needs of them.
    """
    from grading.models import Execution

    started = time.perf_counter()
    build(entity, min(upto, BUILT_HISTORY), batch)
    copy_history(entity, upto)
    settle()
    have = Execution.objects.filter(entity=entity).count()
    print(f"   history of {entity.slug}: {have:,} executions ({time.perf_counter() - started:.0f} s to pre-fill)")


def settle() -> None:
    """Let the database finish with the pre-fill before timing: vacuum and checkpoint (Postgres), WAL checkpoint (SQLite).

    Otherwise the autovacuum and the checkpoint the pre-fill set off run
    during the first measurement and halve it.
    """
    from django.db import connection

    from grading.models import Execution, Grade

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for model in (Execution, Grade):
                cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


#: How much of the history is built as model objects with bulk_create.
BUILT_HISTORY = 10_000


def build(entity: Any, upto: int, batch: int) -> None:
    """Add graded executions of ``entity`` with ``bulk_create`` until it has ``upto``, completed over the last 30 days."""
    from django.utils import timezone

    from grading.executions import run_kind_for
    from grading.models import Execution, Grade

    have = Execution.objects.filter(entity=entity).count()
    now = timezone.now()
    kind = run_kind_for(entity)
    while have < upto:
        n = min(batch, upto - have)
        executions, grades = [], []
        for i in range(n):
            done = now - timedelta(days=1, seconds=(have + i) * 2_592_000 // max(upto, 1))
            execution = Execution(
                id=uuid.uuid4(),
                entity=entity,
                run_kind=kind,
                status=Execution.Status.SUCCEEDED,
                source=Execution.Source.API,
                input={"text": "old ticket", "_expected": "general"},
                output={"result": "general"},
                duration_ms=1000,
                commit=entity.commit,
                definition_hash=entity.definition_hash,
                sampling=Execution.Sampling.SAMPLED,
                started_at=done - timedelta(seconds=1),
                completed_at=done,
            )
            executions.append(execution)
            grades.append(
                Grade(
                    execution=execution,
                    entity=entity,
                    status=Grade.Status.GRADED,
                    day=done.date(),
                    booked_at=done,
                    due_at=done,
                    started_at=done,
                    graded_at=done,
                    passed=True,
                    metrics={"accuracy": 1.0, "cost_usd": "0", "duration_ms": 1000, "tool_failures": 0},
                    judge={"model": "none", "method": "none", "method_hash": "", "loop_hash": "", "role_hash": "none"},
                )
            )
        Execution.objects.bulk_create(executions, batch_size=batch)
        Grade.objects.bulk_create(grades, batch_size=batch)
        have += n


def copy_history(entity: Any, upto: int) -> None:
    """Double ``entity``'s executions and their grades in SQL, under new ids, until it has ``upto``; then ANALYZE."""
    from django.db import connection

    from grading.models import Execution, Grade

    executions, grades = Execution._meta.db_table, Grade._meta.db_table
    quote = connection.ops.quote_name
    execution_columns = [quote(f.column) for f in Execution._meta.concrete_fields if f.column != "id"]
    grade_columns = [quote(f.column) for f in Grade._meta.concrete_fields if f.column != "execution_id"]
    new_id = "gen_random_uuid()" if connection.vendor == "postgresql" else "lower(hex(randomblob(16)))"
    have = Execution.objects.filter(entity=entity).count()
    with connection.cursor() as cursor:
        while have < upto:
            n = min(have, upto - have)
            cursor.execute("DROP TABLE IF EXISTS bench_ids")
            cursor.execute(
                f"CREATE TEMP TABLE bench_ids AS SELECT id AS old, {new_id} AS new "
                f"FROM {executions} WHERE entity_id = %s LIMIT %s",
                [entity.pk, n],
            )
            cursor.execute(
                f"INSERT INTO {executions} (id, {', '.join(execution_columns)}) "
                f"SELECT m.new, {', '.join('e.' + c for c in execution_columns)} "
                f"FROM bench_ids m JOIN {executions} e ON e.id = m.old"
            )
            cursor.execute(
                f"INSERT INTO {grades} (execution_id, {', '.join(grade_columns)}) "
                f"SELECT m.new, {', '.join('g.' + c for c in grade_columns)} "
                f"FROM bench_ids m JOIN {grades} g ON g.execution_id = m.old"
            )
            have += n
        cursor.execute("DROP TABLE IF EXISTS bench_ids")
        cursor.execute("ANALYZE")


def report_rows(entity: Any, n: int, offset: int) -> list[tuple[Any, dict[str, Any]]]:
    from django.utils import timezone

    end = timezone.now()
    start = (end - timedelta(seconds=2)).isoformat()
    labels = ("billing", "technical", "general")
    return [
        (
            entity,
            {
                "status": "succeeded",
                "started_at": start,
                "completed_at": end.isoformat(),
                "cost_usd": "0.000125",
                "input": {"text": f"ticket {offset + i}", "_expected": labels[(offset + i) % 3]},
                "output": {"result": labels[(offset + i) % 2]},
            },
        )
        for i in range(n)
    ]


class StageTimer:
    """Adds up the wall time spent inside a module function, by replacing it with a timing wrapper."""

    def __init__(self, module: Any, name: str) -> None:
        self.spent = 0.0
        original = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - started

        setattr(module, name, timed)


def measure(entity: Any, runs: int, batch: int, timers: dict[str, StageTimer]) -> dict[str, float]:
    """Report ``runs`` runs of ``entity`` in batches of ``batch``; return throughput, stage times and queries per execution.

    The timed batches run without query capture (it slows Django down); one
    more batch is captured to count the queries.
    """
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    from grading.executions import report_many
    from grading.models import Grade

    before = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED).count()
    report_many(report_rows(entity, batch, -batch), user=None)  # warm up: imports, module cache, connections
    warm = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED).count() - before
    if warm != batch:
        raise SystemExit(f"{entity}: {warm} of {batch} warm-up runs graded; is grading.grade installed?")
    for timer in timers.values():
        timer.spent = 0.0
    elapsed = 0.0
    done = 0
    rounds: list[float] = []  # executions per second of each tenth of the runs
    round_time, round_done = 0.0, 0
    while done < runs:
        n = min(batch, runs - done)
        rows = report_rows(entity, n, done)
        started = time.perf_counter()
        report_many(rows, user=None)
        spent = time.perf_counter() - started
        elapsed += spent
        done += n
        round_time += spent
        round_done += n
        if round_done >= max(batch, runs // 10) or done >= runs:
            rounds.append(round_done / round_time)
            round_time, round_done = 0.0, 0
    booking = timers["booking"].spent
    grading = timers["grading"].spent
    reset_queries()
    with CaptureQueriesContext(connection) as captured:
        report_many(report_rows(entity, batch, runs), user=None)
    graded = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED).count() - before - warm
    failed = list(Grade.objects.filter(entity=entity, status=Grade.Status.FAILED).values_list("error", flat=True)[:3])
    if graded != runs + batch:
        raise SystemExit(f"{entity}: only {graded} of {runs + batch} runs graded; grading failures: {failed}")
    rounds.sort()
    return {
        "per_s": runs / elapsed,
        "slowest": rounds[0],
        "median": rounds[len(rounds) // 2],
        "ms": elapsed * 1000 / runs,
        "insert_ms": (elapsed - booking) * 1000 / runs,
        "booking_ms": (booking - grading) * 1000 / runs,
        "grading_ms": grading * 1000 / runs,
        "queries": len(captured.captured_queries) / batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/singularity_bench")
    parser.add_argument("--runs", type=int, default=2000, help="runs reported per measurement")
    parser.add_argument("--batch", type=int, default=100, help="runs per report_many call")
    parser.add_argument("--history", type=int, default=1_000_000, help="executions pre-filled for the long run")
    args = parser.parse_args()
    configure(args.db, args.pg_url)

    from django.db import connection

    from grading.models import Entity
    from grading.sync import sync_brain

    sync_brain()
    entities = {e.slug: e for e in Entity.objects.filter(slug__in=["triage", "plain"])}
    for slug, entity in entities.items():
        if entity.load_error:
            raise SystemExit(f"{slug}: {entity.load_error}")
    import grading.booking
    import grading.grade

    # Booking includes the grading: it runs when the booking's transaction commits.
    timers = {
        "booking": StageTimer(grading.booking, "on_terminal_many"),
        "grading": StageTimer(grading.grade, "grade_many"),
    }
    results: dict[tuple[str, int], dict[str, float]] = {}
    print(f"database: {connection.vendor}  runs per measurement: {args.runs:,} in batches of {args.batch}")
    for history in sorted({10_000, args.history}):
        for slug in ("plain", "triage"):
            entity = entities[slug]
            prefill(entity, history)
            results[(slug, history)] = measure(entity, args.runs, args.batch, timers)
    for (slug, history), m in results.items():
        print(
            f"-- {slug:<7} history {history:>9,}: {m['per_s']:7.0f} executions/s reported and graded "
            f"(median tenth {m['median']:.0f}, slowest {m['slowest']:.0f}), "
            f"{m['ms']:.2f} ms each (insert {m['insert_ms']:.2f}, booking {m['booking_ms']:.2f}, "
            f"grading {m['grading_ms']:.2f}), {m['queries']:.2f} queries per execution"
        )


if __name__ == "__main__":
    main()
