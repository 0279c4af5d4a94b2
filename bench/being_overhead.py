#!/usr/bin/env python
"""The being runtime's own overhead per model round and per tool call.

Runs cycles against a zero-latency loopback gateway (the real client, a real
HTTP server) and a local MCP server (a real stdio child process), on the
database named by ``--db`` (``sqlite`` or ``postgres``). Time spent inside
the gateway call and inside the tool call is measured and subtracted: what is
left is ours (framing, debit, durable saves, journal, bookkeeping). Queries
are counted per round with a short and a long journal to show they do not
grow with history.

    .venv/bin/python bench/being_overhead.py --db sqlite
    .venv/bin/python bench/being_overhead.py --db postgres --pg-url postgres://postgres@127.0.0.1:5432/singularity_bench
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configure(db: str, pg_url: str) -> None:
    if db == "sqlite":
        os.environ["DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix='bench-')}/bench.sqlite3"
    else:
        import psycopg

        base, _, name = pg_url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = pg_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "singularity.settings"
    os.environ["SINGULARITY_WORKSPACE"] = tempfile.mkdtemp(prefix="bench-ws-")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Timed:
    """Wraps an object and adds up the wall time spent inside one of its methods."""

    def __init__(self, inner, method: str) -> None:
        self.inner, self.method, self.spent_ns = inner, method, 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        def timed(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return attr(*args, **kwargs)
            finally:
                self.spent_ns += time.perf_counter_ns() - start

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/singularity_bench")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--tools-per-round", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per cycle in the many-rounds scenario")
    parser.add_argument(
        "--history", type=int, default=100_000, help="journal events to pre-fill for the long-journal run"
    )
    args = parser.parse_args()
    configure(args.db, args.pg_url)

    import json

    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    from singularity.being.actions import create_being
    from singularity.being.runtime import Prices
    from singularity.demo_model import ChatCompletionsServer, Reply
    from singularity.gateway import Gateway
    from singularity.models import Event
    from singularity.tools import build_catalogue
    from tests.singularity.helpers import make_runtime

    tools = args.tools_per_round
    rounds = args.rounds
    mode = {"tools": 0, "rounds": 1}
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}

    def answer(request, headers):
        # Ask for `tools` echo calls per round until `rounds` tool rounds are done, then end the cycle.
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done < mode["rounds"] - 1:
            return Reply(tool_calls=[("bench__echo", {"text": "x"})] * mode["tools"], usage=usage)
        return Reply(content="ok", usage=usage)

    config = Path(tempfile.mkdtemp()) / "mcp.json"
    echo = ROOT / "tests/fakes/mcp/echo_server.py"
    config.write_text(json.dumps({"mcpServers": {"bench": {"command": sys.executable, "args": [str(echo)]}}}))

    def measure(label: str, n_rounds: int, n_tools: int, history: int = 0) -> dict:
        mode["rounds"], mode["tools"] = n_rounds, n_tools
        being = create_being(f"bench-{label}", starting="1000000")
        if history:
            Event.objects.bulk_create(
                [Event(being=being, seq=i + 1, kind="warning", data={"n": i}) for i in range(history)], batch_size=5000
            )
            being.event_seq = history
            being.save(update_fields=["event_seq"])
        runtime = make_runtime(being, gateway, timed_tools, prices=Prices(1, 1, 1), max_rounds=n_rounds)
        runtime.run_cycle()  # warm up
        ours, queries = [], []
        for _ in range(args.cycles):
            t0, g0, c0 = time.perf_counter_ns(), gateway.spent_ns, timed_tools.spent_ns
            reset_queries()  # the query log is a bounded deque; a full one makes the capture read zero
            with CaptureQueriesContext(connection) as ctx:
                runtime.run_cycle()
            ours.append((time.perf_counter_ns() - t0) - (gateway.spent_ns - g0) - (timed_tools.spent_ns - c0))
            queries.append(len(ctx.captured_queries))
        return {
            "median_ms": statistics.median(ours) / 1e6,
            "p95_ms": sorted(ours)[int(len(ours) * 0.95)] / 1e6,
            "queries": statistics.median(queries),
        }

    with ChatCompletionsServer(answer) as server, build_catalogue(mcp_config_path=str(config)) as catalogue:
        gateway = Timed(Gateway(server.base_url, "bench", max_retries=0), "complete")
        timed_tools = Timed(catalogue, "call")
        a = measure("a", 1, 0)  # fixed cost + 1 round
        b = measure("b", rounds, 1)  # fixed + rounds rounds + (rounds-1) tools
        c = measure("c", 2, tools)  # fixed + 2 rounds + tools tools
        long = measure("long", 2, tools, history=args.history)

    # a = F + r;  b = F + R*r + (R-1)*t;  c = F + 2r + T*t  -> solve for r, t.
    R, T = rounds, tools
    db, dc = b["median_ms"] - a["median_ms"], c["median_ms"] - a["median_ms"]
    # db = (R-1)(r + t); dc = r + T*t
    r_plus_t = db / (R - 1)
    t = (dc - r_plus_t) / (T - 1)
    r = r_plus_t - t
    fixed = a["median_ms"] - r
    print(f"database: {connection.vendor}  cycles per scenario: {args.cycles}")
    print(
        f"A  1 round, no tools             : ours median {a['median_ms']:.3f} ms  p95 {a['p95_ms']:.3f} ms  queries {a['queries']:.0f}"
    )
    print(
        f"B  {R} rounds, 1 tool each        : ours median {b['median_ms']:.3f} ms  p95 {b['p95_ms']:.3f} ms  queries {b['queries']:.0f}"
    )
    print(
        f"C  2 rounds, {T} tools in round 1  : ours median {c['median_ms']:.3f} ms  p95 {c['p95_ms']:.3f} ms  queries {c['queries']:.0f}"
    )
    print(
        f"C' same with {args.history:,} journal events: ours median {long['median_ms']:.3f} ms  queries {long['queries']:.0f}"
    )
    print(f"=> per model round (debit + durable save): {r:.3f} ms")
    print(f"=> per tool call (outcome, journal, durable save): {t:.3f} ms")
    print(f"=> per cycle fixed (gate, framing, cycle row, finish): {fixed:.3f} ms")


if __name__ == "__main__":
    main()
