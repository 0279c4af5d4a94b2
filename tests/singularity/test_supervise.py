"""``manage.py up``'s supervisor: a worker that dies is started again; the web server ending ends the whole."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from singularity.supervise import Supervisor

#: Dies with code 1 on its first two starts (counted in a file), then stays up.
FLAKY = (
    "import pathlib, sys, time\n"
    "p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0) if p.exists() else 0; p.write_text(str(n + 1))\n"
    "sys.exit(1) if n < 2 else time.sleep(60)\n"
)


def run_until(supervisor: Supervisor, condition, seconds: float = 20) -> int | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ended = supervisor.check()
        if ended is not None or condition():
            return ended
        time.sleep(0.05)
    raise AssertionError("the condition never held")


def test_a_worker_that_dies_is_started_again_and_the_web_server_keeps_running(tmp_path: Path):
    starts = tmp_path / "starts"
    log = io.StringIO()
    supervisor = Supervisor(
        {
            "web": [sys.executable, "-c", "import time; time.sleep(60)"],
            "worker": [sys.executable, "-c", FLAKY, str(starts)],
        },
        restart=frozenset({"worker", "beat"}),
        log=log,
        first_delay=0.1,
    )
    supervisor.start()
    try:
        web = supervisor.children["web"].process
        ended = run_until(
            supervisor,
            lambda: (
                starts.exists() and starts.read_text() == "3" and supervisor.children["worker"].process.poll() is None
            ),
        )
        assert ended is None
        assert supervisor.children["web"].process is web and web.poll() is None  # the dashboard never went down
        assert supervisor.children["worker"].restarts == 2
        assert "worker exited with code 1; starting it again in 0.1 s" in log.getvalue()
        assert "worker exited with code 1; starting it again in 0.2 s" in log.getvalue()  # backing off
    finally:
        supervisor.stop(grace=5)
    assert all(child.process.poll() is not None for child in supervisor.children.values())


def test_the_web_server_ending_ends_the_whole_with_its_code(tmp_path: Path):
    log = io.StringIO()
    supervisor = Supervisor(
        {
            "web": [sys.executable, "-c", "import sys; sys.exit(3)"],
            "worker": [sys.executable, "-c", "import time; time.sleep(60)"],
        },
        restart=frozenset({"worker", "beat"}),
        log=log,
    )
    supervisor.start()
    try:
        assert run_until(supervisor, lambda: False) == 3
        assert "web exited with code 3; stopping the others" in log.getvalue()
    finally:
        supervisor.stop(grace=5)
    assert supervisor.children["worker"].process.poll() is not None
