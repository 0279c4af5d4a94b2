"""Start the real ``manage.py up`` in a subprocess on a free port, in a var folder of its own (embedded defaults)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from singularity.settings import BASE_DIR


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(var: Path, **extra: str) -> dict[str, str]:
    """The embedded defaults in ``var``: no DATABASE_URL or broker from the caller's environment, and none of what
    the suite sets for itself in this process (the browser tests' DJANGO_ALLOW_ASYNC_UNSAFE, which ``check --deploy``
    rightly refuses)."""
    leave = ("DATABASE_URL", "CELERY_BROKER_URL", "TEST_DATABASE_NAME", "DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {k: v for k, v in os.environ.items() if k not in leave}
    env.update(SINGULARITY_VAR_DIR=str(var), SINGULARITY_DEMO_DRIVER="false", WEB_CONCURRENCY="2")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=timeout
    )


class Up:
    """A running ``manage.py up``: its port, what it has printed so far, and when it said it was up."""

    def __init__(self, process: subprocess.Popen[str], port: int, errors: Path) -> None:
        self.process = process
        self.port = port
        self.errors = errors  # what the processes logged (stderr)
        self.out: list[str] = []
        self.up_at: float | None = None
        self.answered_when_announced: bool | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if "Singularity is up" in line and self.up_at is None:
                # Checked the moment the line is read: the port must already answer.
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        self.answered_when_announced = True
                except OSError:
                    self.answered_when_announced = False
                self.up_at = time.monotonic()
            self.out.append(line)

    def wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.up_at is None:
            if self.process.poll() is not None:
                raise AssertionError(f"up exited {self.process.returncode}: {self.errors.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"up never said it was up: {self.errors.read_text()[-3000:]}")
            time.sleep(0.2)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def running_up(env: dict[str, str], *args: str) -> Iterator[Up]:
    port = free_port()
    errors = Path(env["SINGULARITY_VAR_DIR"]).parent / "up-stderr.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(port), "--no-demo", *args],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=errors.open("w"),
        text=True,
        start_new_session=True,
    )
    up = Up(process, port, errors)
    try:
        yield up
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
