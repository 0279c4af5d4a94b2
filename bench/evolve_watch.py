#!/usr/bin/env python
"""The evolve preset's costs: a watch tick over two windows of 1,000 runs, and the trigger's evolve path.

1. The watch tick. One evolve entity (revenue objective, conversion a guard with a floor, margin a guard;
   ``trigger.windowRuns`` and ``watch.windowRuns`` 1,000) has a shipped cycle that opened on 1,000 graded runs,
   and 1,000 more were graded after its merge. ``machine.evaluate`` — the whole tick: the edit and sibling
   checks, the observed span in three baskets, the judge's health, the six rules with the bootstrap (2,000
   resamples per run metric), the settle with its lesson — is timed ``--repeat`` times, each inside a
   transaction rolled back, so every tick settles the same cycle from the same state.
2. The trigger. ``--entities`` evolve entities (``windowRuns`` 10) with ``--history`` graded runs each; grades
   land on entities drawn at random (``--seed``), ``--landings`` of them per phase, and ``trigger.on_landed``
   is called per batch of ``--batch``. Phase "fresh": no cycle yet, so each entity's first landing opens a
   cycle (its history is a ready first window); then, untimed, a landing on each entity the fresh phase never
   drew opens its first cycle; phase "held": every entity's cycle live, a landing whose window is ready is
   refused by the claim (folded into one row). Each phase prints how many cycles its timed landings opened.
   Only ``on_landed`` is timed; the broker is ``memory://`` with eager tasks off.

    .venv/bin/python bench/evolve_watch.py --db sqlite
    .venv/bin/python bench/evolve_watch.py --db postgres --pg-url postgres://postgres@127.0.0.1:5432/singularity_bench_evolve
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}
METRICS = {
    "revenue": {"kind": "computed", "direction": "max", "role": "objective"},
    "conversion": {"kind": "computed", "direction": "max", "role": "guard", "floor": 0.2},
    "margin": {"kind": "computed", "direction": "max", "role": "guard"},
}
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def configure(db: str, pg_url: str) -> None:
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


def entity(slug: str, window_runs: int) -> Any:
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    frontmatter = {
        "name": slug,
        "evaluation": {"enabled": True, "method": "none", "metrics": METRICS},
        "loop": {"enabled": True, "preset": "evolve", "trigger": {"windowRuns": window_runs}, "cooldownHours": 0},
    }
    label = f"features/bench/{slug}.scenario.md"
    terms, provenance = resolve_terms("workflow", {}, frontmatter, entity_label=label)
    return Entity(
        slug=slug,
        kind="workflow",
        target_kind="scenario",
        path=label,
        name=slug,
        body="Price it.",
        frontmatter=frontmatter,
        terms=terms,
        provenance=provenance,
        evaluation_enabled=True,
        loop_enabled=True,
    )


def grades_for(pairs: list[tuple[Any, datetime]], rng: random.Random, shift: float = 0.0) -> list[Any]:
    """Bulk-create one run and its grade per (entity, graded at); return the grades."""
    from grading.models import Execution, Grade

    runs, grades = [], []
    for owner, at in pairs:
        run = Execution(
            id=uuid.uuid4(),
            entity=owner,
            run_kind="workflow",
            status="succeeded",
            source="schedule",
            started_at=at - timedelta(seconds=2),
            completed_at=at - timedelta(seconds=1),
        )
        runs.append(run)
        grades.append(
            Grade(
                execution=run,
                entity=owner,
                status="graded",
                reason="sampled",
                day=at.date(),
                booked_at=at - timedelta(seconds=1),
                due_at=at - timedelta(seconds=1),
                graded_at=at,
                passed=True,
                metrics={
                    "revenue": round(rng.gauss(1200 + shift, 150), 2),
                    "conversion": round(rng.gauss(0.4, 0.03), 4),
                    "margin": 0.6,
                },
                judge=JUDGE,
            )
        )
    Execution.objects.bulk_create(runs, batch_size=500)
    return Grade.objects.bulk_create(grades, batch_size=500)


def bench_watch(repeat: int) -> dict[str, list[float]]:
    from django.db import transaction

    from evolution.loop import machine
    from evolution.models import Cycle, Round
    from grading.models import Entity

    rng = random.Random(1)
    owner = entity("evolve-watch", 1000)
    owner.save()
    owner = Entity.objects.get(pk=owner.pk)
    before = grades_for([(owner, T0 - timedelta(days=2, minutes=-i)) for i in range(1000)], rng)
    merged = T0 - timedelta(hours=20)
    cycle = Cycle.objects.create(
        entity=owner,
        key="bench:evolve",
        claim=owner.pk,
        origin=Cycle.Origin.CADENCE,
        phase=Cycle.Phase.WATCHING,
        analysed=True,
        judge=JUDGE,
        terms=owner.terms,
        window={"from": None, "to": merged.isoformat(), "runIds": [str(g.execution_id) for g in before]},
        started_at=merged - timedelta(hours=1),
        merged_at=merged,
        watch_opened_at=merged,
        watch_deadline=merged + timedelta(days=14),
        watch_window={"progress": {"have": 0, "need": 1000, "unit": "graded runs"}, "minFailures": 2},
    )
    Round.objects.create(cycle=cycle, number=1, status=Round.Status.MERGED, pr_number=1, merge_sha="a" * 40)
    grades_for([(owner, merged + timedelta(minutes=1 + i)) for i in range(1000)], rng, shift=150)
    now = T0
    times: dict[str, list[float]] = {"tick": [], "tick_cpu": [], "query": [], "cpu": []}
    status = None
    for _ in range(repeat + 1):
        fresh = Cycle.objects.get(pk=cycle.pk)
        try:
            with transaction.atomic():
                started, cpu = time.perf_counter(), time.process_time()
                status = machine.evaluate(fresh, now)
                times["tick"].append((time.perf_counter() - started) * 1000)
                times["tick_cpu"].append((time.process_time() - cpu) * 1000)
                raise _Rollback
        except _Rollback:
            pass
        # The floors, beside each tick so they share its load: a trivial query, and a fixed piece of Python.
        started = time.perf_counter()
        Cycle.objects.filter(pk=cycle.pk).exists()
        times["query"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        sum(i * i for i in range(100_000))
        times["cpu"].append((time.perf_counter() - started) * 1000)
    print(f"watch tick settled {status}: windows of 1,000 runs each")
    return {name: values[1:] for name, values in times.items()}  # the first warms the process


class _Rollback(Exception):
    pass


def bench_trigger(entities: int, history: int, landings: int, batch: int, seed: int) -> dict[str, float]:
    from evolution.loop import trigger
    from grading.models import Entity

    Entity.objects.bulk_create([entity(f"evolve-{i:04d}", 10) for i in range(entities)])
    owners = list(Entity.objects.filter(slug__startswith="evolve-0").order_by("slug")) + list(
        Entity.objects.filter(slug__regex=r"^evolve-\d").exclude(slug__startswith="evolve-0")
    )
    owners = list({o.pk: o for o in owners}.values())
    rng = random.Random(seed)
    start = T0 - timedelta(days=3)
    grades_for([(o, start + timedelta(minutes=i)) for o in owners for i in range(history)], rng)
    from evolution.models import Cycle

    rates: dict[str, float] = {}
    clock = [T0]

    def land(on: list[Any]) -> float:
        made = grades_for([(owner, tick()) for owner in on], rng)
        started = time.perf_counter()
        trigger.on_landed([g.pk for g in made], now=clock[0])
        return time.perf_counter() - started

    def tick() -> datetime:
        clock[0] += timedelta(milliseconds=10)
        return clock[0]

    for phase in ("fresh", "held"):
        if phase == "held":
            # Every entity's first cycle opens before the held phase is timed (untimed): a landing on an entity the
            # fresh phase never drew would open its first cycle inside "held" (about one in seven at 2,000
            # landings on 1,000 entities), which is the fresh path's cost, not the held one's.
            live = set(Cycle.objects.filter(status="", analysed=True).values_list("entity_id", flat=True))
            missed = [owner for owner in owners if owner.pk not in live]
            for start in range(0, len(missed), batch):
                land(missed[start : start + batch])
            print(
                f"   before the held phase: {len(missed):,} entities the fresh phase never drew opened their first cycle"
            )
        opened = Cycle.objects.filter(analysed=True).count()
        elapsed = sum(land([rng.choice(owners) for _ in range(batch)]) for _ in range(landings // batch))
        rates[phase] = landings / elapsed
        print(
            f"   {phase}: {Cycle.objects.filter(analysed=True).count() - opened:,} cycles opened in the timed landings"
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/singularity_bench_evolve")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--history", type=int, default=12)
    parser.add_argument("--landings", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--watch-only", action="store_true", help="time the watch tick only, not the trigger")
    args = parser.parse_args()
    configure(args.db, args.pg_url)
    print(f"load average {os.getloadavg()[0]:.2f} ({args.db})")
    measured = bench_watch(args.repeat)
    ticks, query, cpu = measured["tick"], measured["query"], measured["cpu"]
    print(
        f"watch tick: median {statistics.median(ticks):.1f} ms, slowest {max(ticks):.1f} ms, "
        f"fastest {min(ticks):.1f} ms over {len(ticks)}; this process's CPU time in it: median "
        f"{statistics.median(measured['tick_cpu']):.1f} ms, fastest {min(measured['tick_cpu']):.1f} ms"
    )
    print(
        f"floors in the same run: a trivial query median {statistics.median(query):.2f} ms; "
        f"the fixed Python (100,000 squares summed) median {statistics.median(cpu):.1f} ms, fastest {min(cpu):.1f} ms "
        f"— the tick is {statistics.median(ticks) / statistics.median(cpu):.1f}× the Python floor"
    )
    if args.watch_only:
        return
    rates = bench_trigger(args.entities, args.history, args.landings, args.batch, args.seed)
    for phase, rate in rates.items():
        print(f"trigger, evolve path, {phase}: {rate:.0f} landing grades/s in batches of {args.batch}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
