"""``python manage.py brain sync``: fetch the brain, load its head and write the entity rows, one line per entity.

Exit 0 when the brain loaded (a broken entity is reported on its own line and
does not fail the sync), 2 when the brain itself did not load (MANIFEST.yaml,
duplicate ids).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from grading.sync import SyncReport, sync_brain
from singularity.errors import SingularityError


class Command(BaseCommand):
    help = "Brain operations. sync: fetch the brain, load its head and write one row per entity."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["sync"], help="sync: fetch, load and write the entity rows")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sync_brain()
        except SingularityError as exc:
            raise CommandError(str(exc), returncode=exc.exit_code) from exc
        self.print_report(report)
        if report.errors:
            raise CommandError(f"the brain did not load: {len(report.errors)} brain-wide error(s)", returncode=2)

    def print_report(self, report: SyncReport) -> None:
        self.stdout.write(f"brain at {report.commit[:12]}")
        for line in report.entities:
            where = f"{line.label} ({line.path})"
            if line.ok:
                note = " (new)" if line.created else " (changed)" if line.changed else ""
                self.stdout.write(f"ok     {where}{note}")
            else:
                self.stdout.write(f"error  {where}")
                for message in line.error.splitlines():
                    self.stdout.write(f"         {message}")
        for label in report.removed:
            self.stdout.write(f"gone   {label} (its file is no longer in the brain)")
        for message in report.method_errors:
            self.stdout.write(f"method {message}")
        for message in report.errors:
            self.stdout.write(f"brain  {message}")
