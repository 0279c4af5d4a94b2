"""Finding runs: the runs list's filter, read from the URL, and the page of runs it selects.

Every filter is a GET parameter, so a search is a link: ``entity`` (``<target_kind>:<slug>``), ``grade``
(``bad``: graded and did not pass; ``failed``: the run or its grading failed; ``ungraded``: no grade yet, or
never sampled; ``passed``), ``category`` (a grade's failure category, exactly), ``commit`` (a prefix of the
brain commit the run ran at), ``since``/``until`` (days in the configured time zone, both included) and
``q`` (text in the run's error, input or output, or its grade's feedback). A bad value is a ``SearchError``
naming the parameter, never a 500. Loop replays are never listed (they are the check's, read on its story).

The page walks the newest started first (``execution_started``, or ``(entity, -started_at)`` for one entity)
and stops at ``PAGE`` rows: a filter that matches nothing reads further, bounded by the dates when given.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from grading.models import Entity, Execution, Grade

PAGE = 50
GRADES = {
    "bad": "bad (graded, did not pass)",
    "failed": "failed (the run or its grading)",
    "ungraded": "not graded",
    "passed": "passed",
}
_HEX = re.compile(r"[0-9a-f]{4,40}")


class SearchError(ValueError):
    """A filter value the runs list cannot read; the message names the parameter and what it accepts."""


@dataclass(frozen=True)
class RunFilter:
    entity: Entity | None = None
    grade: str = ""
    category: str = ""
    commit: str = ""
    since: date | None = None
    until: date | None = None
    q: str = ""
    before: tuple[datetime, uuid.UUID] | None = None

    @property
    def active(self) -> bool:
        return bool(self.entity or self.grade or self.category or self.commit or self.since or self.until or self.q)


def _day(params: Any, name: str) -> date | None:
    text = (params.get(name) or "").strip()
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise SearchError(f"{name}: {text!r} is not a day (YYYY-MM-DD, e.g. 2026-12-01)") from None


def parse_filter(params: Any) -> RunFilter:
    """The filter in ``params`` (a QueryDict or a dict); SearchError naming the first bad parameter."""
    entity = None
    wanted = (params.get("entity") or "").strip()
    if wanted:
        target_kind, _, slug = wanted.partition(":")
        entity = Entity.objects.filter(target_kind=target_kind, slug=slug).first() if slug else None
        if entity is None:
            raise SearchError(f"entity: no entity {wanted!r} (expected <kind>:<id>, e.g. scenario:triage)")
    grade = (params.get("grade") or "").strip()
    if grade and grade not in GRADES:
        raise SearchError(f"grade: {grade!r} is not one of {', '.join(GRADES)}")
    category = (params.get("category") or "").strip()
    if len(category) > 100:
        raise SearchError("category: longer than a failure category can be (100 characters)")
    commit = (params.get("commit") or "").strip().lower()
    if commit and not _HEX.fullmatch(commit):
        raise SearchError(f"commit: {commit!r} is not a commit (4 to 40 hexadecimal characters)")
    since, until = _day(params, "since"), _day(params, "until")
    if since and until and since > until:
        raise SearchError(f"since: {since} is after until ({until})")
    q = (params.get("q") or "").strip()
    if len(q) > 200:
        raise SearchError("q: longer than 200 characters")
    before = None
    if text := (params.get("before") or "").strip():
        at_text, _, id_text = text.partition("~")
        try:
            before = (datetime.fromisoformat(at_text), uuid.UUID(id_text))
        except ValueError:
            raise SearchError(f"before: {text!r} is not a page of runs (an instant and a run id)") from None
        if before[0].tzinfo is None:
            raise SearchError(f"before: {text!r} has no time zone")
    return RunFilter(entity, grade, category, commit, since, until, q, before)


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def matching(wanted: RunFilter) -> QuerySet[Execution]:
    """Every run ``wanted`` selects, newest started first (replays left out)."""
    runs = Execution.objects.filter(loop_launched=False)
    if wanted.entity is not None:
        runs = runs.filter(entity=wanted.entity)
    if wanted.grade == "bad":
        runs = runs.filter(grade__status=Grade.Status.GRADED, grade__passed=False)
    elif wanted.grade == "passed":
        runs = runs.filter(grade__status=Grade.Status.GRADED, grade__passed=True)
    elif wanted.grade == "failed":
        runs = runs.filter(Q(status=Execution.Status.FAILED) | Q(grade__status=Grade.Status.FAILED))
    elif wanted.grade == "ungraded":
        runs = runs.exclude(grade__status__in=[Grade.Status.GRADED, Grade.Status.FAILED])
    if wanted.category:
        runs = runs.filter(grade__failure_category=wanted.category)
    if wanted.commit:
        runs = runs.filter(commit__startswith=wanted.commit)
    if wanted.since:
        runs = runs.filter(started_at__gte=_midnight(wanted.since))
    if wanted.until:
        runs = runs.filter(started_at__lt=_midnight(wanted.until + timedelta(days=1)))
    if wanted.q:
        runs = runs.alias(input_text=Cast("input", TextField()), output_text=Cast("output", TextField())).filter(
            Q(error__icontains=wanted.q)
            | Q(input_text__icontains=wanted.q)
            | Q(output_text__icontains=wanted.q)
            | Q(grade__feedback__icontains=wanted.q)
        )
    if wanted.before is not None:
        at, run_id = wanted.before
        runs = runs.filter(Q(started_at__lt=at) | Q(started_at=at, id__lt=run_id))
    return runs.order_by("-started_at", "-id")


def page_of(wanted: RunFilter) -> tuple[list[Execution], str]:
    """One page of the runs ``wanted`` selects with their entity and grade, and the ``before`` of the next ("")."""
    runs = list(matching(wanted).select_related("entity", "grade")[: PAGE + 1])
    older = f"{runs[PAGE - 1].started_at.isoformat()}~{runs[PAGE - 1].pk}" if len(runs) > PAGE else ""
    return runs[:PAGE], older
