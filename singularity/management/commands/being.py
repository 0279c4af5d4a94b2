"""``python manage.py being run|once|tools|doctor|export`` — the origin CLI's semantics.

Exit codes: 0 success, 2 configuration or bad input, 3 upstream (gateway or
MCP), 4 state, 5 tool or runtime. Our own errors print ``error: <message>``;
anything unexpected exits 5 with ``singularity: <error>`` (no traceback; it
is logged at debug level).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from singularity.being.actions import create_being, validate_stimulus
from singularity.being.export import export_being
from singularity.being.host import Host
from singularity.errors import ConfigError, SingularityError, StateError
from singularity.models import Being

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run, inspect and export beings."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        for name, text in (
            ("run", "Live cycle after cycle until stopped or exhausted."),
            ("once", "Run one cycle and print its report as JSON."),
        ):
            p = sub.add_parser(name, help=text)
            p.add_argument("--name", required=True, help="The being's name (created on first use).")
            p.add_argument("--resume", action="store_true", help="Continue an existing being.")
            p.add_argument("--stimulus", default="", help="One external observation for cycle 1 (max 64 KiB).")
            p.add_argument("--model", default="", help="Think with this model from now on (one the gateway serves).")
        tools = sub.add_parser("tools", help="List the tool catalogue: built-in self tools and MCP tools.")
        tools.add_argument("--json", action="store_true")
        sub.add_parser("doctor", help="Check configuration, database, workspace, MCP servers and gateway.")
        export = sub.add_parser("export", help="Write state.json and activity.jsonl for a being.")
        export.add_argument("--name", required=True)
        export.add_argument("--dir", required=True)
        verify = sub.add_parser("verify", help="Check a journal's hash chain: a stored being's, or an exported file's.")
        source = verify.add_mutually_exclusive_group(required=True)
        source.add_argument("--name", help="A stored being.")
        source.add_argument("--file", help="An exported activity.jsonl.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            code = getattr(self, f"_{action}")(options)
        except Exception as exc:  # noqa: BLE001 - every error ends as its exit code and one line on stderr
            code = self._report_error(exc)
        sys.exit(code)

    def _report_error(self, exc: Exception) -> int:
        """Print ``exc`` as one line on stderr and return its exit code."""
        if isinstance(exc, SingularityError):
            self.stderr.write(f"error: {exc}")
            return exc.exit_code
        log.debug("unexpected error", exc_info=exc)
        # One line, even for a driver's multi-line message (Postgres adds DETAIL: lines).
        self.stderr.write(f"singularity: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return 5

    # -- run / once ----------------------------------------------------------
    def _load_being(self, options: dict[str, Any]) -> Being:
        name, resume, stimulus = options["name"], options["resume"], options["stimulus"]
        validate_stimulus(stimulus)
        being = Being.objects.filter(name=name).first()
        if being is None:
            if resume:
                raise StateError(f"--resume: there is no being named {name!r} to resume")
            return create_being(name, stimulus=stimulus)
        if not resume:
            raise ConfigError(f"--name: a being named {name!r} already exists; pass --resume to continue it")
        if stimulus and being.cycle >= 1:
            self.stderr.write(f"note: --stimulus ignored: {name} is past cycle 1")
        return being

    def _host(self, options: dict[str, Any], *, once: bool) -> tuple[int, Any]:
        from singularity.gateway import get_gateway
        from singularity.tools import build_catalogue

        gateway = get_gateway()
        model = self._chosen_model(options["model"], gateway)
        being = self._load_being(options)
        catalogue = build_catalogue()
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            host = Host(
                being,
                gateway=gateway,
                model=model,
                catalogue=catalogue,
                stop=stop,
                interval=settings.SINGULARITY_CYCLE_INTERVAL_SECS,
                close_catalogue=catalogue.close,
            )
            outcome = host.run(once=once)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if outcome.error is not None:
            return self._report_error(outcome.error), outcome.report
        return 0, outcome.report

    @staticmethod
    def _chosen_model(model: str, gateway: Any) -> str:
        """``--model`` checked: not empty, not too long, and served by the gateway when it says what it serves."""
        from singularity.being.model_choice import unserved
        from singularity.tools.builtin import MAX_MODEL_CHARS

        if not model:
            return ""
        model = model.strip()
        if not model or len(model) > MAX_MODEL_CHARS or "\x00" in model:
            raise ConfigError(f"--model: a model name is 1 to {MAX_MODEL_CHARS} characters without NUL")
        refusal = unserved(gateway, model)
        if refusal:
            raise ConfigError(f"--model: {refusal}")
        return model

    def _run(self, options: dict[str, Any]) -> int:
        code, _ = self._host(options, once=False)
        return code

    def _once(self, options: dict[str, Any]) -> int:
        code, report = self._host(options, once=True)
        if report is not None:
            self.stdout.write(json.dumps(report.as_json(), indent=2, ensure_ascii=False))
        return code

    # -- tools / doctor / export ---------------------------------------------
    def _tools(self, options: dict[str, Any]) -> int:
        from singularity.tools import build_catalogue

        with build_catalogue() as catalogue:
            specs = catalogue.specs()
        if options["json"]:
            rows = [
                {"name": s.name, "source": s.source, "description": s.description, "parameters": s.parameters}
                for s in specs
            ]
            self.stdout.write(json.dumps(rows, indent=2))
        else:
            width = max((len(s.name) for s in specs), default=10)
            for spec in specs:
                self.stdout.write(
                    f"{spec.name:<{width}}  {spec.source:<16}  {spec.description.splitlines()[0] if spec.description else ''}"
                )
        return 0

    def _doctor(self, options: dict[str, Any]) -> int:
        from singularity.being.doctor import run_checks

        worst = 0
        for check in run_checks():
            self.stdout.write(f"[{check.level}] {check.name}: {check.message}")
            if check.level == "fail":
                worst = max(worst, check.exit_code)
        return worst

    def _export(self, options: dict[str, Any]) -> int:
        being = Being.objects.filter(name=options["name"]).first()
        if being is None:
            raise StateError(f"--name: there is no being named {options['name']!r}")
        state, activity = export_being(being, Path(options["dir"]))
        self.stdout.write(f"wrote {state} and {activity}")
        return 0

    def _verify(self, options: dict[str, Any]) -> int:
        """Exit 0 when the chain is whole; otherwise name the first event that breaks it and exit 4."""
        from singularity.being.chain import verify_export
        from singularity.being.export import describe, verify_being

        if options["file"]:
            path = Path(options["file"])
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise ConfigError(f"--file: cannot read {path}: {exc.strerror}") from exc
            verdict, what = verify_export(data, **_exported_head(path.parent / "state.json")), str(path)
        else:
            being = Being.objects.filter(name=options["name"]).first()
            if being is None:
                raise StateError(f"--name: there is no being named {options['name']!r}")
            verdict, what = verify_being(being), f"being {being.name}"
        line = describe(verdict, what)
        if verdict.whole:
            self.stdout.write(line)
            return 0
        raise StateError(line)


def _exported_head(state_path: Path) -> dict[str, Any]:
    """The journal's head and length from the export's ``state.json`` beside it; nothing when there is none."""
    try:
        journal = json.loads(state_path.read_text(encoding="utf-8")).get("journal")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{state_path}: cannot read the journal's head: {exc}") from exc
    if not isinstance(journal, dict):
        return {}
    return {"head": journal.get("head"), "events": journal.get("events")}
