"""``python manage.py doctor``: print "[pass|warn|fail] Section: message" lines; exit 1 on any fail."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from grading.doctor import FAIL, SECTIONS, run_doctor


class Command(BaseCommand):
    help = "Check the brain and its entities; exit 1 when any check fails."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--section", action="append", choices=list(SECTIONS), help="run only this section (repeatable)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        findings = run_doctor(only=options["section"])
        for finding in findings:
            self.stdout.write(finding.line())
        failed = sum(1 for f in findings if f.level == FAIL)
        if failed:
            raise CommandError(f"{failed} check(s) failed", returncode=1)
