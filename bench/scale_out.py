#!/usr/bin/env python
"""Grading scaled out over worker processes on Postgres and Redis, and a backlog that loses no grade (issue 37).

A judged scenario (the LLM judge, no ``method``) is graded through a loopback judge that takes ``--judge-ms``
(200) a call. Each phase reports runs through ``grading.executions.report_many`` — booked on commit, each grading
job sent to the ``grading`` queue in Redis — and times until every grade has settled:

- **throughput**: ``--runs`` runs with one, then two ``celery worker -Q grading`` processes already running
  (each its own hostname, ``--threads`` threads each);
- **backlog**: ``--backlog`` runs reported before any worker runs, then two workers drain them while the
  lost-grade sweep (``grading.booking.sweep_lost``, the real one) runs every few seconds with a grace of a few
  seconds — far shorter than its 15 minutes, so every queued grade is past it: none may be failed as lost.

    .venv/bin/python bench/scale_out.py --pg-url postgres://postgres@127.0.0.1:5432/scale_out \\
        --redis redis://127.0.0.1:6379/6 --runs 1000 --backlog 10000

With ``--runs 300`` it took 11 minutes on the shared 2-core machine (load average 8–17), the backlog 466 s of it.

``--phase pages`` times the dashboard **over HTTP through gunicorn** (started as ``manage.py up`` starts it,
``WEB_CONCURRENCY`` 2 × 4 threads) while grades land at ``--rate`` (500) a second, on the data set of
``bench/dashboard_scale.py`` (1,000 entities in the loop, ``--runs-each`` 1,000 graded runs each: 1M runs and
grades, five settled cycles an entity, 100 live, 10,080 cards; built set-based in SQL in some 2–3 minutes when the
database is empty, then reused). The grades land from ``--landers`` (2) other processes as
``bench/fleet_while_landing.py`` lands them (graded runs on random entities, two in five bad, handed to the loop's
trigger in batches of 100, after a warm-up of 10,000), each on its own share of the entities at its part of the rate
and at the grading workers' priority (``--lander-nice``, ``manage.py up``'s ``WORKER_NICE``: 10): one process
reached only some 360/s, its 1.7 ms of CPU a grade (its own and its Postgres backend's) done in turn. A logged-in session (a cookie, as a browser sends it) requests every dashboard page and read
API — a warm-up of 3, then ``--requests`` (20) timed, p50 and p95 — and the login page (which reads no data) in the
same run as the floor, with the load average at each page. What the landers added is deleted at the end.

    .venv/bin/python bench/scale_out.py --phase pages --pages-pg-url postgres://postgres@127.0.0.1:5432/dash_1m

It took 2 minutes on the 2-core machine at load average 2–3 once the data set was built (8.5 at load 12).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JUDGED = """---
name: Judged
description: Graded by the LLM judge (the bench's loopback judge).
evaluation:
  enabled: true
  requirements:
    - The answer names the ticket's category
---

Name the ticket's category.
"""
MANIFEST = """# The bench's manifest: every run graded, no daily ceiling.
evaluation:
  sample: {rate: 1}
"""


def make_brain() -> Path:
    from singularity.brain.git import init_bare_from

    work = Path(tempfile.mkdtemp(prefix="scale-brain-"))
    source = work / "source"
    shutil.copytree(ROOT / "demo_brain", source)
    (source / "constitution/MANIFEST.yaml").write_text(MANIFEST)
    (source / "features/bench/judged").mkdir(parents=True)
    (source / "features/bench/judged/judged.scenario.md").write_text(JUDGED)
    init_bare_from(source, work / "brain.git")
    return work / "brain.git"


def judge_server(delay_s: float) -> Any:
    """A loopback chat-completions server answering every call with a passing verdict after ``delay_s``."""
    from singularity.demo_model import ChatCompletionsServer, Reply
    from tests.ops.workers import VERDICT

    reply = Reply(
        content=json.dumps(VERDICT),
        usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
        delay_s=delay_s,
    )
    server = ChatCompletionsServer(handler=lambda request, headers: reply)
    server.start()
    return server


def reset_database(pg_url: str) -> None:
    import psycopg

    base, _, name = pg_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=os.environ, check=True)


def start_workers(count: int, threads: int, tag: str) -> list[subprocess.Popen[bytes]]:
    log = open(os.environ["SINGULARITY_VAR_DIR"] + f"/workers-{tag}.log", "ab")  # noqa: SIM115
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "singularity",
                "--quiet",
                "worker",
                "-Q",
                "grading",
                "-n",
                f"bench{tag}{n}@%h",
                "--pool",
                "threads",
                "--concurrency",
                str(threads),
                "-l",
                "warning",
            ],
            cwd=ROOT,
            env=os.environ,
            stdout=log,
            stderr=log,
        )  # fmt: skip
        for n in range(count)
    ]


def wait_ready(count: int, since: float, timeout: float = 180) -> None:
    from singularity import pulse

    deadline = time.time() + timeout
    while time.time() < deadline:
        fresh = [at for name, at in pulse.last("worker:grading:").items() if at >= since]
        if len(fresh) >= count:
            return
        time.sleep(0.5)
    raise SystemExit(f"{count} grading workers did not come up within {timeout:.0f} s")


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()


def report(entity: Any, n: int, batch: int = 200) -> None:
    from tests.ops.workers import report_runs

    report_runs(entity, n, batch)


def counts(entity: Any) -> dict[str, int]:
    from django.db.models import Count

    from grading.booking import LOST
    from grading.models import Grade

    rows = dict(Grade.objects.filter(entity=entity).values_list("status").annotate(n=Count("pk")))
    rows["lost"] = Grade.objects.filter(entity=entity, status="failed", error=LOST).count()
    return rows


def drain(entity: Any, total: int, *, sweep_every: float | None = None, grace_s: float = 5.0) -> tuple[float, int]:
    """Wait until ``total`` grades of ``entity`` have settled; return (seconds, sweeps run)."""
    from grading.booking import sweep_lost

    started, sweeps, last_sweep = time.monotonic(), 0, time.monotonic()
    while True:
        seen = counts(entity)
        if seen.get("graded", 0) + seen.get("failed", 0) >= total:
            return time.monotonic() - started, sweeps
        if sweep_every is not None and time.monotonic() - last_sweep >= sweep_every:
            sweep_lost(grace=timedelta(seconds=grace_s))
            sweeps, last_sweep = sweeps + 1, time.monotonic()
        time.sleep(0.5)


# --- The pages over HTTP while grades land ---------------------------------------------------------------------


def session_key() -> str:
    """A logged-in session of the data set's user (``alice``), saved in the database: its key for the cookie."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.get(username="alice")
    session = SessionStore()
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return str(session.session_key)


def start_gunicorn(pg_url: str, port: int) -> subprocess.Popen[bytes]:
    """gunicorn as ``manage.py up`` starts it, on the data set; returns once the login page answers."""
    import urllib.request

    from singularity.management.commands.up import web_command

    var = tempfile.mkdtemp(prefix="pages-var-")
    env = {
        **os.environ,
        "DATABASE_URL": pg_url,
        "SINGULARITY_VAR_DIR": var,
        "CELERY_BROKER_URL": "memory://localhost/",
        "LOG_LEVEL": "WARNING",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PROMETHEUS_MULTIPROC_DIR": var,
    }
    log = open(f"{var}/gunicorn.log", "ab")  # noqa: SIM115
    server = subprocess.Popen(web_command(sys.executable, "127.0.0.1", port, dev=False), cwd=ROOT, env=env,
                              stdout=log, stderr=log)  # fmt: skip
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).read()
            return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"gunicorn did not answer within 60 s (see {var}/gunicorn.log)")


def time_over_http(port: int, session: str, path: str, headers: dict[str, str], requests: int) -> dict[str, Any]:
    """Warm up (3), then time ``requests`` GETs of ``path`` over HTTP, a new connection each as a browser's first."""
    import urllib.request

    cookie = {} if path.startswith("/accounts/login/") else {"Cookie": f"sessionid={session}"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={**cookie, **headers})
    for _ in range(3):
        urllib.request.urlopen(request, timeout=120).read()
    spent, status = [], 0
    for _ in range(requests):
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            status = response.status
        spent.append((time.perf_counter() - began) * 1000)
    spent.sort()
    p95 = spent[min(len(spent) - 1, round(0.95 * len(spent)) - 1)]
    return {"p50": spent[len(spent) // 2], "p95": p95, "status": status, "load": os.getloadavg()[0]}


def pages_phase(args: argparse.Namespace) -> None:
    import multiprocessing

    sys.path.insert(0, str(ROOT / "bench"))
    import dashboard_scale
    import fleet_while_landing

    dashboard_scale.configure("postgres", args.pages_pg_url, "", False)
    from django.db import connection
    from django.db.models import Max

    from evolution.models import Cycle
    from grading.models import Entity, Grade

    if not Entity.objects.filter(slug="bench-0000").exists():
        dashboard_scale.build(args.entities, args.runs_each)
    print(
        f"data set: {Entity.objects.filter(loop_enabled=True).count():,} entities in the loop, "
        f"{Grade.objects.count():,} grades; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    pages = [
        (label, path, {k[5:].replace("_", "-").title(): v for k, v in headers.items()})
        for label, path, headers in dashboard_scale.pages()
        if not args.only or args.only in label or label.startswith("login")
    ]
    session = session_key()
    first_cycle = (Cycle.objects.aggregate(top=Max("pk"))["top"] or 0) + 1
    connection.close()
    server = start_gunicorn(args.pages_pg_url, args.port)
    # The landers stand in for the grading workers: ``--landers`` processes, each its own share of the entities at
    # its part of ``--rate``, at the workers' priority (``--lander-nice``: ``manage.py up``'s ``WORKER_NICE``).
    ctx = multiprocessing.get_context("spawn")
    stop_landing, landed_q = ctx.Event(), ctx.Queue()
    landers, readies = [], []
    for part in range(args.landers):
        lander_args = argparse.Namespace(db="postgres", pg_url=args.pages_pg_url, sqlite_path="", seed=7,
                                         warm=args.warm // args.landers, batch=100, rate=args.rate / args.landers,
                                         share=(part, args.landers), nice=args.lander_nice)  # fmt: skip
        readies.append(ctx.Event())
        landers.append(ctx.Process(target=fleet_while_landing.land,
                                   args=(lander_args, readies[-1], stop_landing, landed_q)))  # fmt: skip
    started = time.monotonic()
    for lander in landers:
        lander.start()
    timed: dict[str, dict[str, Any]] = {}
    reports: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 1800
        while not all(ready.is_set() for ready in readies):
            dead = [n for n, (lander, ready) in enumerate(zip(landers, readies, strict=True)) if not lander.is_alive()
                    and not ready.is_set()]  # fmt: skip
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"lander(s) {dead} stopped before their warm-up ended" if dead else
                                 "the landers did not finish their warm-up in 30 minutes")  # fmt: skip
            time.sleep(1)
        time.sleep(2)
        for label, path, headers in pages:
            timed[label] = time_over_http(args.port, session, path, headers, args.requests)
            print(f"   {label}: p95 {timed[label]['p95']:.0f} ms (load {timed[label]['load']:.1f})", flush=True)
    finally:
        stop_landing.set()
        reports = [landed_q.get(timeout=600) for _ in landers]  # a lander that raised reports too (its error)
        for r in reports:
            if r.get("error"):
                print(f"a lander stopped on an error:\n{r['error']}", file=sys.stderr, flush=True)
        for lander in landers:
            lander.join(timeout=60)
        server.terminate()
        server.wait(timeout=60)
        # What the landers added goes even when the phase stopped early: the data set stays as it was built.
        removed = fleet_while_landing.clean_up(first_cycle, [i for r in reports for i in r["ids"]])
    floor = timed["login page (floor)"]
    landed = {"landed": sum(r["landed"] for r in reports), "seconds": max(r["seconds"] for r in reports)}
    rate = landed["landed"] / landed["seconds"]
    busy = ", ".join(f"{r['busy'] / r['seconds']:.0%}" for r in reports)
    print(f"\ngunicorn, {len(pages)} pages × {args.requests} requests; grades landing at {rate:.0f}/s "
          f"(aimed at {args.rate:.0f}/s by {args.landers} lander(s) at nice {args.lander_nice}, busy {busy} of the "
          f"time; {landed['landed']:,} landed while timed); whole phase "
          f"{time.monotonic() - started:.0f} s; load average at the end "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"cleaned up: {removed['runs']:,} rows of runs and grades, {removed['cycles']:,} of cycles")
    print("| page | p50 ms | p95 ms | p95 above the floor | load average | status |")
    print("|---|---:|---:|---:|---:|---:|")
    over = []
    for label, m in timed.items():
        above = m["p95"] - floor["p95"]
        if above > 100:
            over.append(label)
        print(f"| {label} | {m['p50']:.1f} | {m['p95']:.1f} | {above:+.0f} ms | {m['load']:.1f} | {m['status']} |")
    print(f"\nover the goal (p95 more than 100 ms above the floor's): {', '.join(over) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=["grading", "pages"], default="grading")
    parser.add_argument("--pages-pg-url", default="postgres://postgres@127.0.0.1:5432/dash_1m")
    parser.add_argument("--entities", type=int, default=1000, help="pages: entities of the data set when built")
    parser.add_argument("--runs-each", type=int, default=1000, help="pages: graded runs an entity when built")
    parser.add_argument("--rate", type=float, default=500, help="pages: grades landing a second while timed")
    parser.add_argument("--warm", type=int, default=10000, help="pages: grades landed before the timing starts")
    parser.add_argument(
        "--landers",
        type=int,
        default=2,
        help="pages: processes landing the grades, each its share of the entities and of --rate (one process "
        "reached some 360/s on the shared 2-core machine: 1.7 ms of CPU a grade, its own and its Postgres backend's)",
    )
    parser.add_argument(
        "--lander-nice",
        type=int,
        default=10,
        help="pages: the landers' niceness: the grading workers' under manage.py up (WORKER_NICE, default 10)",
    )
    parser.add_argument("--requests", type=int, default=20, help="pages: timed requests a page")
    parser.add_argument("--only", default="", help="pages: time only the pages whose label contains this")
    parser.add_argument("--port", type=int, default=8771)
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/scale_out")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/6")
    parser.add_argument("--runs", type=int, default=1000, help="runs per throughput phase")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--judge-ms", type=float, default=200.0)
    args = parser.parse_args()
    if args.phase == "pages":
        pages_phase(args)
        return

    judge = judge_server(args.judge_ms / 1000)
    var = tempfile.mkdtemp(prefix="scale-var-")
    os.environ.update(
        SINGULARITY_VAR_DIR=var, DATABASE_URL=args.pg_url, CELERY_BROKER_URL=args.redis,
        BRAIN_REPO=str(make_brain()), BRAMA_BASE_URL=judge.base_url, BRAMA_MAX_RETRIES="0",
        BRAMA_MODEL="judge-model", SINGULARITY_DEMO_DRIVER="false", DJANGO_SETTINGS_MODULE="singularity.settings",
        LOG_LEVEL="WARNING",
    )  # fmt: skip
    os.environ.pop("CELERY_TASK_ALWAYS_EAGER", None)
    reset_database(args.pg_url)
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    manage("migrate", "--noinput", "-v0")
    manage("brain", "sync")

    import django

    django.setup()
    from grading.models import Entity

    entity = Entity.objects.get(slug="judged")
    results: list[tuple[str, int, float, float]] = []  # label, runs, seconds, the 1-minute load average at its end
    done = 0
    for workers_n in (1, 2):
        since = time.time()
        workers = start_workers(workers_n, args.threads, f"t{workers_n}")
        wait_ready(workers_n, since)
        report(entity, args.runs)
        seconds, _ = drain(entity, done + args.runs)
        done += args.runs
        stop(workers)
        results.append((f"{workers_n} worker(s) × {args.threads} threads", args.runs, seconds, os.getloadavg()[0]))

    report(entity, args.backlog)  # no worker: every job waits in the queue
    print(f"backlog queued: {args.backlog} runs; the grading queue holds", end=" ")
    from singularity.queues import depth

    print(depth("grading"))
    since = time.time()
    workers = start_workers(2, args.threads, "backlog")
    wait_ready(2, since)
    seconds, sweeps = drain(entity, done + args.backlog, sweep_every=5.0, grace_s=5.0)
    stop(workers)
    final = counts(entity)
    results.append(
        (f"backlog, 2 workers × {args.threads} threads, {sweeps} sweeps", args.backlog, seconds, os.getloadavg()[0])
    )
    judge.stop()

    print(f"\njudge: {args.judge_ms:.0f} ms a call; Postgres {args.pg_url.rsplit('/', 1)[-1]}, Redis {args.redis}")
    print("| phase | runs | seconds | grades/s | load average at its end |")
    print("|---|---:|---:|---:|---:|")
    for label, runs, seconds, load in results:
        print(f"| {label} | {runs} | {seconds:.1f} | {runs / seconds:.1f} | {load:.1f} |")
    print(f"\nfinal grade states: {final}")
    if final.get("lost", 0) or final.get("failed", 0):
        raise SystemExit(f"FAILED: {final.get('lost', 0)} lost, {final.get('failed', 0)} failed")


if __name__ == "__main__":
    main()
