#!/usr/bin/env python
"""GitHub requests per hour for 1,000 open pull requests polled by one worker, against the loopback fake GitHub.

One worker runs the loop's clock (``machine.poll_due``, every 30 s as beat
runs it) over a simulated day while 1,000 cycles wait in ``merge_wait`` on
1,000 open PRs, through the real GitHub forge (PyGithub over HTTP to
``tests/fakes/github.py``). Every request the fake answers is counted in the
simulated hour it was made: 200s (which GitHub charges to the token's 5,000
requests an hour) apart from 304s (a conditional read of an unchanged PR,
which it does not). By default the day is busy: each hour a person pushes to
main (every open PR's base moves, so its next read is a fresh 200) and to
``--pushes`` PR branches, whose ``synchronize`` webhooks are delivered (the
webhook lane: one immediate read each); ``--quiet-main`` leaves main alone.

    .venv/bin/python bench/github_poll.py                # 1,000 PRs, 24 simulated hours
    .venv/bin/python bench/github_poll.py --quiet-main       # nobody pushes to main: the 304s show
    .venv/bin/python bench/github_poll.py --prs 200 --hours 6
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TICK = timedelta(seconds=30)
LIMIT = 5000


def configure() -> Path:
    var = Path(tempfile.mkdtemp(prefix="bench-github-"))
    os.environ.update(
        SINGULARITY_VAR_DIR=str(var),
        DATABASE_URL=f"sqlite:///{var}/bench.sqlite3",
        CELERY_BROKER_URL="memory://localhost/",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="singularity.settings",
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return var


def seed(fake, var: Path, prs: int) -> list[str]:
    """A one-file brain with ``prs`` branches one commit ahead of main, and an open PR on each (made on the fake)."""
    import subprocess

    source = var / "source"
    source.mkdir()
    (source / "README.md").write_text("A brain.\n")
    fake.seed(source)
    repo = fake.repo_path
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@x",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@x",
    }

    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, env=env, input=stdin, capture_output=True, text=True, check=True
        ).stdout.strip()

    tree = git("rev-parse", "main^{tree}")
    ahead = git("commit-tree", tree, "-p", "main", "-m", "A change")
    branches = [f"loop/bench-{i:05d}" for i in range(prs)]
    git("update-ref", "--stdin", stdin="".join(f"create refs/heads/{b} {ahead}\n" for b in branches))
    fake.refs_changed()
    for branch in branches:
        with fake._lock:
            fake._create_pull({"head": branch, "base": "main", "title": f"loop(bench): {branch}"}, "seed")
    fake._state.outbox.clear()
    return branches


def waiting_cycles(prs: int, start: datetime) -> None:
    from evolution.loop import machine
    from evolution.models import Cycle, Round
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    frontmatter = {"name": "bench", "evaluation": {"enabled": True, "method": "none"}, "loop": {"enabled": True}}
    terms, provenance = resolve_terms("workflow", {}, frontmatter, entity_label="features/bench/bench.scenario.md")
    entity = Entity.objects.create(
        slug="bench",
        kind="workflow",
        target_kind="scenario",
        path="features/bench/bench.scenario.md",
        name="bench",
        frontmatter=frontmatter,
        terms=terms,
        provenance=provenance,
        evaluation_enabled=True,
        loop_enabled=True,
    )
    cycles = Cycle.objects.bulk_create(
        Cycle(entity=entity, key=f"bench:{i}", origin=Cycle.Origin.REQUEST, phase=Cycle.Phase.APPLYING)
        for i in range(prs)
    )
    Round.objects.bulk_create(
        Round(cycle=c, number=1, status=Round.Status.APPLIED, pr_number=i + 1, branch=f"loop/bench-{i:05d}")
        for i, c in enumerate(cycles)
    )
    for cycle in Cycle.objects.select_related("entity").order_by("pk"):
        machine.arm_wait(cycle, cycle.rounds.get(number=1), start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--pushes", type=int, default=10, help="PR branches pushed to each hour (webhook lane)")
    parser.add_argument("--quiet-main", action="store_true", help="nobody pushes to main (every base stays put)")
    args = parser.parse_args()
    var = configure()

    import time_machine
    from django.conf import settings
    from django.test import Client

    from evolution.loop import machine
    from tests.fakes.github import TOKEN, WEBHOOK_SECRET, FakeGitHub

    fake = FakeGitHub(var / "github").start()
    settings.LOOP_FORGE = "github"
    settings.GITHUB_API_URL, settings.GITHUB_REPOSITORY, settings.GITHUB_TOKEN = fake.api_url, fake.full_name, TOKEN
    settings.GITHUB_WEBHOOK_SECRET, settings.BRAIN_REPO = WEBHOOK_SECRET, fake.git_url
    settings.GITHUB_SECONDS_BETWEEN_WRITES, settings.ALLOWED_HOSTS = 0.0, ["testserver"]
    from singularity.celery import app

    app.conf.task_always_eager = True
    import evolution.forges.github as github_forge

    github_forge._went_live = lambda number: None  # the bench has no checkout to sync

    branches = seed(fake, var, args.prs)
    start = datetime(2026, 1, 5, tzinfo=UTC)
    waiting_cycles(args.prs, start)
    client = Client()
    per_hour: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    began = time.monotonic()
    now, end = start, start + timedelta(hours=args.hours)
    pushed_hour = -1
    while now < end:
        hour = int((now - start).total_seconds() // 3600)
        seen = len(fake.requests)
        if hour != pushed_hour:  # the hour's activity: a push to main, pushes to some PR branches
            pushed_hour = hour
            if not args.quiet_main:
                bump(fake, "main", hour)
            for k in range(args.pushes):
                bump(fake, branches[(hour * args.pushes + k) % len(branches)], hour)
            fake._refresh_heads()
            with time_machine.travel(now, tick=False):  # the webhook's read happens at the simulated instant
                fake.deliver(client)
        per_hour[hour]["polled"] += machine.poll_due(now)
        for request in fake.requests[seen:]:
            if request.path.startswith("/api/"):
                per_hour[hour]["requests"] += 1
                per_hour[hour]["304" if request.status == 304 else "charged"] += 1
        now += TICK
    fake.stop()
    report(per_hour, args, time.monotonic() - began)


def bump(fake, branch: str, hour: int) -> None:
    import subprocess

    repo = fake.repo_path
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "p",
        "GIT_AUTHOR_EMAIL": "p@x",
        "GIT_COMMITTER_NAME": "p",
        "GIT_COMMITTER_EMAIL": "p@x",
    }
    tip = subprocess.run(["git", "rev-parse", branch], cwd=repo, capture_output=True, text=True, check=True).stdout
    tree = subprocess.run(
        ["git", "rev-parse", f"{branch}^{{tree}}"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "commit-tree", tree, "-p", tip.strip(), "-m", f"hour {hour}"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(["git", "update-ref", f"refs/heads/{branch}", commit], cwd=repo, check=True)


def report(per_hour: dict[int, dict[str, int]], args: argparse.Namespace, wall: float) -> None:
    print(
        f"{args.prs} open PRs, {args.hours} simulated hours, one worker ticking every 30 s "
        f"({wall:.0f} s of wall time)\n"
    )
    print("| hour | polls | requests | of which 304 | charged | requests / open PR |")
    print("|---:|---:|---:|---:|---:|---:|")
    for hour in sorted(per_hour):
        row = per_hour[hour]
        print(
            f"| {hour + 1} | {row['polled']} | {row['requests']} | {row['304']} | {row['charged']} | "
            f"{row['requests'] / args.prs:.2f} |"
        )
    worst = max(per_hour.values(), key=lambda r: r["requests"])
    worst_charged = max(r["charged"] for r in per_hour.values())
    total = sum(r["requests"] for r in per_hour.values())
    charged = sum(r["charged"] for r in per_hour.values())
    print()
    print(
        f"busiest hour: {worst['requests']} requests ({worst['charged']} charged); most charged in an hour: "
        f"{worst_charged} (limit {LIMIT} per token)"
    )
    print(
        f"over the day: {total / args.hours / args.prs:.2f} requests per open PR per hour, "
        f"{charged / args.hours / args.prs:.2f} charged"
    )
    steady = [per_hour[h] for h in per_hour if h >= 8]
    if steady:
        print(
            f"from hour 9 on: {sum(r['requests'] for r in steady) / len(steady):.0f} requests an hour, "
            f"{sum(r['charged'] for r in steady) / len(steady):.0f} charged"
        )
    print("under the limit" if worst["requests"] < LIMIT else "OVER THE LIMIT")


if __name__ == "__main__":
    main()
