"""``manage.py loop analyze <kind>:<id>`` — the loop from a shell (Analyze now, the loop's clock, a backtest, an A/A,
and ``loop verify``: the hash chains of its action and supervision logs)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from grading.models import Entity


def find_entity(name: str) -> Entity:
    """The entity named ``<kind>:<id>`` or just ``<id>``; CommandError naming what matched."""
    kind, _, slug = name.rpartition(":")
    entities = Entity.objects.filter(slug=slug, present=True)
    if kind:
        entities = entities.filter(target_kind=kind)
    found = list(entities)
    if not found:
        raise CommandError(f"{name}: no such entity (name it <kind>:<id>, e.g. scenario:triage)")
    if len(found) > 1:
        kinds = ", ".join(f"{e.target_kind}:{e.slug}" for e in found)
        raise CommandError(f"{name} names {len(found)} entities ({kinds}): add the kind")
    return found[0]


class Command(BaseCommand):
    help = "Run the self-evolving loop from a shell: analyze an entity now, or run the loop's clock once."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        analyze = sub.add_parser("analyze", help="Open a cycle on request (Analyze now).")
        analyze.add_argument("entity", help="<kind>:<id>, e.g. scenario:triage")
        sub.add_parser("tick", help="Poll pull requests, close overdue watches, recover lost rounds, once.")
        backtest = sub.add_parser("backtest", help="Replay the entity's graded history through its policy.")
        backtest.add_argument("entity", help="<kind>:<id>, e.g. scenario:triage")
        backtest.add_argument("--since", default="30d", help="30d, 12h, 2w, or a date (default 30d).")
        backtest.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="A proposed settings change (repeatable): loop.trigger.minFailures=3; KEY= removes the key.",
        )
        backtest.add_argument("--json", action="store_true", help="Print the reports as JSON.")
        sub.add_parser("verify", help="Check the hash chains of the loop's action log and supervision log.")
        calibration = sub.add_parser(
            "aa", help="A/A: the check with the incumbent as its own candidate, and the watch on one commit."
        )
        calibration.add_argument("entity", help="<kind>:<id>, e.g. scenario:triage")
        calibration.add_argument("--trials", type=int, default=20, help="Freshly frozen sets to check (default 20).")
        calibration.add_argument("--json", action="store_true", help="Print the report as JSON.")
        check_pr = sub.add_parser(
            "check-pr", help="Run the pre-merge check on an open pull request against the brain (exit 1: regressed)."
        )
        check_pr.add_argument("number", type=int, help="The pull request's number.")
        check_pr.add_argument("--by", default="manage.py loop check-pr", help="Who asks (named on the PR's comment).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "check-pr":
            self.check_pr(options["number"], options["by"])
            return
        if options["action"] == "backtest":
            self.backtest(options)
            return
        if options["action"] == "verify":
            self.verify()
            return
        if options["action"] == "aa":
            self.aa(options)
            return
        if options["action"] == "analyze":
            from evolution.loop.trigger import analyze_now

            entity = find_entity(options["entity"])
            result = analyze_now(entity)
            if not result.opened:
                raise CommandError(f"{entity}: no cycle opened: {result.reason}")
            self.stdout.write(f"cycle {result.cycle.pk} opened for {entity}")
        else:
            from evolution.tasks import tick

            self.stdout.write(str(tick()))

    def verify(self) -> None:
        """One line per chained log; exit 1 naming the first entry whose chain breaks, 0 when every log is whole."""
        from evolution.core import chain

        broken = []
        for log in chain.LOGS:
            verdict, total = chain.verify(log)
            if verdict.whole:
                self.stdout.write(verdict.words())
            else:
                broken.append(verdict.words(total))
        if broken:
            raise CommandError("; ".join(broken))

    def check_pr(self, number: int, by: str) -> None:
        """Check PR ``number`` and print each entity's answer; CommandError (exit 1) when it regressed."""
        from evolution.prcheck import PullCheckError, check_pr

        try:
            checked = check_pr(number, by=by)
        except PullCheckError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"PR #{number} at {checked.head_sha[:12]}: {checked.verdict} — {checked.reason}")
        for entity in checked.entities:
            self.stdout.write(f"  {entity['entity']}: {entity['verdict']} — {entity['reason']}")
        if checked.verdict == "regressed":
            raise CommandError(f"PR #{number} regressed")

    def backtest(self, options: dict[str, Any]) -> None:
        """Backtest today's policy (and the one the --set changes make) and print both reports."""
        import json

        from django.utils import timezone

        from evolution.loop import backtest
        from evolution.steering.settings import SettingsRefusal
        from evolution.steering.settings.base import REMOVE, SET
        from evolution.steering.settings.preview import Change
        from evolution.views.settings import parse_value

        entity = find_entity(options["entity"])
        now = timezone.now()
        try:
            since = backtest.parse_since(options["since"], now=now)
            changes = []
            for raw in options["set"]:
                key, equals, text = raw.partition("=")
                if not equals or not key.strip():
                    raise SettingsRefusal("invalid", f"--set {raw!r}: write KEY=VALUE, e.g. loop.trigger.minFailures=3")
                key = key.strip()
                op = REMOVE if text.strip() == "" else SET
                changes.append(Change(key, op, parse_value(key, text) if op == SET else None))
            current, proposed = backtest.run(entity, since=since, changes=changes, actor="manage.py loop", now=now)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except SettingsRefusal as refusal:
            raise CommandError(f"{refusal.code}: {refusal.detail}") from None
        if options["json"]:
            body = {"current": current.result, "proposed": proposed.result if proposed else None}
            self.stdout.write(json.dumps(body, indent=2))
            return
        for report in (current, proposed):
            if report is not None:
                self.stdout.write("\n".join(backtest.lines(report.result)))
        if proposed is not None:
            self.stdout.write(backtest.compare_words(current.result, proposed.result))

    def aa(self, options: dict[str, Any]) -> None:
        """Record an A/A report and run it here (this shell is its worker); print it."""
        import json

        from evolution.loop import aa
        from evolution.models import AaReport

        entity = find_entity(options["entity"])
        try:
            report = aa.request(entity, trials=options["trials"], actor="manage.py loop", send=False)
        except aa.AaRefused as exc:
            raise CommandError(str(exc)) from None
        report = aa.run(report.pk) or AaReport.objects.get(pk=report.pk)
        if report.status != AaReport.Status.DONE:
            raise CommandError(f"A/A report {report.pk} {report.status}: {report.error}")
        if options["json"]:
            self.stdout.write(json.dumps(report.result, indent=2))
            return
        self.stdout.write("\n".join(aa.lines(report.result)))
