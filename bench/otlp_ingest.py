#!/usr/bin/env python
"""OTLP traces in, end to end: the real OpenTelemetry SDK exporting to ``POST /v1/traces`` from 4 processes (issue 30).

Each trace has 6 spans (an ``invoke_agent`` root, 3 model calls with messages and usage, 2 tool calls) made by
the SDK's tracer and sent by its ``BatchSpanProcessor`` + OTLP/HTTP protobuf exporter, gzip, from ``--procs``
processes into the project's server (gunicorn as ``manage.py up`` runs it; ``--server runserver`` for the old one) on
Postgres, with the pool of connections on. Every export is timed inside the exporter twice: the request on the
wire (the exporter's HTTP session) and the whole export call (the SDK's protobuf encoding and gzip, then the request). The exporters make
their traces flat out, or ``--rate`` traces a second together (an agent waits on its model: the export's p95 at a
given rate, not only at the most the machine takes). Then the beat's sweep (``grading.otlp_assemble.sweep``) makes
the runs and grades them under ``method: none`` in one process (``--sweeps N``: N at once, as overlapping beat tasks
on workers do; they share the traces by ``SKIP LOCKED``), timed apart. It prints: export requests p50/p95, spans/s and traces/s accepted (from the first span made to the
last export answered), runs assembled-and-graded/s, the CPU time a trace cost the web server's processes and
the database's backends while the exporters ran and a run cost the sweep's process (figures a busy machine does
not change much, unlike the rates), the floor (one single-row INSERT + COMMIT on the same database), and queries
per trace for one export request of 85 traces and for the sweep.

    .venv/bin/python bench/otlp_ingest.py --pg-url postgres://postgres@127.0.0.1:5432/otlp_bench --traces 2000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETUP = """
import django; django.setup()
from django.contrib.auth import get_user_model
from grading.models import Entity
from singularity.models import ApiToken
from tests.grading.grading_helpers import make_entity
if not Entity.objects.filter(slug="triage").exists():
    make_entity("triage", evaluation={"method": "none", "sample": {"rate": 1.0, "maxPerDay": 10**9}})
user, _ = get_user_model().objects.get_or_create(username="bench-agent")
print(ApiToken.issue(user, "bench", is_agent=True)[1])
"""

SWEEP = """
import json, sys, time
import django; django.setup()
from datetime import timedelta
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from grading import otlp_assemble
now = timezone.now() + timedelta(hours=1)
connection.ensure_connection()
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # the sweeps of one bench start together
started, cpu = time.time(), time.process_time()
with CaptureQueriesContext(connection) as queries:
    runs = otlp_assemble.sweep(now=now)
ended, cpu = time.time(), time.process_time() - cpu
print(json.dumps({"runs": runs, "started": started, "ended": ended, "cpu": cpu, "queries": len(queries)}))
"""

COUNTS = """
import json
import django; django.setup()
from grading.models import Execution, Grade
graded = Grade.objects.filter(status=Grade.Status.GRADED).count()
print(json.dumps({"executions": Execution.objects.count(), "graded": graded}))
"""

REQUEST_QUERIES = """
import json, sys
sys.path.insert(0, %(bench)r)
import django; django.setup()
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from grading.api_otlp import export_traces
from otlp_ingest import make_traces
def request_of(spans):
    return RequestFactory().post("/v1/traces", data=encode_spans(spans).SerializeToString(),
                                 content_type="application/x-protobuf", HTTP_AUTHORIZATION="Bearer %(key)s")
export_traces(request_of(make_traces(1, memory=True)))  # the token's first use noted (then once a minute)
spans = make_traces(85, memory=True)
request = request_of(spans)
with CaptureQueriesContext(connection) as queries:
    response = export_traces(request)
assert response.status_code == 200, response.content
print(json.dumps({"traces": 85, "spans": len(spans), "queries": len(queries)}))
"""

MESSAGE = "My card was charged twice for the March invoice; please refund the second charge. " * 4


def make_traces(count: int, *, memory: bool = False, provider: Any = None, rate: float = 0.0) -> Any:
    """Make ``count`` traces of 6 spans with the SDK (into ``provider``, or kept in memory and returned).

    With ``rate``, at most that many traces a second (an agent waits on its model; the default makes them flat out).
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    kept = InMemorySpanExporter() if memory else None
    if provider is None:
        provider = TracerProvider(resource=Resource.create({"singularity.entity": "scenario:triage"}))
        provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("bench-agent")
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": MESSAGE}]}])
    answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "billing"}]}])
    started = time.monotonic()
    for n in range(count):
        if rate:
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
        with tracer.start_as_current_span("invoke_agent triage") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            root.set_attribute("input.value", json.dumps({"ticket": MESSAGE, "_label": "billing", "n": n}))
            for step in range(3):
                with tracer.start_as_current_span("chat gpt-4o") as call:
                    call.set_attribute("gen_ai.operation.name", "chat")
                    call.set_attribute("gen_ai.request.model", "gpt-4o")
                    call.set_attribute("gen_ai.input.messages", messages)
                    call.set_attribute("gen_ai.output.messages", answer)
                    call.set_attribute("gen_ai.usage.input_tokens", 420 + step)
                    call.set_attribute("gen_ai.usage.output_tokens", 12)
                    call.set_attribute("singularity.cost_usd", "0.001170")
                if step < 2:
                    with tracer.start_as_current_span("execute_tool crm_lookup") as tool:
                        tool.set_attribute("gen_ai.operation.name", "execute_tool")
                        tool.set_attribute("gen_ai.tool.name", "crm_lookup")
                        tool.set_attribute("gen_ai.tool.call.arguments", json.dumps({"customer": n}))
                        tool.set_attribute("gen_ai.tool.call.result", json.dumps({"plan": "pro", "charges": 2}))
            root.set_attribute("output.value", json.dumps({"label": "billing"}))
    return kept.get_finished_spans() if kept is not None else None


def exporter_process(url: str, key: str, count: int, out: Any, rate: float = 0.0, nice: int = 0) -> None:
    """Export ``count`` traces through the SDK's batch processor; put (export durations, failures, start, end).

    ``nice``: the agents' scheduling priority below the server's (agents run on hosts of their own in production;
    here they share the server's two cores).
    """
    if nice:
        os.nice(nice)
    import requests
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    durations: list[float] = []
    posts: list[float] = []
    failures = [0]

    class TimedSession(requests.Session):
        """The exporter's HTTP session, timing each request on the wire (the SDK's encoding and gzip are not in it)."""

        def request(self, *args: Any, **kwargs: Any) -> requests.Response:
            started = time.perf_counter()
            try:
                return super().request(*args, **kwargs)
            finally:
                posts.append(time.perf_counter() - started)

    class Timed(SpanExporter):
        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(
                endpoint=f"{url}/v1/traces",
                headers={"Authorization": f"Bearer {key}"},
                compression=Compression.Gzip,
                timeout=30,
                session=TimedSession(),
            )

        def export(self, spans: Any) -> SpanExportResult:
            started = time.perf_counter()
            result = self.inner.export(spans)
            durations.append(time.perf_counter() - started)
            if result != SpanExportResult.SUCCESS:
                failures[0] += len(spans)
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

    provider = TracerProvider(resource=Resource.create({"singularity.entity": "scenario:triage"}))
    provider.add_span_processor(
        BatchSpanProcessor(Timed(), max_queue_size=count * 6 + 1, max_export_batch_size=512, schedule_delay_millis=200)
    )
    started = time.time()
    make_traces(count, provider=provider, rate=rate)
    provider.force_flush(timeout_millis=600_000)
    ended = time.time()
    provider.shutdown()
    out.put((durations, failures[0], started, ended, posts))


def django_script(script: str, env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def sweeps(count: int, env: dict[str, str]) -> dict[str, Any]:
    """Run ``count`` sweeps at once, each its own process (as beat tasks on workers); their runs, span and CPU."""
    start = time.time() + 5  # each process loads Django first
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEP, str(start)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    done = [json.loads(process.communicate()[0].strip().splitlines()[-1]) for process in processes]
    if any(process.returncode for process in processes):
        raise SystemExit("a sweep failed")
    return {
        "runs": sum(d["runs"] for d in done),
        "took": max(d["ended"] for d in done) - min(d["started"] for d in done),
        "cpu": sum(d["cpu"] for d in done),
        "queries": sum(d["queries"] for d in done),
        "each": [d["runs"] for d in done],
        **json.loads(django_script(COUNTS, env).splitlines()[-1]),
    }


def floor_ms(pg_url: str, rounds: int = 200) -> float:
    """p50 of one single-row INSERT + COMMIT on the database (ms)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, at timestamptz)")
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            connection.execute("INSERT INTO bench_floor (at) VALUES (now())")
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) the processes have used so far, from /proc (0 for one gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def server_pids(server_pid: int) -> list[int]:
    """The web server's processes: gunicorn's master and its workers."""
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children")
    return [server_pid, *(int(pid) for pid in children.read_text().split())] if children.exists() else [server_pid]


def database_pids(pg_url: str) -> list[int]:
    """The database's backends serving its database (but this one)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [pg_url.rpartition("/")[2]],
        ).fetchall()
    return [row[0] for row in rows]


def fresh_database(pg_url: str) -> None:
    import psycopg

    base, _, name = pg_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", required=True)
    parser.add_argument("--traces", type=int, default=2000, help="traces per process")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/8")
    parser.add_argument(
        "--server", choices=["gunicorn", "runserver"], default="gunicorn", help="the production server (as up runs it)"
    )
    parser.add_argument("--web-concurrency", type=int, default=2, help="gunicorn's worker processes")
    parser.add_argument("--web-threads", type=int, default=4, help="gunicorn's threads a worker")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="traces a second offered, all processes together (0: flat out)"
    )
    parser.add_argument("--sweeps", type=int, default=1, help="sweeps at once, each its own process (SKIP LOCKED)")
    parser.add_argument(
        "--exporter-nice", type=int, default=0, help="the exporting agents' niceness (they share the server's CPU)"
    )
    args = parser.parse_args()

    fresh_database(args.pg_url)
    env = {
        **os.environ,
        "DATABASE_URL": args.pg_url,
        "CELERY_BROKER_URL": args.broker,
        "SINGULARITY_DB_POOL": "true",
        "DJANGO_SETTINGS_MODULE": "singularity.settings",
        "OTLP_GRACE_SECS": "3600",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   capture_output=True)  # fmt: skip
    key = django_script(SETUP, env).splitlines()[-1]
    floor = floor_ms(args.pg_url)
    request = json.loads(django_script(REQUEST_QUERIES % {"bench": str(ROOT / "bench"), "key": key}, env))
    django_script(
        "import django; django.setup()\nfrom grading.models import OtlpTrace\nOtlpTrace.objects.all().delete()", env
    )

    if args.server == "runserver":
        command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{args.port}", "--noreload"]
    else:  # as ``manage.py up`` runs it (singularity.management.commands.up.web_command)
        command = [sys.executable, "-m", "gunicorn", "singularity.wsgi:application", "--config",
                   "python:singularity.gunicorn_conf", "--bind", f"127.0.0.1:{args.port}"]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=ROOT, env={**env, "WEB_CONCURRENCY": str(args.web_concurrency), "WEB_THREADS": str(args.web_threads)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"{url}/accounts/login/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        web = server_pids(server.pid)
        web_before = cpu_seconds(web)
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        workers = [
            context.Process(
                target=exporter_process, args=(url, key, args.traces, out, args.rate / args.procs, args.exporter_nice)
            )
            for _ in range(args.procs)
        ]
        for worker in workers:
            worker.start()
        results = [out.get() for _ in workers]
        web_cpu = cpu_seconds(web) - web_before
        database_cpu = cpu_seconds(database_pids(args.pg_url))  # the pool's backends, opened by these requests
        for worker in workers:
            worker.join()
    finally:
        server.terminate()
        server.wait(timeout=30)

    durations = [d for result in results for d in result[0]]
    posts = [d for result in results for d in result[4]]
    failed = sum(result[1] for result in results)
    wall = max(result[3] for result in results) - min(result[2] for result in results)
    traces = args.traces * args.procs
    sweep = sweeps(args.sweeps, env)
    offered = f"offered at {args.rate:,.0f} traces/s" if args.rate else "made flat out"
    if args.exporter_nice:
        offered += f", the exporters at nice {args.exporter_nice}"
    print(f"traces: {traces:,} of 6 spans from {args.procs} processes, {offered}, into {args.server} "
          f"({args.web_concurrency} workers × {args.web_threads} threads); spans not accepted: {failed:,}")  # fmt: skip
    print(f"export requests on the wire: {len(posts):,}, p50 {percentile(posts, 0.5) * 1000:.0f} ms, "
          f"p95 {percentile(posts, 0.95) * 1000:.0f} ms")  # fmt: skip
    print(f"export calls (the SDK's encoding and gzip, then the request): p50 {percentile(durations, 0.5) * 1000:.0f} "
          f"ms, p95 {percentile(durations, 0.95) * 1000:.0f} ms")  # fmt: skip
    print(f"accepted: {traces / wall:,.0f} traces/s, {traces * 6 / wall:,.0f} spans/s over {wall:.1f} s")
    print(f"assembled and graded: {sweep['runs']:,} runs in {sweep['took']:.1f} s = "
          f"{sweep['runs'] / sweep['took']:,.0f} runs/s ({sweep['graded']:,} graded, {sweep['executions']:,} runs; "
          f"{args.sweeps} sweep(s) at once took {sweep['each']})")  # fmt: skip
    print(f"CPU a trace at export (load-independent): web server {web_cpu / traces * 1000:.2f} ms, "
          f"database {database_cpu / traces * 1000:.2f} ms; the sweep {sweep['cpu'] / sweep['runs'] * 1000:.2f} ms "
          "a run (its process)")  # fmt: skip
    print(f"floor: one single-row INSERT + COMMIT p50 {floor:.2f} ms")
    print(f"queries: {request['queries'] / request['traces']:.2f} per trace at export ({request['queries']} for "
          f"{request['traces']} traces, {request['spans']} spans), "
          f"{sweep['queries'] / max(1, sweep['runs']):.3f} per run in the sweep")  # fmt: skip


if __name__ == "__main__":
    main()
