"""What ``manage.py up`` runs its processes under: a worker or beat that dies is started again, the web is not.

``Supervisor`` starts every named command, and on each ``check()``:

- a process named in ``restart`` that exited is started again after a
  back-off (1 s, doubling to 30 s; back to 1 s once it has stayed up a
  minute), with a line on stderr naming it and its exit code — a worker's
  crash never takes the dashboard down;
- any other process that exits (the web server) ends the whole: ``check``
  answers its exit code and ``stop()`` ends the rest.

A process named in ``niceness`` starts at that much lower a scheduling
priority (the workers and beat under ``up``), so the web server keeps its
share of the CPU while grading drains a backlog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

FIRST_DELAY = 1.0
MAX_DELAY = 30.0
#: A process that stayed up this long is healthy again: its next restart waits FIRST_DELAY.
HEALTHY_AFTER = 60.0


@dataclass
class _Child:
    command: list[str]
    process: subprocess.Popen[Any] | None = None
    started: float = 0.0
    delay: float = FIRST_DELAY
    due: float | None = None  # when a dead process is started again
    restarts: int = 0


@dataclass
class Supervisor:
    commands: dict[str, list[str]]
    restart: frozenset[str]
    env: dict[str, str] | None = None
    log: TextIO | None = None
    clock: Callable[[], float] = time.monotonic
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    #: name → how much lower than ours its scheduling priority is (``os.nice`` in the child before it starts).
    niceness: dict[str, int] = field(default_factory=dict)
    children: dict[str, _Child] = field(default_factory=dict)

    def start(self) -> None:
        for name, command in self.commands.items():
            self.children[name] = _Child(command, delay=self.first_delay)
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        child = self.children[name]
        nice = self.niceness.get(name, 0)
        preexec = (lambda: os.nice(nice)) if nice else None  # noqa: E731 - runs in the child, before exec
        # A process group of its own, so stopping it stops what it started too (runserver's reloader child).
        child.process = subprocess.Popen(child.command, env=self.env, preexec_fn=preexec, process_group=0)
        child.started = self.clock()
        child.due = None

    def _say(self, text: str) -> None:
        if self.log is not None:
            self.log.write(text + "\n")
            self.log.flush()

    def check(self) -> int | None:
        """Restart what may be restarted; return the exit code of a process that ends the whole, else None."""
        now = self.clock()
        for name, child in self.children.items():
            if child.due is not None:
                if now >= child.due:
                    child.restarts += 1
                    self._say(f"{name}: starting again (restart {child.restarts})")
                    self._spawn(name)
                continue
            assert child.process is not None
            code = child.process.poll()
            if code is None:
                if now - child.started >= HEALTHY_AFTER:
                    child.delay = self.first_delay
                continue
            if name not in self.restart:
                self._say(f"{name} exited with code {code}; stopping the others")
                return code or 1
            self._say(f"{name} exited with code {code}; starting it again in {child.delay:g} s")
            child.due = now + child.delay
            child.delay = min(child.delay * 2, self.max_delay)
        return None

    def stop(self, grace: float = 15.0) -> None:
        """Ask every running process to end (SIGTERM), and kill what is still running after ``grace`` seconds."""
        running = [c.process for c in self.children.values() if c.process is not None and c.process.poll() is None]
        for process in running:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()


def _signal_group(process: subprocess.Popen[Any], sig: int) -> None:
    """Send ``sig`` to the process's group (it leads one: ``process_group=0``); to the process alone if that is gone."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        process.send_signal(sig)
