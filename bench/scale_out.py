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

Not measured here: the dashboard's pages over HTTP while grades land at 500/s (see docs/performance.md).
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

    verdict = {
        "criteria": [
            {
                "criterion": "The answer names the ticket's category",
                "scope": "run",
                "passed": True,
                "score": 0.9,
                "reasoning": "It does.",
                "evidence": "billing",
            }
        ],
        "overall_score": 0.9,
        "passed": True,
        "failure_category": "",
        "feedback": "",
        "metrics": {},
        "tasks": [],
    }
    reply = Reply(
        content=json.dumps(verdict),
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
    from django.utils import timezone

    from grading.executions import report_many

    for start in range(0, n, batch):
        end = timezone.now()
        rows = [
            (
                entity,
                {
                    "status": "succeeded",
                    "started_at": (end - timedelta(seconds=2)).isoformat(),
                    "completed_at": end.isoformat(),
                    "cost_usd": "0.000125",
                    "input": {"text": f"ticket {start + i}"},
                    "output": {"result": "billing"},
                },
            )
            for i in range(min(batch, n - start))
        ]
        report_many(rows, user=None)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/scale_out")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/6")
    parser.add_argument("--runs", type=int, default=1000, help="runs per throughput phase")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--judge-ms", type=float, default=200.0)
    args = parser.parse_args()

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
    results: list[tuple[str, int, float, dict[str, int]]] = []
    done = 0
    for workers_n in (1, 2):
        since = time.time()
        workers = start_workers(workers_n, args.threads, f"t{workers_n}")
        wait_ready(workers_n, since)
        report(entity, args.runs)
        seconds, _ = drain(entity, done + args.runs)
        done += args.runs
        stop(workers)
        results.append((f"{workers_n} worker(s) × {args.threads} threads", args.runs, seconds, counts(entity)))

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
    results.append((f"backlog, 2 workers × {args.threads} threads, {sweeps} sweeps", args.backlog, seconds, final))
    judge.stop()

    print(f"\njudge: {args.judge_ms:.0f} ms a call; Postgres {args.pg_url.rsplit('/', 1)[-1]}, Redis {args.redis}")
    print("| phase | runs | seconds | grades/s |")
    print("|---|---:|---:|---:|")
    for label, runs, seconds, _ in results:
        print(f"| {label} | {runs} | {seconds:.1f} | {runs / seconds:.1f} |")
    print(f"\nfinal grade states: {final}")
    if final.get("lost", 0) or final.get("failed", 0):
        raise SystemExit(f"FAILED: {final.get('lost', 0)} lost, {final.get('failed', 0)} failed")


if __name__ == "__main__":
    main()
