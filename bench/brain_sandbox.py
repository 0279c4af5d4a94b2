#!/usr/bin/env python
"""What a call of brain code costs in the sandbox (issue 27), against the same call in the engine's process.

Measures, for the demo triage's ``measure(run)`` (``demo_brain/features/support/triage/triage.loop.py``):

- starting a sandbox process (spawn to its first answer);
- the first import of the module in a process;
- one call (``load_at(...).module.measure(run)``), in the sandbox and, for the floor, in this process;
- a batch of calls (``deadline.call_each``: the way grading asks a batch of runs), per call;
- a call whose brain code reads an engine object it was handed (``ctx.gradedRuns()``: one round trip back).

    .venv/bin/python bench/brain_sandbox.py [--calls 2000] [--batch 100]

Prints medians (and the 95th percentile) in microseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")

import django  # noqa: E402

django.setup()

from singularity.brain import deadline, sandbox  # noqa: E402
from singularity.brain.modules import module_from_source, sha256  # noqa: E402

TRIAGE = ROOT / "demo_brain/features/support/triage/triage.loop.py"
WINDOW = b"def window(ctx):\n    return {'ready': True, 'runs': ctx.gradedRuns(limit=5)}\n"


def run_info(n: int) -> SimpleNamespace:
    return SimpleNamespace(
        runKind="workflow",
        runId=f"run-{n}",
        targetId="triage",
        completedAt=None,
        replay=False,
        input={"ticket": "My invoice is wrong", "_expected": "billing"},
        output={"result": "billing" if n % 3 else "technical"},
    )


def timed(fn, times: int) -> list[float]:
    out = []
    for n in range(times):
        started = time.perf_counter()
        fn(n)
        out.append((time.perf_counter() - started) * 1e6)
    return out


def line(label: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p95 = samples[int(len(samples) * 0.95) - 1] if len(samples) > 1 else samples[0]
    print(f"{label:<52} median {statistics.median(samples):>9.1f} µs   p95 {p95:>9.1f} µs   (n={len(samples)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    source = TRIAGE.read_bytes()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")

    line("spawn a sandbox process (to its first answer)", timed(lambda _n: sandbox.Child().kill(), 10))

    def first_import(n: int) -> None:
        sandbox.forget()
        sandbox.shutdown()
        sandbox.pool()  # a fresh pool: the next load spawns and imports
        sandbox.load(TRIAGE.name, sha256(source) + str(n), source)

    line("first import in a new process (spawn included)", timed(first_import, 10))

    module = sandbox.load(TRIAGE.name, sha256(source), source)
    local, _ = module_from_source(TRIAGE.name, source)
    line("measure(run) in this process (the floor)", timed(lambda n: local.measure(run_info(n)), args.calls))
    line("measure(run) in the sandbox, one call", timed(lambda n: module.measure(run_info(n)), args.calls))

    batches = max(1, args.calls // args.batch)
    per_call = []
    for b in range(batches):
        todo = [(run_info(b * args.batch + i),) for i in range(args.batch)]
        started = time.perf_counter()
        answers = deadline.call_each(module.measure, todo, path=TRIAGE.name, name="measure")
        per_call.append((time.perf_counter() - started) * 1e6 / len(todo))
        assert all(error is None for _, error in answers)
    line(f"measure(run) in the sandbox, batches of {args.batch}, per call", per_call)
    print(f"  → {1e6 / statistics.median(per_call):,.0f} calls/s in batches")

    window = sandbox.load("w.loop.py", sha256(WINDOW), WINDOW)
    ctx = SimpleNamespace(gradedRuns=lambda limit=None: {"comparable": [], "ungraded": 0})
    line("window(ctx) reading ctx.gradedRuns() (one round trip)", timed(lambda _n: window.window(ctx), args.calls))
    sandbox.shutdown()


if __name__ == "__main__":
    main()
