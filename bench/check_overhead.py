#!/usr/bin/env python
"""The pre-merge check's own cost: the engine's work for 5 inputs × 3 trials, and a freeze against a long history.

Issue 11's figures: a check of 5 inputs × 3 trials on a workflow adds at most 50 ms of engine work beyond the
replays themselves — the freeze at the opening, the launch (the replays' rows and their ids on the round, the
pending status) and the verdict (the pairs read, the rules, the record, the status, the merge wait armed) — and
the freeze's queries do not grow with the entity's history.

The replays themselves are not run: each replay's execution is finished and graded directly (an accuracy of 0
or 1), as a worker and the grader would, outside the timed spans. The forge is the local one on a real bare
repository (``git ls-remote`` reads its default branch at the freeze).

    .venv/bin/python bench/check_overhead.py                          # SQLite, histories of 10k and 100k runs
    .venv/bin/python bench/check_overhead.py --histories 10000 1000000
    .venv/bin/python bench/check_overhead.py --pg-url postgres://postgres@127.0.0.1:5432/bench_check
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configure(pg_url: str, *, keep: bool = False) -> Path:
    var = Path(tempfile.mkdtemp(prefix="bench-check-"))
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
    bare = var / "brain.git"
    work = var / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README.md").write_text("bench\n")
    subprocess.run(["git", "-C", str(work), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(work), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "seed"], check=True
    )
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return var


def entity(slug: str):
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    frontmatter = {
        "name": slug,
        "evaluation": {
            "enabled": True,
            "method": "none",
            "metrics": {"accuracy": {"kind": "computed", "direction": "max", "role": "objective", "aggregate": "mean"}},
        },
        "loop": {"enabled": True, "check": {"inputs": 5, "trials": 3}},
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


JUDGE = {"model": "none", "method": "none", "method_hash": "none", "loop_hash": "", "role_hash": "none"}


def history(target, runs: int) -> None:
    """``runs`` graded runs of ``target`` over 500 distinct tickets, oldest first, in bulk."""
    from django.utils import timezone

    from grading.models import Execution, Grade

    start = timezone.now() - timedelta(days=30)
    batch = 20_000
    for first in range(0, runs, batch):
        executions, grades = [], []
        for i in range(first, min(runs, first + batch)):
            at = start + timedelta(seconds=i)
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
                    passed=i % 3 != 0,
                    metrics={"accuracy": 0.0 if i % 3 == 0 else 1.0},
                    judge=JUDGE,
                )
            )
        Execution.objects.bulk_create(executions, batch_size=2000)
        Grade.objects.bulk_create(grades, batch_size=2000)
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # what autovacuum does after a load this size: the planner's statistics
            cursor.execute("ANALYZE grading_execution")
            cursor.execute("ANALYZE grading_grade")


def one_check(target, number: int) -> dict[str, float]:
    """One cycle through freeze → launch → verdict; the replays finished and graded outside the clock."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from evolution.forges.local import LocalForge
    from evolution.loop import freeze, machine
    from evolution.models import Cycle, PullRequest, Replay, Round
    from grading.models import Execution, Grade

    anchor = Execution.objects.filter(entity=target).order_by("-completed_at").first()
    now = timezone.now()
    spans: dict[str, float] = {}
    queries: dict[str, int] = {}

    with CaptureQueriesContext(connection) as q:
        began = time.perf_counter()
        frozen = freeze.freeze(Cycle(entity=target, anchor=anchor, window={}, judge=JUDGE), now=now)
        spans["freeze"] = (time.perf_counter() - began) * 1000
    queries["freeze"] = len(q.captured_queries)
    cycle = Cycle.objects.create(
        entity=target, key=f"bench:{number}:{uuid.uuid4()}", phase=Cycle.Phase.APPLYING, origin="grade",
        anchor=anchor, judge=JUDGE, frozen=frozen, analysed=True,
    )  # fmt: skip
    head = f"{number:040x}"
    PullRequest.objects.create(number=number, title="bench", head=f"loop/b-{number}", head_sha=head, base_sha="0" * 40)
    rnd = Round.objects.create(
        cycle=cycle, number=1, status=Round.Status.APPLIED, head_sha=head, base_sha="0" * 40, pr_number=number,
        branch=f"loop/b-{number}",
    )  # fmt: skip
    machine.STEPS["replay"] = lambda replay_id: None  # the replays are not run here
    with CaptureQueriesContext(connection) as q:
        began = time.perf_counter()
        machine.start_check(cycle, rnd, now)
        spans["launch"] = (time.perf_counter() - began) * 1000
    queries["launch"] = len(q.captured_queries)

    # What the workers and the grader would do: every replay finished and graded (not timed).
    for replay in Replay.objects.filter(round=rnd).select_related("execution"):
        Execution.objects.filter(pk=replay.execution_id).update(status="succeeded", completed_at=now)
        good = replay.side == Replay.Side.CANDIDATE or replay.slot % 2 == 0
        Grade.objects.create(
            execution_id=replay.execution_id, entity=target, status="graded", reason="exempt:check", day=now.date(),
            booked_at=now, due_at=now, graded_at=now, passed=good, metrics={"accuracy": 1.0 if good else 0.0},
            judge=JUDGE,
        )  # fmt: skip
    Replay.objects.filter(round=rnd).update(started_at=now, finished_at=now)

    with CaptureQueriesContext(connection) as q:
        began = time.perf_counter()
        verdict = machine.evaluate_check(cycle, now)
        spans["verdict"] = (time.perf_counter() - began) * 1000
    queries["verdict"] = len(q.captured_queries)
    assert verdict is not None, "the check did not answer"
    assert LocalForge().statuses(head), "no status was set"
    spans["total"] = spans["freeze"] + spans["launch"] + spans["verdict"]
    spans["replays"] = Replay.objects.filter(round=rnd).count()
    return {**spans, **{f"q_{k}": v for k, v in queries.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--pg-url", default="")
    parser.add_argument("--keep", action="store_true", help="Postgres: reuse the histories a previous run built.")
    args = parser.parse_args()
    var = configure(args.pg_url, keep=args.keep)
    from django.conf import settings

    settings.VAR_DIR = var
    settings.LOCAL_FORGE_REQUIRED_STATUSES = ["singularity/diff-gate"]
    database = "Postgres" if args.pg_url else "SQLite"
    print(f"{database}: a check of 5 inputs × 3 trials, engine work only (median of {args.repeat}, ms)")
    print("history | freeze (q) | launch (q) | verdict (q) | total | replays")
    number = 0
    from evolution.models import Cycle, PullRequest
    from grading.models import Entity, Execution

    Cycle.objects.filter(key__startswith="bench:").delete()
    PullRequest.objects.all().delete()
    Execution.objects.filter(loop_launched=True).delete()
    for runs in args.histories:
        began = time.perf_counter()
        target = Entity.objects.filter(slug=f"bench{runs}").first() if args.keep else None
        if target is None or Execution.objects.filter(entity=target, loop_launched=False).count() != runs:
            Entity.objects.filter(slug=f"bench{runs}").delete()
            target = entity(f"bench{runs}")
            history(target, runs)
        built = time.perf_counter() - began
        rows = []
        for _ in range(args.repeat):
            number += 1
            rows.append(one_check(target, number))
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"{runs:>7,} | {med['freeze']:6.1f} ({med['q_freeze']:.0f}) | {med['launch']:6.1f} ({med['q_launch']:.0f})"
            f" | {med['verdict']:6.1f} ({med['q_verdict']:.0f}) | {med['total']:6.1f} | {med['replays']:.0f}"
            f"   (history built in {built:.0f} s)"
        )


if __name__ == "__main__":
    main()
