#!/usr/bin/env python
"""Time every dashboard page and read API at fleet scale: 1,000 entities in the loop, ``--runs`` graded runs each.

The data set (built once into the database named, then reused; ``--rebuild``
starts over):

- ``--entities`` (default 1,000) workflow entities in the loop (repair), one
  in five with a judged ``human: true`` metric (``tone``) that people rate;
- ``--runs`` graded runs an entity (10 or 1,000: 10k or 1M executions and
  grades), two in five failed, pre-filled set-based: a template entity's runs
  built with ``bulk_create`` and copied in SQL to every entity under new ids;
  30 of each rated entity's newest runs rated by a person;
- five settled cycles an entity (validated, unverified, skipped, validated,
  and one regressed or failed in turn), each with its round, and 100 live
  ones (40 deciding on a pending decide card, 20 in the merge wait on a human
  gate, 20 watching, 20 analysing): 5,100 cycles;
- 10,080 cards: an answered decide card per analysed settled cycle, a rating
  card per settled cycle answered or expired, the 40 pending decide cards and
  40 pending rating cards.

Then every page in issue 18's table and every page the navigation reaches is
requested through Django's test client, logged in: a warm-up of 3, then
``--requests`` (20) timed, p50 and p95 with the query count of one request,
plus the login page (which touches no data) as the floor. ``--rounds`` repeats
the timing and keeps each page's best median and best p95.

    nice -n 10 .venv/bin/python bench/dashboard_scale.py --db postgres \\
        --pg-url postgres://postgres@127.0.0.1:5432/dash_1m --runs 1000
    .venv/bin/python bench/dashboard_scale.py --db sqlite --sqlite-path var/dash_10k.sqlite3 --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN = {"enabled": True, "method": "none", "metrics": {"duration_ms": {"role": "objective", "target": 60000}}}
RATED = {
    "enabled": True,
    "metrics": {
        "duration_ms": {"role": "objective", "target": 60000},
        "tone": {"kind": "judged", "direction": "max", "unit": "score", "human": True, "role": "guard"},
    },
}
NONE_JUDGE = {"model": "none", "method": "none", "method_hash": "", "loop_hash": "", "role_hash": "none"}
RATED_JUDGE = {"model": "bench/judge", "method": "judge", "method_hash": "m1", "loop_hash": "", "role_hash": "r1"}
SPAN = timedelta(days=30)
LIVE = (("deciding", 40), ("merge_wait", 20), ("watching", 20), ("analysing", 20))


def configure(db: str, pg_url: str, sqlite_path: str, rebuild: bool, *, migrate: bool = True) -> None:
    """Point Django at the named database (created when missing, dropped first with ``rebuild``) and migrate
    (``migrate`` False: a process beside the one that migrated it, as two migrating at once collide)."""
    var = tempfile.mkdtemp(prefix="bench-var-")
    os.environ["SINGULARITY_VAR_DIR"] = var
    os.environ["CELERY_BROKER_URL"] = "memory://localhost/"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    if db == "sqlite":
        path = Path(sqlite_path).resolve()
        if rebuild and path.exists():
            path.unlink()
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    else:
        import psycopg

        base, _, name = pg_url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            if rebuild:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = pg_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "singularity.settings"
    import django

    django.setup()
    if not migrate:
        return
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- The data set ------------------------------------------------------------------------------


def make_entities(n: int) -> list[Any]:
    """``n`` entities in the loop (every fifth rated by people) and two templates out of it."""
    from grading.models import Entity
    from singularity.brain.terms import resolve_terms

    rows = []
    for i in range(n + 2):
        slug = f"bench-{i:04d}" if i < n else ("bench-template-plain" if i == n else "bench-template-rated")
        rated = (i % 5 == 0) if i < n else i == n + 1
        frontmatter = {
            "name": slug,
            "evaluation": RATED if rated else PLAIN,
            "loop": {"enabled": i < n, "preset": "repair"},
        }
        label = f"features/bench/{slug}.scenario.md"
        terms, provenance = resolve_terms("workflow", {}, frontmatter, entity_label=label)
        rows.append(
            Entity(
                slug=slug,
                kind="workflow",
                target_kind="scenario",
                path=label,
                name=f"Bench {i:04d}",
                body="Sort the ticket.",
                frontmatter=frontmatter,
                terms=terms,
                provenance=provenance,
                evaluation_enabled=True,
                loop_enabled=i < n,
            )
        )
    Entity.objects.bulk_create(rows, batch_size=500)
    return list(Entity.objects.filter(slug__startswith="bench-").order_by("slug"))


def template_runs(template: Any, depth: int, newest: datetime, rated: bool) -> None:
    """The template's ``depth`` graded runs (run j graded j steps before ``newest``)."""
    from grading.models import Execution, Grade

    step = SPAN / max(depth, 10)
    executions, grades = [], []
    for j in range(depth):
        done = newest - j * step
        execution = Execution(
            id=uuid.uuid4(),
            entity=template,
            run_kind="workflow",
            status=Execution.Status.SUCCEEDED,
            source=Execution.Source.API,
            input={"text": "old ticket"},
            output={"result": "general"},
            duration_ms=1000 + j,
            sampling=Execution.Sampling.SAMPLED,
            started_at=done - timedelta(seconds=1),
            completed_at=done,
        )
        executions.append(execution)
        metrics = {"cost_usd": "0", "duration_ms": 1000 + j, "tool_failures": 0}
        if rated:
            metrics["tone"] = round(0.5 + (j % 5) / 10, 2)
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
                score=0.8 if rated else None,
                metrics=metrics,
                judge=RATED_JUDGE if rated else NONE_JUDGE,
            )
        )
    Execution.objects.bulk_create(executions, batch_size=2000)
    Grade.objects.bulk_create(grades, batch_size=2000)


def copy_runs(template: Any, entity_ids: list[int]) -> None:
    """Copy the template's runs and grades to ``entity_ids``, set-based, under new ids (two in five fail)."""
    from django.db import connection

    from grading.models import Execution, Grade

    executions, grades = Execution._meta.db_table, Grade._meta.db_table
    quote = connection.ops.quote_name
    e_cols = [quote(f.column) for f in Execution._meta.concrete_fields if f.column not in ("id", "entity_id")]
    g_cols = [
        quote(f.column) for f in Grade._meta.concrete_fields if f.column not in ("execution_id", "entity_id", "passed")
    ]
    new_id = "gen_random_uuid()" if connection.vendor == "postgresql" else "lower(hex(randomblob(16)))"
    with connection.cursor() as cursor:
        for start in range(0, len(entity_ids), 100):
            chunk = entity_ids[start : start + 100]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute("DROP TABLE IF EXISTS bench_ids")
            cursor.execute(
                f"CREATE TEMP TABLE bench_ids AS SELECT e.id AS old, n.id AS entity_id, {new_id} AS new "
                f"FROM {executions} e CROSS JOIN grading_entity n WHERE e.entity_id = %s AND n.id IN ({marks})",
                [template.pk, *chunk],
            )
            cursor.execute(
                f"INSERT INTO {executions} (id, entity_id, {', '.join(e_cols)}) "
                f"SELECT m.new, m.entity_id, {', '.join('e.' + c for c in e_cols)} "
                f"FROM bench_ids m JOIN {executions} e ON e.id = m.old"
            )
            cursor.execute(
                f"INSERT INTO {grades} (execution_id, entity_id, passed, {', '.join(g_cols)}) "
                f"SELECT m.new, m.entity_id, ((m.entity_id * 37 + e.duration_ms) % 5) >= 2, "
                f"{', '.join('g.' + c for c in g_cols)} "
                f"FROM bench_ids m JOIN {executions} e ON e.id = m.old JOIN {grades} g ON g.execution_id = m.old"
            )
            cursor.execute("DROP TABLE bench_ids")


def make_ratings(rated: list[Any], user: Any) -> None:
    """A person's tone rating on each rated entity's 30 newest runs."""
    from decimal import Decimal

    from grading.models import Execution, Rating

    rows = []
    for entity in rated:
        ids = Execution.objects.filter(entity=entity).order_by("-completed_at").values_list("id", flat=True)[:30]
        for k, execution_id in enumerate(ids):
            value = 1 + k % 5
            rows.append(
                Rating(
                    execution_id=execution_id,
                    entity=entity,
                    metric_id="tone",
                    user=user,
                    value=Decimal(value),
                    normalized=(value - 1) / 4,
                )
            )
    Rating.objects.bulk_create(rows, batch_size=2000)


def make_cycles(entities: list[Any], now: datetime) -> None:
    """Five settled cycles an entity with their rounds and cards, and the 100 live cycles (see the docstring)."""
    from evolution.models import Cycle, Round
    from hitl.models import Card

    cycles, live_plan = [], []
    statuses = ["validated", "unvalidated", "skipped", "validated"]
    for i, entity in enumerate(entities):
        ends = [*statuses, "failed" if i % 20 == 0 else ("regressed" if i % 3 == 0 else "validated")]
        for j, status in enumerate(ends):
            at = now - timedelta(days=25 - j * 5, minutes=i)
            cycles.append(
                Cycle(
                    entity=entity,
                    key=f"bench:{entity.pk}:{j}",
                    origin="grade",
                    phase="settled",
                    status=status,
                    analysed=status != "skipped",
                    reason="cooldown" if status == "skipped" else "",
                    started_at=at - timedelta(hours=2),
                    proposed_at=at - timedelta(hours=1),
                    applied_at=at - timedelta(minutes=50) if status in ("validated", "regressed") else None,
                    merged_at=at - timedelta(minutes=40) if status in ("validated", "regressed") else None,
                    completed_at=at,
                    moved_at=at,
                )
            )
    k = 0
    stride = 7 if len(entities) >= 700 else 1  # one live cycle an entity at most (the claim is unique)
    for phase, n in LIVE:
        for _ in range(min(n, max(0, len(entities) - k))):
            entity = entities[(k * stride) % len(entities)]
            k += 1
            at = now - timedelta(hours=3, minutes=k)
            cycle = Cycle(
                entity=entity,
                key=f"bench:{entity.pk}:live",
                claim=entity.pk,
                origin="grade",
                phase=phase,
                analysed=True,
                started_at=at,
                moved_at=at,
                window={"ready": True, "runIds": []},
            )
            if phase == "merge_wait":
                cycle.applied_at, cycle.merge_deadline = at, now + timedelta(days=2)
            if phase == "watching":
                cycle.applied_at = cycle.merged_at = cycle.watch_opened_at = at
                cycle.watch_deadline = now + timedelta(days=3)
                cycle.watch_tally = "2 of 5 graded"
            cycles.append(cycle)
            live_plan.append(cycle)
    Cycle.objects.bulk_create(cycles, batch_size=1000)
    saved = list(Cycle.objects.filter(key__startswith="bench:").order_by("id"))
    cards, rounds = [], []
    for cycle in saved:
        settled = cycle.phase == "settled"
        card = None
        if cycle.analysed:
            pending = cycle.phase == "deciding"
            card = Card(
                producer="loop",
                kind="decide",
                key=f"bench-decide:{cycle.pk}",
                subject=f"cycle {cycle.pk}",
                title=f"Cycle {cycle.pk}: add 'invoice' to the billing rule",
                text="The proposal.",
                options=[{"value": "accept", "label": "Accept"}, {"value": "skip", "label": "Skip"}],
                expires_at=(cycle.started_at + timedelta(days=2)) if not pending else now + timedelta(days=1),
                status="pending" if pending else "answered",
                answer={} if pending else {"choice": "accept"},
                responded_at=None if pending else cycle.started_at + timedelta(minutes=30),
                created_at=cycle.started_at,
                payload={"cycle": cycle.pk},
            )
            cards.append(card)
        if settled:
            cards.append(
                Card(
                    producer="grading",
                    kind="rating",
                    key=f"bench-rate:{cycle.pk}",
                    subject="a run",
                    title="Rate this run",
                    expires_at=cycle.started_at + timedelta(days=1),
                    status="answered" if cycle.pk % 2 else "expired",
                    responded_at=cycle.started_at + timedelta(hours=1) if cycle.pk % 2 else None,
                    created_at=cycle.started_at,
                )
            )
        status = {
            "validated": "merged",
            "regressed": "merged",
            "unvalidated": "closed",
            "failed": "failed",
            "skipped": "skipped",
        }.get(cycle.status, "analysing")
        if cycle.phase == "deciding":
            status = "proposed"
        if cycle.phase in ("merge_wait",):
            status = "applied"
        if cycle.phase == "watching":
            status = "merged"
        if cycle.analysed:
            number = 100 + cycle.pk
            rounds.append(
                Round(
                    cycle=cycle,
                    number=1,
                    status=status,
                    author="pipeline:fixer",
                    summary="Add 'invoice' to the billing rule",
                    card=card,
                    pr_number=number if status in ("merged", "applied", "closed") else None,
                    merge_gate="human" if status in ("merged", "applied", "closed") else "",
                    merge_sha="a" * 40 if status == "merged" else "",
                    acceptance="person",
                    created_at=cycle.started_at,
                )
            )
    for i in range(40):
        cards.append(
            Card(
                producer="grading",
                kind="rating",
                key=f"bench-rate-pending:{i}",
                subject="a run",
                title="Rate this run",
                expires_at=now + timedelta(days=1),
                created_at=now - timedelta(hours=1, minutes=i),
            )
        )
    Card.objects.bulk_create(cards, batch_size=1000)
    Round.objects.bulk_create(rounds, batch_size=1000)


def build(n_entities: int, runs: int) -> None:
    """Build the whole data set (see the module docstring) and vacuum it."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from grading.models import Execution, Grade

    started = time.perf_counter()
    user = get_user_model().objects.create_superuser("alice", "alice@example.com", "bench-password")
    made = make_entities(n_entities)
    plain_t = next(e for e in made if e.slug == "bench-template-plain")
    rated_t = next(e for e in made if e.slug == "bench-template-rated")
    entities = [e for e in made if e not in (plain_t, rated_t)]
    rated = [e for e in entities if "tone" in e.terms["evaluation"]["metrics"]]
    now = timezone.now()
    newest = now - timedelta(days=1)
    for template, is_rated in ((plain_t, False), (rated_t, True)):
        template_runs(template, runs, newest, is_rated)
        targets = [e.pk for e in entities if (e in rated) == is_rated]
        copy_runs(template, targets)
        Grade.objects.filter(entity=template).delete()
        Execution.objects.filter(entity=template).delete()
        print(f"   copied {runs:,} runs to {len(targets):,} entities ({time.perf_counter() - started:.0f} s)")
    make_ratings(rated, user)
    make_cycles(entities, now)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("ANALYZE")
    print(f"   built in {time.perf_counter() - started:.0f} s")


# --- The pages ---------------------------------------------------------------------------------


def pages() -> list[tuple[str, str, dict[str, str]]]:
    """(label, path, extra headers) of every page timed."""
    from evolution.models import Cycle
    from grading.models import Entity, Execution

    plain = Entity.objects.get(slug="bench-0001")
    rated = Entity.objects.get(slug="bench-0005")
    run = Execution.objects.filter(entity=plain).order_by("-completed_at").first()
    cycle = Cycle.objects.filter(entity=plain).order_by("-id").first()
    htmx = {"HTTP_HX_REQUEST": "true"}
    entity = f"/evolution/entities/scenario/{plain.slug}"
    return [
        ("login page (floor)", "/accounts/login/", {}),
        ("/evolution/ (fleet)", "/evolution/", {}),
        ("/evolution/ HTMX table", "/evolution/", htmx),
        ("/api/loop/status/", "/api/loop/status/", {}),
        ("/evolution/rate/", "/evolution/rate/", {}),
        ("/evolution/needs-you/", "/evolution/needs-you/", {}),
        ("/evolution/needs-you/count/", "/evolution/needs-you/count/", htmx),
        ("/inbox/", "/inbox/", {}),
        ("entity page", f"{entity}/", {}),
        ("entity page (human-rated)", f"/evolution/entities/scenario/{rated.slug}/", {}),
        ("entity cycles", f"{entity}/cycles/", {}),
        ("entity supervision", f"{entity}/supervision/", {}),
        ("entity ideas", f"{entity}/ideas/", {}),
        ("entity policy", f"{entity}/policy/", {}),
        ("a cycle's story", f"/evolution/cycles/{cycle.pk}/", {}),
        ("a run", f"/evolution/runs/{run.pk}/", {}),
        ("/evolution/entities/", "/evolution/entities/", {}),
        ("/evolution/pulls/", "/evolution/pulls/", {}),
        ("/evolution/settings/", "/evolution/settings/", {}),
        ("/beings/", "/beings/", {}),
        ("/api/loop/history/", "/api/loop/history/", {}),
        ("/api/loop/status/ one entity", f"/api/loop/status/?targetKind=scenario&targetId={plain.slug}", {}),
        ("/api/loop/supervision/", "/api/loop/supervision/", {}),
        ("/api/loop/ideas/", "/api/loop/ideas/", {}),
        ("/api/entities/", "/api/entities/", {}),
        ("/api/runs/", "/api/runs/", {}),
        ("/api/grades/", "/api/grades/", {}),
    ]


def time_page(client: Any, path: str, headers: dict[str, str], requests: int) -> dict[str, Any]:
    """Warm up, then time ``requests`` GETs of ``path``; the query count of one, the status and the size."""
    from django.db import connection

    for _ in range(3):
        response = client.get(path, **headers)
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = client.get(path, **headers)
    spent = []
    for _ in range(requests):
        started = time.perf_counter()
        client.get(path, **headers)
        spent.append((time.perf_counter() - started) * 1000)
    spent.sort()
    p95 = spent[min(len(spent) - 1, int(round(0.95 * len(spent))) - 1)]
    return {
        "p50": statistics.median(spent),
        "p95": p95,
        "queries": len(statements),
        "status": response.status_code,
        "kb": len(response.content) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/dash_bench")
    parser.add_argument("--sqlite-path", default="var/dash_bench.sqlite3")
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000, help="graded runs per entity")
    parser.add_argument("--rebuild", action="store_true", help="drop the database and build the data set again")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="", help="time only the pages whose label contains this")
    args = parser.parse_args()
    configure(args.db, args.pg_url, args.sqlite_path, args.rebuild)

    from django.db import connection
    from django.test import Client

    from grading.models import Entity, Grade

    if not Entity.objects.filter(slug="bench-0000").exists():
        build(args.entities, args.runs)
    print(
        f"database: {connection.vendor}  entities: {Entity.objects.filter(loop_enabled=True).count():,}  "
        f"grades: {Grade.objects.count():,}  load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    from singularity.longlived import freeze

    freeze()  # as singularity/wsgi.py does when a server starts: what the process keeps is not walked by gc
    client = Client()
    client.login(username="alice", password="bench-password")
    best: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for label, path, headers in pages():
            if args.only and args.only not in label and label != "login page (floor)":
                continue
            if label.startswith("login"):
                client.logout()
            m = time_page(client, path, headers, args.requests)
            if label.startswith("login"):
                client.login(username="alice", password="bench-password")
            kept = best.setdefault(label, m)
            kept["p50"], kept["p95"] = min(kept["p50"], m["p50"]), min(kept["p95"], m["p95"])
    floor = best["login page (floor)"]["p50"]
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| page | queries | p50 ms | p95 ms | p50 / floor | status | KB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, m in best.items():
        print(
            f"| {label} | {m['queries']} | {m['p50']:.1f} | {m['p95']:.1f} | {m['p50'] / floor:.1f}× "
            f"| {m['status']} | {m['kb']:.0f} |"
        )


if __name__ == "__main__":
    main()
