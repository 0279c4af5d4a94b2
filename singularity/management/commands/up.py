"""Bring up the web server, a Celery worker and Celery beat together; a worker or beat that dies is started again; Ctrl-C stops all of them."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from singularity import startup
from singularity.being.demo import ensure_demo_being
from singularity.demo_servers import wire_demo_mcp
from singularity.errors import ConfigError, UpstreamError
from singularity.supervise import Supervisor

# Realistic prices for the demo model, so the demo being visibly spends (only when the gateway is the demo).
DEMO_PRICES = {"BRAMA_INPUT_PRICE_USD_PER_MILLION": "2.50", "BRAMA_OUTPUT_PRICE_USD_PER_MILLION": "10.00"}


def public_url(host: str, port: int) -> str:
    """The address ``up`` prints, as a link from elsewhere reaches it (a server bound to every interface: loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}"


class Command(BaseCommand):
    help = "Run web, worker and beat in one terminal (the embedded default)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--no-demo", action="store_true", help="Do not create and start the demo being.")

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

    def handle(self, *args: Any, **options: Any) -> None:
        env = dict(os.environ)
        # Links sent elsewhere (Telegram, PR bodies) point at the address printed below unless one is configured.
        env.setdefault("SINGULARITY_PUBLIC_URL", public_url(options["host"], options["port"]))
        demo = not settings.BRAMA_BASE_URL
        if demo:
            for key, value in DEMO_PRICES.items():
                env.setdefault(key, value)
            # The demo being earns from the shipped demo shop (a real MCP server over stdio).
            wire_demo_mcp(env, settings.VAR_DIR)
        python = sys.executable
        commands = {
            "web": [python, "manage.py", "runserver", f"{options['host']}:{options['port']}", "--noreload"],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "singularity",
                "worker",
                "-l",
                "info",
                "--pool",
                "threads",
                "--concurrency",
                "4",
            ],
            "beat": [python, "-m", "celery", "-A", "singularity", "beat", "-l", "info"],
        }
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        self._sync_brain()
        if demo and not options["no_demo"]:
            ensure_demo_being()
        # A worker or beat that dies is started again; the web server ending ends the whole (Ctrl-C too).
        supervisor = Supervisor(commands, restart=frozenset({"worker", "beat"}), env=env, log=sys.stderr)
        supervisor.start()
        self.stdout.write(
            self.style.SUCCESS(f"Singularity is up: http://{options['host']}:{options['port']}/  (Ctrl-C stops)")
        )
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        code = 0
        while not stopping:
            ended = supervisor.check()
            if ended is not None:
                code, stopping = ended, True
                break
            time.sleep(0.5)
        supervisor.stop()
        sys.exit(code)
