#!/usr/bin/env python
"""The fleet's HTMX refresh while grades land: issue 18's "stays under the goal while grades land at the trigger's
benchmark rate".

Uses the data set ``bench/dashboard_scale.py`` builds (1,000 entities in the loop, ``--runs`` graded runs each;
built here too when the database is empty). The fleet's table (``/evolution/`` with ``HX-Request``, what the page
asks every 10 s) is timed in the server through Django's test client, logged in, three times:

1. with nothing landing;
2. while a second process — a worker, on the machine's other core — lands graded runs on entities drawn at
   random (two in five bad) in batches of ``--batch`` at ``--rate`` a second and hands each batch to the loop's
   trigger (``evolution.loop.trigger.on_landed``, as grading does when a batch settles), after a warm-up of
   ``--warm`` grades that opens the entities' first cycles (the trigger bench's steady state: later bad landings
   are held);
3. after the worker stopped, over the data it left (its live cycles), nothing landing: what tells the contention
   from the larger fleet of live cycles.

It prints the three timings (p50 and p95 of ``--requests``), the landing rate the worker kept, and the login
page's floor. What the worker landed — its runs, grades and the cycles it opened — is deleted at the end, so the
data set stays as it was built; ``--keep`` leaves it (on a copy of the data set: a fleet of some 800 live cycles to
profile the pages against).

    .venv/bin/python bench/fleet_while_landing.py --db postgres \\
        --pg-url postgres://postgres@127.0.0.1:5432/dash_1m --runs 1000 --rate 500
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def land(args: argparse.Namespace, ready: Any, stop: Any, report: Any) -> None:
    """The worker: land ``args.warm`` grades as fast as it can (the entities' first cycles open, so later bad
    landings are held, the trigger's steady state), set ``ready``, then land ``args.batch`` grades every
    ``args.batch / args.rate`` seconds until ``stop`` is set.

    ``args.share`` (``(i, n)``, default ``(0, 1)``) lands on every n-th entity from the i-th only: n workers, each
    its own entities (no two hand the trigger the same entity at once) and each ``rate`` its part of the whole.
    ``args.nice`` (default 0) lowers the worker's priority first, as ``manage.py up`` lowers a grading worker's
    (``WORKER_NICE``): the web keeps its share of the CPU while it lands."""
    import dashboard_scale

    if getattr(args, "nice", 0):
        os.nice(args.nice)
    # The caller migrated the database: two landers migrating at once collide (``ro_runs`` created twice).
    dashboard_scale.configure(args.db, args.pg_url, args.sqlite_path, False, migrate=False)
    from django.utils import timezone
    from loop_trigger import Lander

    from evolution.loop import trigger
    from grading.models import Entity

    entities = list(
        Entity.objects.filter(loop_enabled=True, slug__startswith="bench-")
        .exclude(slug__startswith="bench-template")
        .order_by("pk")
    )
    part, parts = getattr(args, "share", (0, 1))
    entities = entities[part::parts]
    lander = Lander(entities, args.seed + part)  # the trigger bench's: graded now, two in five bad
    ids: list[str] = []
    landed, busy, started = 0, 0.0, time.perf_counter()
    interval = args.batch / args.rate
    next_at = started
    warming = args.warm
    error = ""
    try:
        _land_until(
            args, stop, ready, lander, trigger, timezone, ids, interval, warming, (landed, busy, started, next_at)
        )
    except Exception:  # reported with what it landed, so the caller cleans up and says why  # noqa: BLE001
        import traceback

        error = traceback.format_exc()
    landed, busy, started = _tally["landed"], _tally["busy"], _tally["started"]
    report.put({"landed": landed, "seconds": time.perf_counter() - started, "busy": busy, "ids": ids, "error": error})


#: What ``_land_until`` has landed so far (read by ``land`` even when it raised).
_tally: dict[str, float] = {}


def _land_until(
    args: argparse.Namespace, stop: Any, ready: Any, lander: Any, trigger: Any, timezone: Any, ids: list[str],
    interval: float, warming: int, state: tuple[int, float, float, float],
) -> None:  # fmt: skip
    """``land``'s loop: warm up, set ``ready``, then land a batch every ``interval`` until ``stop``; ``_tally``
    holds the counts as they are."""
    landed, busy, started, next_at = state
    _tally.update(landed=landed, busy=busy, started=started)
    while not stop.is_set():
        if warming <= 0 and not ready.is_set():
            ready.set()
            landed, busy, started = 0, 0.0, time.perf_counter()
            next_at = started
            _tally.update(landed=landed, busy=busy, started=started)
        began = time.perf_counter()
        batch = [run for run, _ in lander.land(args.batch)]
        trigger.on_landed(batch, now=timezone.now())
        ids += batch
        if warming > 0:
            warming -= len(batch)
            continue
        busy += time.perf_counter() - began
        landed += len(batch)
        _tally.update(landed=landed, busy=busy, started=started)
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_at = time.perf_counter()  # behind: land the next batch at once, never in a burst to catch up


def time_table(client: Any, requests: int, gap: float = 0.0) -> dict[str, float]:
    """p50 and p95 of ``requests`` GETs of the table, ``gap`` seconds apart (after a warm-up of 3)."""
    spent = []
    for _ in range(3):
        client.get("/evolution/", HTTP_HX_REQUEST="true")
    for _ in range(requests):
        time.sleep(gap)
        began = time.perf_counter()
        response = client.get("/evolution/", HTTP_HX_REQUEST="true")
        spent.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, response.status_code
    spent.sort()
    return {"p50": statistics.median(spent), "p95": spent[min(len(spent) - 1, round(0.95 * len(spent)) - 1)]}


def clean_up(first_cycle: int, run_ids: list[str]) -> dict[str, int]:
    """Delete what the worker landed: the cycles opened since it started, then its runs (their grades with them)."""
    from evolution.models import Cycle
    from grading.models import Execution

    cycles, _ = Cycle.objects.filter(pk__gte=first_cycle).delete()
    runs = sum(Execution.objects.filter(pk__in=run_ids[i : i + 1000]).delete()[0] for i in range(0, len(run_ids), 1000))
    return {"cycles": cycles, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/dash_bench")
    parser.add_argument("--sqlite-path", default="var/dash_bench.sqlite3")
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000, help="graded runs per entity (when the set is built)")
    parser.add_argument("--rate", type=float, default=500, help="landing grades a second the worker aims at")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--warm",
        type=int,
        default=10000,
        help="grades landed before the timing starts: ten an entity opens most entities' first cycle, so later bad "
        "landings are held (the trigger bench's steady state)",
    )
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="seconds between two requests of the table while grades land (0: back to back, the client itself "
        "competing with the worker for the machine; the page asks every 10 s)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keep", action="store_true", help="keep what the worker landed (its runs and live cycles): on a copy only"
    )
    args = parser.parse_args()

    import dashboard_scale

    dashboard_scale.configure(args.db, args.pg_url, args.sqlite_path, False)
    from django.db import connection
    from django.db.models import Max
    from django.test import Client

    from evolution.models import Cycle
    from grading.models import Entity, Grade
    from singularity.longlived import freeze

    if not Entity.objects.filter(slug="bench-0000").exists():
        dashboard_scale.build(args.entities, args.runs)
    print(
        f"database: {connection.vendor}  grades: {Grade.objects.count():,}  "
        f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    freeze()
    client = Client()
    floor = dashboard_scale.time_page(client, "/accounts/login/", {}, args.requests)
    client.login(username="alice", password="bench-password")
    quiet = time_table(client, args.requests)
    first_cycle = (Cycle.objects.aggregate(top=Max("pk"))["top"] or 0) + 1
    connection.close()  # the worker opens its own
    ctx = multiprocessing.get_context("spawn")
    ready, stop, report = ctx.Event(), ctx.Event(), ctx.Queue()
    worker = ctx.Process(target=land, args=(args, ready, stop, report))
    worker.start()
    try:
        if not ready.wait(timeout=1800):
            raise SystemExit("the worker did not finish its warm-up in 30 minutes")
        time.sleep(2)  # the worker at its pace
        busy = time_table(client, args.requests, args.gap)
    finally:
        stop.set()
        landed = report.get(timeout=120)
        worker.join(timeout=60)
    after = time_table(client, args.requests)  # the same data the worker left, nothing landing
    live = Cycle.objects.filter(status="").count()
    removed = {"runs": 0, "cycles": 0} if args.keep else clean_up(first_cycle, landed["ids"])
    rate = landed["landed"] / landed["seconds"]
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"login page (floor): p50 {floor['p50']:.1f} ms, p95 {floor['p95']:.1f} ms")
    print(f"fleet HTMX table, nothing landing: p50 {quiet['p50']:.1f} ms, p95 {quiet['p95']:.1f} ms")
    print(
        f"fleet HTMX table, grades landing: p50 {busy['p50']:.1f} ms, p95 {busy['p95']:.1f} ms — the worker landed "
        f"{landed['landed']:,} grades in {landed['seconds']:.1f} s ({rate:.0f}/s, aimed at {args.rate:.0f}/s; "
        f"busy {landed['busy'] / landed['seconds']:.0%} of the time)"
    )
    print(
        f"fleet HTMX table after the worker stopped (its {live:,} live cycles kept, nothing landing): "
        f"p50 {after['p50']:.1f} ms, p95 {after['p95']:.1f} ms"
    )
    if args.keep:
        print(f"kept what the worker landed: {len(landed['ids']):,} runs, {live:,} live cycles")
    else:
        print(f"cleaned up: {removed['runs']:,} rows of runs and grades, {removed['cycles']:,} rows of cycles")


if __name__ == "__main__":
    main()
