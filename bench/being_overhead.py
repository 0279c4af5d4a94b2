#!/usr/bin/env python
"""The being runtime's own overhead per model round and per tool call.

Runs cycles against a zero-latency loopback gateway (the real client, a real
HTTP server) and a local MCP server (a real stdio child process), on the
database named by ``--db`` (``sqlite`` or ``postgres``). Time spent inside
the gateway call and inside the tool call is measured and subtracted: what is
left is ours (framing, debit, durable saves, journal, bookkeeping). Queries
are counted per round with a short and a long journal to show they do not
grow with history. Each is run with the cost reservation off (the origin's
way) and on (its worst case held in the save before every model call),
beside a single-row commit timed between the cycles of that same run (so
both see the same load on a shared machine). Times are taken with the query
log off; statements are counted in extra cycles with it on (Django's log
costs some 0.1 ms a statement, which the commit it is set beside does not
pay). Beside each wall-clock median the CPU time this process spent (``time.process_time``) is given for
the round and for the commit: steadier than the wall clock when other work shares the machine.

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
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--tools-per-round", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per cycle in the many-rounds scenario")
    parser.add_argument(
        "--history", type=int, default=100_000, help="journal events to pre-fill for the long-journal run"
    )
    parser.add_argument(
        "--commits-per-cycle", type=int, default=16, help="single-row commits timed after each timed cycle"
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

    from singularity.being.runtime import Runtime

    samples: dict[str, list[int]] = {
        "round": [],
        "tool": [],
        "round_q": [],
        "tool_q": [],
        "reserve": [],
        "reserve_q": [],
        "commit_first": [],
        "round_second": [],
        "round_cpu": [],
        "reserve_cpu": [],
        "tool_cpu": [],
    }

    def instrument(method_name: str, key: str, subtract_tool: bool) -> None:
        original = getattr(Runtime, method_name)

        def timed(self, *a, **kw):
            c0, q0 = timed_tools.spent_ns, len(connection.queries_log)
            t0, p0 = time.perf_counter_ns(), time.process_time_ns()
            try:
                return original(self, *a, **kw)
            finally:
                spent = time.perf_counter_ns() - t0 - ((timed_tools.spent_ns - c0) if subtract_tool else 0)
                # The tool's own CPU is in its child process; a timed wrapper's own share is left in (it is small).
                samples[key + "_cpu"].append(time.process_time_ns() - p0)
                samples[key].append(spent)
                samples[key + "_q"].append(len(connection.queries_log) - q0)

        setattr(Runtime, method_name, timed)

    from django.db import transaction
    from django.utils import timezone

    from singularity.models import Being

    commit_being = create_being("bench-commit", starting="1")

    commit_cpu: list[int] = []

    def single_row_commit(n: int, cpu: list[int] | None = None) -> list[int]:
        """The ns of each of ``n`` transactions updating one being row: the floor any durable step pays (the CPU
        ns of each go to ``cpu`` when given)."""
        times = []
        for _ in range(n):
            t0, p0 = time.perf_counter_ns(), time.process_time_ns()
            with transaction.atomic():
                Being.objects.filter(pk=commit_being.pk).update(updated_at=timezone.now())
            times.append(time.perf_counter_ns() - t0)
            if cpu is not None:
                cpu.append(time.process_time_ns() - p0)
        return times

    timing = {"on": False}

    def in_place(method_name: str) -> None:
        """Time a single-row commit in the model round's own place: right after the model's answer, before or after
        the round's debit by turns. The first of the two runs on caches the gateway call left cold (the commit in a
        loop does not), so each round's debit counts when it went first and each commit when it did."""
        original = getattr(Runtime, method_name)
        turn = {"n": 0}

        def paired(self, *a, **kw):
            if not timing["on"]:  # counting statements: the commit's are not the round's
                return original(self, *a, **kw)
            turn["n"] += 1
            if turn["n"] % 2:
                samples["commit_first"].extend(single_row_commit(1))
                samples["round_second"].append(0)
                return original(self, *a, **kw)
            try:
                return original(self, *a, **kw)
            finally:
                single_row_commit(1)
                samples["round_second"].append(1)

        setattr(Runtime, method_name, paired)

    instrument("_debit", "round", subtract_tool=False)
    in_place("_debit")
    instrument("_tool_finished", "tool", subtract_tool=True)
    instrument("_reserve", "reserve", subtract_tool=False)

    def measure(label: str, n_rounds: int, n_tools: int, history: int = 0, reserve: bool = False) -> dict:
        mode["rounds"], mode["tools"] = n_rounds, n_tools
        being = create_being(f"bench-{label}", starting="1000000")
        if history:
            Event.objects.bulk_create(
                [Event(being=being, seq=i + 1, kind="warning", data={"n": i}) for i in range(history)], batch_size=5000
            )
            being.event_seq = history
            being.save(update_fields=["event_seq"])
        runtime = make_runtime(
            being, gateway, timed_tools, prices=Prices(1, 1, 1), max_rounds=n_rounds, reserve=reserve
        )
        runtime.run_cycle()  # warm up
        # Statements first, in a few cycles with the query log on; their times are thrown away.
        queries = []
        for _ in range(3):
            reset_queries()  # the query log is a bounded deque; keep it from filling
            with CaptureQueriesContext(connection) as ctx:
                runtime.run_cycle()
            queries.append(len(ctx.captured_queries))
        counted = {key: list(samples[key]) for key in ("round_q", "tool_q", "reserve_q")}
        for values in samples.values():
            values.clear()
        # Then the times, with the log off, and the single-row commit between cycles under the same load.
        ours, commits = [], []
        commit_cpu.clear()
        timing["on"] = True
        for _ in range(args.cycles):
            t0, g0, c0 = time.perf_counter_ns(), gateway.spent_ns, timed_tools.spent_ns
            runtime.run_cycle()
            ours.append((time.perf_counter_ns() - t0) - (gateway.spent_ns - g0) - (timed_tools.spent_ns - c0))
            commits.extend(single_row_commit(args.commits_per_cycle, commit_cpu))
        timing["on"] = False
        samples.update(counted)

        def med(key: str) -> float:
            return statistics.median(samples[key]) if samples[key] else 0.0

        def p95(key: str) -> float:
            values = sorted(samples[key])
            return values[int(len(values) * 0.95)] if values else 0.0

        # A model round's own cost: its debit, and its reservation when on (one per round).
        paired = [d + (samples["reserve"][i] if samples["reserve"] else 0) for i, d in enumerate(samples["round"])]
        # The same, counting only the rounds whose debit ran first after the model's answer (the commit did the rest).
        first = [total for total, second in zip(paired, samples["round_second"], strict=True) if not second]
        paired_cpu = [
            d + (samples["reserve_cpu"][i] if samples["reserve_cpu"] else 0) for i, d in enumerate(samples["round_cpu"])
        ]
        return {
            "commit_cpu_ms": statistics.median(commit_cpu) / 1e6,
            "model_round_cpu_ms": statistics.median(paired_cpu) / 1e6,
            "commit_ms": statistics.median(commits) / 1e6,
            "commit_in_place_ms": statistics.median(samples["commit_first"]) / 1e6,
            "model_round_ms": statistics.median(paired) / 1e6,
            "model_round_first_ms": statistics.median(first) / 1e6,
            "cycle_ms": statistics.median(ours) / 1e6,
            "cycle_queries": statistics.median(queries),
            "round_ms": med("round") / 1e6,
            "round_p95_ms": p95("round") / 1e6,
            "round_q": med("round_q"),
            "tool_ms": med("tool") / 1e6,
            "tool_p95_ms": p95("tool") / 1e6,
            "tool_q": med("tool_q"),
        }

    with ChatCompletionsServer(answer) as server, build_catalogue(mcp_config_path=str(config)) as catalogue:
        gateway = Timed(Gateway(server.base_url, "bench", max_retries=0), "complete")
        timed_tools = Timed(catalogue, "call")
        commit_ms = statistics.median(single_row_commit(300)) / 1e6
        short = measure("short", rounds, tools)
        short_on = measure("short-on", rounds, tools, reserve=True)
        long = measure("long", rounds, tools, history=args.history)
        long_on = measure("long-on", rounds, tools, history=args.history, reserve=True)

    print(f"database: {connection.vendor}  cycles: {args.cycles} of {rounds} rounds, {tools} tool calls per tool round")
    print(f"single-row commit: median {commit_ms:.3f} ms before the runs (each run's own is given with it)")
    runs = (
        ("journal of ~0 events, reservation off", short),
        ("journal of ~0 events, reservation on", short_on),
        (f"journal of {args.history:,} events, reservation off", long),
        (f"journal of {args.history:,} events, reservation on", long_on),
    )
    for label, m in runs:
        print(f"-- {label}")
        print(f"   single-row commit, in a loop between cycles:       median {m['commit_ms']:.3f} ms")
        print(f"   single-row commit, in a round's place (first):     median {m['commit_in_place_ms']:.3f} ms")
        print(
            f"   per model round (reserve + debit + saves):        median {m['model_round_ms']:.3f} ms  "
            f"= {m['model_round_ms'] / m['commit_ms']:.2f}x the commit in a loop"
        )
        print(
            f"   CPU: per model round {m['model_round_cpu_ms']:.3f} ms, per single-row commit {m['commit_cpu_ms']:.3f} ms"
            f" (medians) = {m['model_round_cpu_ms'] / m['commit_cpu_ms']:.2f}x"
        )
        print(
            f"   per model round, its debit first:                  median {m['model_round_first_ms']:.3f} ms  "
            f"= {m['model_round_first_ms'] / m['commit_in_place_ms']:.2f}x the commit in its place"
        )
        print(
            f"   per model round (debit + journal + durable save): median {m['round_ms']:.3f} ms  p95 {m['round_p95_ms']:.3f} ms  queries {m['round_q']:.0f}"
        )
        print(
            f"   per tool call (outcome, journal, durable save):    median {m['tool_ms']:.3f} ms  p95 {m['tool_p95_ms']:.3f} ms  queries {m['tool_q']:.0f}"
        )
        print(
            f"   per cycle, ours in all:                            median {m['cycle_ms']:.3f} ms  queries {m['cycle_queries']:.0f}"
        )


if __name__ == "__main__":
    main()
