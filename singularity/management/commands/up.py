"""Bring up the web server, a Celery worker per queue and Celery beat together; a worker or beat that dies is started again; Ctrl-C stops all of them.

The web server is gunicorn (WEB_CONCURRENCY processes of WEB_THREADS threads,
static files through whitenoise); ``--dev`` serves with Django's
``runserver`` and its reloader instead. Each queue of ``singularity.queues``
gets a worker of its own (``WORKER_CONCURRENCY`` threads, or
``WORKER_CONCURRENCY_<QUEUE>``), started with ``WORKER_NICE`` (default 10)
lower scheduling priority than the web. "Singularity is up" is printed once
the port answers.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from singularity import boot, startup
from singularity.being.demo import ensure_demo_being
from singularity.demo_servers import wire_demo_mcp
from singularity.env import env_float, env_int
from singularity.errors import ConfigError, UpstreamError
from singularity.queues import QUEUES
from singularity.supervise import Supervisor

# Realistic prices for the demo model, so the demo being visibly spends (only when the gateway is the demo).
DEMO_PRICES = {"BRAMA_INPUT_PRICE_USD_PER_MILLION": "2.50", "BRAMA_OUTPUT_PRICE_USD_PER_MILLION": "10.00"}


def public_url(host: str, port: int) -> str:
    """The address ``up`` prints, as a link from elsewhere reaches it (a server bound to every interface: loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}"


def port_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return whether something accepts a TCP connection on ``host``:``port``."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    try:
        with socket.create_connection((target, port), timeout=timeout):
            return True
    except OSError:
        return False


def web_command(python: str, host: str, port: int, *, dev: bool) -> list[str]:
    """The web server's command: gunicorn, or ``runserver`` with its reloader under ``--dev``."""
    if dev:
        return [python, "manage.py", "runserver", f"{host}:{port}"]
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return [
        python,
        "-m",
        "gunicorn",
        "singularity.wsgi:application",
        "--config",
        "python:singularity.gunicorn_conf",
        "--bind",
        bind,
    ]


def worker_command(python: str, queue: str, concurrency: int) -> list[str]:
    """One Celery worker consuming ``queue`` alone, named ``<queue>@<host>``."""
    quiet = ["--quiet"] if os.environ.get("LOG_FORMAT") == "json" else []  # no banner: every line is JSON
    return [
        python,
        "-m",
        "celery",
        "-A",
        "singularity",
        *quiet,
        "worker",
        "-l",
        "info",
        "-Q",
        queue,
        "-n",
        f"{queue}@%h",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
    ]


def worker_concurrency(queue: str) -> int:
    """WORKER_CONCURRENCY_<QUEUE>, else WORKER_CONCURRENCY, else 2 threads."""
    default = env_int("WORKER_CONCURRENCY", 2, minimum=1, maximum=256)
    return env_int(f"WORKER_CONCURRENCY_{queue.upper()}", default, minimum=1, maximum=256)


def commands_for(python: str, host: str, port: int, *, dev: bool) -> dict[str, list[str]]:
    """Every process ``up`` runs, by name: the web, a worker per queue, beat."""
    commands = {"web": web_command(python, host, port, dev=dev)}
    for queue in QUEUES:
        commands[f"worker-{queue}"] = worker_command(python, queue, worker_concurrency(queue))
    quiet = ["--quiet"] if os.environ.get("LOG_FORMAT") == "json" else []
    commands["beat"] = [python, "-m", "celery", "-A", "singularity", *quiet, "beat", "-l", "info"]
    return commands


class Command(BaseCommand):
    help = "Run the web server, a worker per queue and beat in one terminal."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--no-demo", action="store_true", help="Do not create and start the demo being.")
        parser.add_argument("--dev", action="store_true", help="Serve with runserver and its reloader (not gunicorn).")
        parser.add_argument(
            "--web-only", action="store_true", help="Start the web server alone (workers and beat run elsewhere)."
        )

    def _sync_brain(self) -> None:
        """Run the steps the apps registered for before anything starts; CommandError naming a step that fails.

        grading registers the brain sync (singularity.startup), so the dashboard and the demo driver find
        its entities.
        """
        for name, step in startup.steps():
            try:
                report = step()
            except (ConfigError, UpstreamError) as exc:
                raise CommandError(f"{name} failed: {exc}") from exc
            self.stdout.write(self.style.SUCCESS(report.message) if report.ok else report.message)
            for problem in report.problems:
                self.stderr.write(f"  {problem}")

    def _boot_checks(self) -> None:
        """Stop with one line naming the variable (exit 2) when the database or the broker cannot be reached."""
        for line in (boot.check_database(), boot.check_broker()):
            if line is not None:
                self.stderr.write(line)
                sys.exit(boot.EXIT_CODE)

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        self._boot_checks()
        if port_answers(host, port):
            self.stderr.write(f"PORT: something already answers on {host}:{port}; stop it or choose another --port")
            sys.exit(boot.EXIT_CODE)
        env = dict(os.environ)
        # Links sent elsewhere (Telegram, PR bodies) point at the address printed below unless one is configured.
        env.setdefault("SINGULARITY_PUBLIC_URL", public_url(host, port))
        # Request metrics from every gunicorn worker, summed at scrape time (docs/decisions.md, issue 37).
        if not env.get("PROMETHEUS_MULTIPROC_DIR"):
            env["PROMETHEUS_MULTIPROC_DIR"] = str(settings.VAR_DIR / "metrics")
        metrics_dir = Path(env["PROMETHEUS_MULTIPROC_DIR"])
        metrics_dir.mkdir(parents=True, exist_ok=True)
        for stale in metrics_dir.glob("*.db"):  # the last run's processes: gone
            stale.unlink()
        demo = not settings.BRAMA_BASE_URL
        if demo:
            for key, value in DEMO_PRICES.items():
                env.setdefault(key, value)
            # The demo being earns from the shipped demo shop (a real MCP server over stdio).
            wire_demo_mcp(env, settings.VAR_DIR)
        commands = commands_for(sys.executable, host, port, dev=options["dev"])
        if options["web_only"]:
            commands = {"web": commands["web"]}
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        self._sync_brain()
        if demo and not options["no_demo"]:
            ensure_demo_being()
        nice = env_int("WORKER_NICE", 10, minimum=0, maximum=19)
        background = {name: nice for name in commands if name != "web"}
        # A worker or beat that dies is started again; the web server ending ends the whole (Ctrl-C too).
        restart = frozenset(name for name in commands if name != "web")
        supervisor = Supervisor(commands, restart=restart, env=env, log=sys.stderr, niceness=background)
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        supervisor.start()
        code = self._announce_when_answering(supervisor, host, port, lambda: stopping)
        while code is None and not stopping:
            code = supervisor.check()
            time.sleep(0.5)
        supervisor.stop()
        sys.exit(code or 0)

    def _announce_when_answering(self, supervisor: Supervisor, host: str, port: int, stopping: Any) -> int | None:
        """Print "Singularity is up" once the port answers; the web's exit code if it ends first."""
        deadline = time.monotonic() + env_float("UP_WAIT_SECS", 120.0, minimum=1.0)
        while not stopping():
            ended = supervisor.check()
            if ended is not None:
                return ended
            if port_answers(host, port):
                url = public_url(host, port)
                self.stdout.write(self.style.SUCCESS(f"Singularity is up: {url}/  (Ctrl-C stops)"))
                self.stdout.flush()
                return None
            if time.monotonic() > deadline:
                self.stderr.write(f"PORT: nothing answered on {host}:{port} within UP_WAIT_SECS; stopping")
                return boot.EXIT_CODE
            time.sleep(0.2)
        return None
