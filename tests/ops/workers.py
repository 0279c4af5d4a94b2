"""Real ``celery worker`` processes against Redis and the test's Postgres database, grading through a loopback judge.

The workers are started as ``up`` and a worker host start them (``celery -A singularity worker -Q grading``), each
with a hostname of its own and task events on (``-E``, what Flower reads), in the environment of a brain holding
one judged scenario and a judge that takes ``delay_s`` a call (``singularity.demo_model``'s chat-completions server
on loopback, reached by the real gateway client).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection

from singularity import pulse
from singularity.demo_model import ChatCompletionsServer, Reply
from singularity.settings import BASE_DIR

JUDGED = """---
name: Judged
description: Graded by the LLM judge (a loopback judge in the tests).
evaluation:
  enabled: true
  requirements:
    - The answer names the ticket's category
---

Name the ticket's category.
"""
MANIFEST = "evaluation:\n  sample: {rate: 1}\n"
VERDICT = {
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


def judged_brain(folder: Path) -> Path:
    """A bare brain repository in ``folder`` holding the manifest and one judged scenario (``judged``)."""
    from singularity.brain.git import init_bare_from

    source = folder / "source"
    (source / "constitution").mkdir(parents=True)
    (source / "constitution/MANIFEST.yaml").write_text(MANIFEST)
    (source / "features/judged").mkdir(parents=True)
    (source / "features/judged/judged.scenario.md").write_text(JUDGED)
    init_bare_from(source, folder / "brain.git")
    return folder / "brain.git"


@contextmanager
def loopback_judge(delay_s: float) -> Iterator[ChatCompletionsServer]:
    """A chat-completions server answering every call with a passing verdict after ``delay_s``."""
    reply = Reply(
        content=json.dumps(VERDICT),
        usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
        delay_s=delay_s,
    )
    server = ChatCompletionsServer(handler=lambda request, headers: reply)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def database_url() -> str:
    """The URL of the database this test runs against (pytest-django's test database), for a subprocess."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def worker_env(var: Path, broker: str, brain: Path, judge_url: str, **extra: str) -> dict[str, str]:
    leave = ("TEST_DATABASE_NAME", "DJANGO_ALLOW_ASYNC_UNSAFE", "PROMETHEUS_MULTIPROC_DIR", "CELERY_TASK_ALWAYS_EAGER")
    env = {k: v for k, v in os.environ.items() if k not in leave}
    env.update(
        SINGULARITY_VAR_DIR=str(var),
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=broker,
        BRAIN_REPO=str(brain),
        BRAMA_BASE_URL=judge_url,
        BRAMA_MAX_RETRIES="0",
        BRAMA_MODEL="judge-model",
        SINGULARITY_DEMO_DRIVER="false",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def sync_brain(env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "brain", "sync"], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]


class Worker:
    """A running ``celery worker -Q grading -n <name>@<host> -E``."""

    def __init__(self, env: dict[str, str], name: str, concurrency: int) -> None:
        self.name = name
        Path(env["SINGULARITY_VAR_DIR"]).mkdir(parents=True, exist_ok=True)
        self.log = Path(env["SINGULARITY_VAR_DIR"]) / f"worker-{name}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "singularity", "--quiet", "worker", "-Q", "grading",
            "-n", f"{name}@%h", "-E", "--pool", "threads", "--concurrency", str(concurrency), "-l", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=BASE_DIR, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def hostname(self) -> str:
        """The full hostname the worker goes by (``<name>@<host>``) once its pulse is written, else ''."""
        for key in pulse.last("worker:grading:"):
            host = key.split(":", 2)[2]
            if host.startswith(self.name + "@"):
                return host
        return ""

    def kill(self) -> None:
        """Kill it at once (SIGKILL): what a crash or the machine's power going does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextmanager
def grading_workers(env: dict[str, str], names: list[str], concurrency: int = 2) -> Iterator[list[Worker]]:
    """Start a grading worker per name and wait (up to 180 s) until each has written its pulse; stop them after."""
    workers = [Worker(env, name, concurrency) for name in names]
    try:
        deadline = time.monotonic() + 180
        while not all(worker.hostname() for worker in workers):
            for worker in workers:
                assert worker.process.poll() is None, f"{worker.name} exited: {worker.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the workers did not come up within 180 s"
            time.sleep(0.3)
        yield workers
    finally:
        for worker in workers:
            worker.stop()


class TaskEvents:
    """Celery's task events from the broker, as Flower reads them: which worker ran each grading and what it said."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.args: dict[str, str] = {}  # task id → the grade id it was sent for
        self.succeeded: list[tuple[str, str, str]] = []  # (task id, hostname, result)
        self._receiver: Any = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def received(event: dict[str, Any]) -> None:
            self.args[event["uuid"]] = ast.literal_eval(event["args"])[0]

        def succeeded(event: dict[str, Any]) -> None:
            self.succeeded.append((event["uuid"], event["hostname"], event["result"]))

        with self.app.connection_for_read() as conn:
            self._receiver = self.app.events.Receiver(
                conn, handlers={"task-received": received, "task-succeeded": succeeded}
            )
            self._ready.set()
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> TaskEvents:
        self._thread.start()
        self._ready.wait(10)
        time.sleep(0.5)  # the receiver's queue bound to the events exchange before anything is sent
        return self

    def __exit__(self, *exc: object) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=5)

    def graded_by(self) -> dict[str, list[str]]:
        """Grade id → the hostnames of the workers that graded it (their task returned True)."""
        found: dict[str, list[str]] = {}
        for task_id, hostname, result in list(self.succeeded):
            if result == "True" and task_id in self.args:
                found.setdefault(str(self.args[task_id]), []).append(hostname)
        return found


def report_runs(entity: Any, n: int, batch: int = 100) -> None:
    """Report ``n`` finished runs of ``entity`` through the engine's own report path, ``batch`` at a time (each
    is then sampled and booked for grading like any reported run)."""
    from datetime import timedelta

    from django.utils import timezone

    from grading.executions import report_many

    end = timezone.now()
    for start in range(0, n, batch):
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
