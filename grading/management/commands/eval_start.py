"""``python manage.py eval_start <run-id>``: grade one run now (pulls a delayed grading forward)."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from grading.booking import eval_start
from grading.models import Execution
from singularity.errors import SingularityError


class Command(BaseCommand):
    help = "Grade one run now: books it when unbooked, pulls a grading waiting out gradeAfterHours forward."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="The execution's id.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_id = uuid.UUID(options["run_id"])
        except ValueError:
            raise CommandError(f"run {options['run_id']!r}: not a run id") from None
        execution = Execution.objects.select_related("entity").filter(pk=run_id).first()
        if execution is None:
            raise CommandError(f"run {run_id}: not found")
        try:
            grade = eval_start(execution)
        except SingularityError as exc:
            raise CommandError(str(exc)) from exc
        if grade.status == grade.Status.GRADED:
            score = "none (method: none)" if grade.score is None else f"{grade.score:.3f}"
            self.stdout.write(f"run {run_id}: graded, passed={grade.passed}, score={score}")
        elif grade.status == grade.Status.FAILED:
            raise CommandError(f"run {run_id}: grading failed: {grade.error}")
        else:
            self.stdout.write(f"run {run_id}: {grade.status} by another worker")
