#!/usr/bin/env python
"""Throughput of the loop's trigger: grades landing on entities in the loop with deep histories.

``--entities`` (default 1,000) workflow entities are in the loop (repair
preset: the last 5 graded runs, 2 bad with the landed run itself bad; graded
without a judge, ``duration_ms`` an objective with a target), made directly
as ``Entity`` rows with their terms resolved by the real resolver. Each is
given a history of graded runs, measured first at 10 runs an entity and then
at ``--history`` (default 1,000: a million grades in all). The history is
pre-filled set-based: one template entity's runs are built with
``bulk_create`` and copied in SQL to every entity under new ids (two in five
of them failed, deterministically varied by entity), then ``VACUUM ANALYZE``
and a checkpoint.

Fresh grades then land: runs and their grades are inserted (graded now, on
entities drawn at random, two in five bad; ``--seed`` makes the draw
repeatable) and ``evolution.trigger.on_landed`` is called for each batch of
``--batch`` landings (default 100, as grading settles a batch). Only
``on_landed`` is timed. The broker is ``memory://`` with eager tasks off, so
the analysis a new cycle enqueues costs one publish (the ``on_commit`` fires
at once in autocommit). No analysis ever runs, so an entity's first opened
cycle stays live and its later bad landings that pass the count are refused
by its claim (folded into one skipped cycle).

At each depth: ``--landings`` grades from a fresh start (no cycle yet: most
entities open their first one), as many again with those cycles held (the
steady state: bad landings are refused), then ``--singles`` grades one per
call from a fresh start. Before each fresh start every cycle and every
landed run is deleted and the draw reseeded, so both depths land the same
grades on the same entities with the same outcomes: only the depth differs.

It prints landing grades per second (mean, median tenth, slowest tenth),
where the time went (the batch read, the decision, opening or refusing),
how the landings came out (healthy, withheld by the count, opened, refused),
and queries per landing grade for healthy and for bad grades: in a batch of
healthy grades and one of bad ones, and each landing alone by its outcome.
The counts must be the same at both depths. The machine's load average is
printed at the start and the end: the figures are worth what it lets them be.

    .venv/bin/python bench/loop_trigger.py --db sqlite
    .venv/bin/python bench/loop_trigger.py --db postgres --pg-url postgres://postgres@127.0.0.1:5432/singularity_bench_loop
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The share of landing (and historical) grades that are bad.
BAD_SHARE = 0.4
#: The entities' evaluation block: no judge, the run's duration an objective with a target.
EVALUATION = {"enabled": True, "method": "none", "metrics": {"duration_ms": {"role": "objective", "target": 60000}}}
JUDGE = {"model": "none", "method": "none", "method_hash": "", "loop_hash": "", "role_hash": "none"}
#: How far back the history reaches (the deepest run); every landing is newer than all of it.
HISTORY_SPAN = timedelta(days=30)


def configure(db: str, pg_url: str) -> None:
    """Point Django at a fresh database (a temp SQLite file, or ``pg_url`` dropped and created) and migrate it."""
    var = tempfile.mkdtemp(prefix="bench-var-")
    os.environ["SINGULARITY_VAR_DIR"] = var
    os.environ["CELERY_BROKER_URL"] = "memory://localhost/"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
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
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_entities(n: int) -> tuple[list[Any], Any]:
    """Create ``n`` entities in the loop (repair) and one template entity out of it; return (entities, template)."""
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    rows = []
    for i in range(n + 1):
        slug = f"bench-{i:04d}" if i < n else "bench-template"
        looped = i < n
        frontmatter = {"name": slug, "evaluation": EVALUATION, "loop": {"enabled": looped, "preset": "repair"}}
        label = f"features/bench/{slug}.scenario.md"
        terms, provenance = resolve_terms("workflow", {}, frontmatter, entity_label=label)
        rows.append(
            Entity(
                slug=slug,
                kind="workflow",
                target_kind="scenario",
                path=label,
                name=slug,
                body="Sort the ticket.",
                frontmatter=frontmatter,
                terms=terms,
                provenance=provenance,
                evaluation_enabled=terms["evaluation"]["enabled"],
                loop_enabled=terms["loop"]["enabled"],
            )
        )
    Entity.objects.bulk_create(rows)
    made = list(Entity.objects.filter(slug__startswith="bench-").order_by("slug"))
    template = next(e for e in made if e.slug == "bench-template")
    return [e for e in made if e is not template], template


def extend_history(
    entities: list[Any], template: Any, *, start: int, depth: int, newest: datetime, step: timedelta
) -> None:
    """Give every entity its history runs ``start`` .. ``depth - 1`` (run j graded ``j`` steps before ``newest``).

    The template entity's runs are built with ``bulk_create``, copied in SQL to
    every looped entity under new ids (``passed`` varied by entity and run: two
    in five fail), then deleted; then the tables are vacuumed.
    """
    from grading.models import Execution, Grade

    if depth <= start:
        return
    started = time.perf_counter()
    executions, grades = [], []
    for j in range(start, depth):
        done = newest - j * step
        execution = Execution(
            id=uuid.uuid4(),
            entity=template,
            run_kind="workflow",
            status=Execution.Status.SUCCEEDED,
            source=Execution.Source.API,
            input={"text": "old ticket"},
            output={"result": "general"},
            duration_ms=1000 + j,  # the copy reads j back from here to vary the outcome
            sampling=Execution.Sampling.SAMPLED,
            started_at=done - timedelta(seconds=1),
            completed_at=done,
        )
        executions.append(execution)
        grades.append(
            Grade(
                execution=execution,
                entity=template,
                status=Grade.Status.GRADED,
                day=done.date(),
                booked_at=done,
                due_at=done,
                started_at=done,
                graded_at=done,
                passed=True,
                metrics={"cost_usd": "0", "duration_ms": 1000 + j, "tool_failures": 0},
                judge=JUDGE,
            )
        )
    Execution.objects.bulk_create(executions, batch_size=2000)
    Grade.objects.bulk_create(grades, batch_size=2000)
    copy_to_entities(template)
    Grade.objects.filter(entity=template).delete()
    Execution.objects.filter(entity=template).delete()
    settle()
    have = Grade.objects.filter(graded_at__lte=newest).count()
    print(
        f"   history: {len(entities):,} entities x {depth:,} graded runs = {have:,} "
        f"({time.perf_counter() - started:.0f} s to pre-fill {len(entities) * (depth - start):,})"
    )


def copy_to_entities(template: Any) -> None:
    """Copy the template's runs and grades to every looped entity, set-based, under new ids."""
    from django.db import connection

    from grading.models import Entity, Execution, Grade

    executions, grades = Execution._meta.db_table, Grade._meta.db_table
    quote = connection.ops.quote_name
    execution_columns = [
        quote(f.column) for f in Execution._meta.concrete_fields if f.column not in ("id", "entity_id")
    ]
    grade_columns = [
        quote(f.column) for f in Grade._meta.concrete_fields if f.column not in ("execution_id", "entity_id", "passed")
    ]
    new_id = "gen_random_uuid()" if connection.vendor == "postgresql" else "lower(hex(randomblob(16)))"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_ids")
        cursor.execute(
            f"CREATE TEMP TABLE bench_ids AS SELECT e.id AS old, n.id AS entity_id, {new_id} AS new "
            f"FROM {executions} e CROSS JOIN {Entity._meta.db_table} n "
            f"WHERE e.entity_id = %s AND n.loop_enabled = %s",
            [template.pk, True],
        )
        cursor.execute(
            f"INSERT INTO {executions} (id, entity_id, {', '.join(execution_columns)}) "
            f"SELECT m.new, m.entity_id, {', '.join('e.' + c for c in execution_columns)} "
            f"FROM bench_ids m JOIN {executions} e ON e.id = m.old"
        )
        cursor.execute(
            f"INSERT INTO {grades} (execution_id, entity_id, passed, {', '.join(grade_columns)}) "
            f"SELECT m.new, m.entity_id, ((m.entity_id * 37 + e.duration_ms) % 5) >= 2, "
            f"{', '.join('g.' + c for c in grade_columns)} "
            f"FROM bench_ids m JOIN {executions} e ON e.id = m.old JOIN {grades} g ON g.execution_id = m.old"
        )
        cursor.execute("DROP TABLE bench_ids")


def settle() -> None:
    """Vacuum, analyse and checkpoint (Postgres) or checkpoint the WAL (SQLite) so the pre-fill's work is done."""
    from django.db import connection

    from evolution.models import Cycle
    from grading.models import Execution, Grade

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for model in (Execution, Grade, Cycle):
                cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class StageTimer:
    """Adds up the wall time spent inside module functions (and counts their calls) through timing wrappers.

    A call made inside another call this timer wraps is counted in that one (no time counted twice).
    """

    def __init__(self, module: Any, name: str, weight: Any = None) -> None:
        self.spent = 0.0
        self.calls = 0
        self.depth = 0
        self.also(module, name, weight)

    def also(self, module: Any, name: str, weight: Any = None) -> StageTimer:
        """Time and count ``module.name`` too; ``weight(args, kwargs)``: how many a call stands for (else 1)."""
        original = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return original(*args, **kwargs)
            self.depth += 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.depth -= 1
                self.spent += time.perf_counter() - started
                self.calls += weight(args, kwargs) if weight else 1

        setattr(module, name, timed)
        return self

    def reset(self) -> None:
        self.spent, self.calls = 0.0, 0


class Lander:
    """Lands fresh grades (inserted, untimed) on entities drawn at random, two in five bad, from one seed."""

    def __init__(self, entities: list[Any], seed: int) -> None:
        self.entities = entities
        self.rng = random.Random(seed)

    def land(self, n: int, *, bad: bool | None = None) -> list[tuple[str, bool]]:
        """Insert ``n`` graded runs, graded now one microsecond apart; return [(grade id, bad)] in order."""
        from django.utils import timezone

        from grading.models import Execution, Grade

        at = timezone.now()
        executions, grades, landed = [], [], []
        for i in range(n):
            entity = self.rng.choice(self.entities)
            is_bad = self.rng.random() < BAD_SHARE if bad is None else bad
            graded_at = at + timedelta(microseconds=i)
            duration = 90_000 if is_bad else 1_200
            execution = Execution(
                id=uuid.uuid4(),
                entity=entity,
                run_kind="workflow",
                status=Execution.Status.SUCCEEDED,
                source=Execution.Source.API,
                input={"text": "new ticket"},
                output={"result": "billing"},
                duration_ms=duration,
                sampling=Execution.Sampling.SAMPLED,
                started_at=graded_at - timedelta(milliseconds=duration + 10),
                completed_at=graded_at - timedelta(milliseconds=10),
            )
            executions.append(execution)
            grades.append(
                Grade(
                    execution=execution,
                    entity=entity,
                    status=Grade.Status.GRADED,
                    day=graded_at.date(),
                    booked_at=graded_at,
                    due_at=graded_at,
                    started_at=graded_at,
                    graded_at=graded_at,
                    passed=not is_bad,
                    metrics={"cost_usd": "0", "duration_ms": duration, "tool_failures": 0},
                    judge=JUDGE,
                )
            )
            landed.append((str(execution.id), is_bad))
        Execution.objects.bulk_create(executions)
        Grade.objects.bulk_create(grades)
        return landed


def measure(lander: Lander, landings: int, batch: int, timers: dict[str, StageTimer]) -> dict[str, Any]:
    """Land ``landings`` grades in calls of ``batch``; return throughput, stage times and outcomes.

    Only ``on_landed`` is timed; the inserts of the landing runs are not.
    """
    from evolution.loop.trigger import on_landed

    for timer in timers.values():
        timer.reset()
    elapsed, done, opened, bad = 0.0, 0, 0, 0
    tenths: list[float] = []
    tenth_time, tenth_done = 0.0, 0
    while done < landings:
        landed = lander.land(min(batch, landings - done))
        ids = [g for g, _ in landed]
        started = time.perf_counter()
        opened += on_landed(ids)
        spent = time.perf_counter() - started
        elapsed += spent
        done += len(ids)
        bad += sum(1 for _, b in landed if b)
        tenth_time += spent
        tenth_done += len(ids)
        if tenth_done >= max(batch, landings // 10) or done >= landings:
            tenths.append(tenth_done / tenth_time)
            tenth_time, tenth_done = 0.0, 0
    tenths.sort()
    decide, opening, refused = timers["decide"], timers["open"], timers["refuse"]
    return {
        "per_s": landings / elapsed,
        "median": statistics.median(tenths),
        "slowest": tenths[0],
        "ms": elapsed * 1000 / landings,
        "read_ms": (elapsed - decide.spent - opening.spent) * 1000 / landings,
        "decide_ms": decide.spent * 1000 / landings,
        "open_ms": opening.spent * 1000 / landings,
        "landings": landings,
        "bad": bad,
        "opened": opened,
        "refused": refused.calls,
    }


def count_queries(lander: Lander, batch: int, singles: int, refusals: StageTimer) -> dict[str, Any]:
    """Queries per landing grade: a batch of healthy grades, a batch of bad ones, and ``singles`` landings alone.

    Each landing alone is filed by what it came to (healthy, withheld by the
    count, opened, refused); returns {"batch": {...}, "single": {kind: [counts]}}.
    """
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evolution.loop.trigger import on_landed

    per_batch: dict[str, float] = {}
    for label, bad in (("healthy", False), ("bad", True)):
        ids = [g for g, _ in lander.land(batch, bad=bad)]
        with CaptureQueriesContext(connection) as captured:
            on_landed(ids)
        per_batch[label] = len(captured.captured_queries) / batch
    single: dict[str, list[int]] = defaultdict(list)
    for _ in range(singles):
        [(grade_id, bad)] = lander.land(1)
        before = refusals.calls
        with CaptureQueriesContext(connection) as captured:
            opened = on_landed([grade_id])
        was_refused = refusals.calls > before
        kind = "healthy" if not bad else "opened" if opened else "refused" if was_refused else "withheld"
        single[kind].append(len(captured.captured_queries))
    return {"batch": per_batch, "single": dict(single)}


def reset(lander: Lander, seed: int, newest: datetime) -> None:
    """Forget every cycle and every landed run (graded after ``newest``) and reseed the landings; then vacuum.

    Each measurement so starts from the same history, lands the same grades
    on the same entities and comes to the same outcomes: only the depth of
    the history (or the batch size) differs between them.
    """
    from evolution.models import Cycle
    from grading.models import Execution, Grade

    Cycle.objects.all().delete()
    Grade.objects.filter(graded_at__gt=newest).delete()
    Execution.objects.filter(completed_at__gt=newest).delete()
    lander.rng = random.Random(seed)
    settle()


def warm_up(lander: Lander, landings: int) -> None:
    """Land ``landings`` grades once, in batches and alone (imports, the broker's connection, the caches)."""
    from evolution.loop.trigger import on_landed

    for _ in range(landings // 100):
        on_landed([g for g, _ in lander.land(100)])
    for _ in range(landings // 10):
        on_landed([g for g, _ in lander.land(1)])


def attach_timers() -> dict[str, StageTimer]:
    """Time the trigger's decision and the opening (or refusing) of cycles; count the refusals."""
    from evolution.loop import machine, opening, trigger

    return {
        "decide": StageTimer(trigger, "decide"),
        "open": StageTimer(machine, "open_cycle"),
        # Refusals counted one a landing: a batch records them all at once, an entity's folded together.
        "refuse": StageTimer(opening, "record_refusal", weight=lambda args, kwargs: int(kwargs.get("times", 1))).also(
            opening,
            "record_refusals_many",
            weight=lambda args, kwargs: sum(times for found in args[0].values() for _w, _a, times in found),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/singularity_bench_loop")
    parser.add_argument("--entities", type=int, default=1000, help="entities in the loop")
    parser.add_argument("--history", type=int, default=1000, help="graded runs per entity for the deep measurement")
    parser.add_argument("--landings", type=int, default=4000, help="grades landed per batched measurement")
    parser.add_argument("--singles", type=int, default=1000, help="grades landed one per call")
    parser.add_argument("--batch", type=int, default=100, help="landing grades per on_landed call")
    parser.add_argument("--seed", type=int, default=5, help="seed of the landings' entities and outcomes")
    args = parser.parse_args()
    configure(args.db, args.pg_url)

    from django.db import connection
    from django.utils import timezone

    timers = attach_timers()
    entities, template = make_entities(args.entities)
    lander = Lander(entities, args.seed)
    newest = timezone.now() - timedelta(days=1)
    step = HISTORY_SPAN / max(args.history, 10)
    print(
        f"database: {connection.vendor}  entities: {len(entities):,}  "
        f"landings: {args.landings:,} in batches of {args.batch}, then {args.singles:,} one per call  "
        f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    results: list[tuple[int, str, dict[str, Any]]] = []
    counts: dict[int, dict[str, Any]] = {}
    built = 0
    for depth in sorted({10, args.history}):
        extend_history(entities, template, start=built, depth=depth, newest=newest, step=step)
        built = depth
        if not counts:
            warm_up(lander, args.landings)
        reset(lander, args.seed, newest)
        results.append((depth, f"batch {args.batch}, fresh", measure(lander, args.landings, args.batch, timers)))
        results.append((depth, f"batch {args.batch}, held", measure(lander, args.landings, args.batch, timers)))
        reset(lander, args.seed, newest)
        results.append((depth, "batch 1, fresh", measure(lander, args.singles, 1, timers)))
        reset(lander, args.seed, newest)
        counts[depth] = count_queries(lander, args.batch, 300, timers["refuse"])
    print(f"   load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for depth, label, m in results:
        n = m["landings"]
        withheld = m["bad"] - m["opened"] - m["refused"]
        print(
            f"-- history {depth:>5,} {label:<16}: {m['per_s']:5.0f} landing grades/s "
            f"(median tenth {m['median']:.0f}, slowest {m['slowest']:.0f}), {m['ms']:.2f} ms each "
            f"(read {m['read_ms']:.2f}, decide {m['decide_ms']:.2f}, open/refuse {m['open_ms']:.2f}); "
            f"healthy {1 - m['bad'] / n:.0%}, withheld {withheld / n:.1%}, opened {m['opened'] / n:.1%}, "
            f"refused {m['refused'] / n:.1%}"
        )
    for depth, queries in counts.items():
        spread = {k: Counter(v) for k, v in sorted(queries["single"].items())}
        print(
            f"   queries per landing at history {depth:,}: batch of {args.batch} healthy "
            f"{queries['batch']['healthy']:.2f}, bad {queries['batch']['bad']:.2f}; alone: "
            + ", ".join(f"{k} {dict(sorted(c.items()))}" for k, c in spread.items())
        )


if __name__ == "__main__":
    main()
