"""What every preset and comparator shares: the trigger's terms, a grade's outcome, what the watch observed, an answer.

The repair preset (``evolution.presets.repair``) and the brain's own
functions (resolved in ``evolution.presets.resolve``) read and answer in
these shapes; the loop's watch and verdict stages pass them between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from evolution.core.errors import RuleError as RuleError
from grading import observed as O
from grading.metrics import is_bad, specs
from grading.models import Grade

UNIT = "graded runs"
VERDICTS = ("validated", "regressed", "unvalidated")
COUNT, SHOULD_OPEN, COMPARE, EVOLVE = "count", "should_open", "compare", "evolve"


class ComparatorFault(Exception):
    """The brain's comparator failed (raised, would not load, answered a shape the engine cannot read).

    The message names the function and what went wrong; the cycle settles
    unvalidated on it, with no verdict record.
    """


def trigger_terms(loop: dict[str, Any]) -> dict[str, Any]:
    """The trigger block as the preset's count reads it, with the loop's threshold beside it."""
    trigger = dict(loop.get("trigger") or {})
    trigger.setdefault("windowRuns", 5)
    trigger.setdefault("minFailures", 2)
    trigger["threshold"] = loop.get("threshold")
    return trigger


def outcomes(
    grades: Iterable[Grade],
    terms: dict[str, Any],
    *,
    memo: dict[Any, dict[str, Any]] | None = None,
    sources: Mapping[str, str] | None = None,
    people: Mapping[str, Mapping[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Each grade as the trigger rule reads it: run id, score, passed, bad, metrics (newest first as given).

    ``metrics`` is the run's observed vector (``grading.observed``: a person's rating over the judge's on a
    human-rated metric, a reported metric people's alone) and ``bad`` is judged on it — so a brain's
    ``should_open``, its ``window()``'s ``ctx.gradedRuns`` and the preset read one value. ``sources`` reads two
    windows compared with each other from one source per metric (``grading.observed.sources``); ``people`` is
    their ratings when the caller read them.

    ``memo`` (by run id) shares one grade's outcome between the windows of a batch that hold it; only for a rule
    that reads its window without changing it (the engine's own).
    """
    grades = list(grades)
    rated = O.rated_ids(terms)
    if rated and people is None:
        wanted = [g.execution_id for g in grades if memo is None or g.execution_id not in memo]
        people = O.ratings_of(wanted, terms)
    reading = (specs(terms), rated, people or {}, sources) if rated else None
    if memo is None:
        return [_outcome(g, terms, reading) for g in grades]
    answer = []
    for g in grades:
        known = memo.get(g.execution_id)
        if known is None:
            known = memo[g.execution_id] = _outcome(g, terms, reading)
        answer.append(known)
    return answer


def _outcome(g: Grade, terms: dict[str, Any], reading: tuple | None) -> dict[str, Any]:
    if reading is None:
        vector, bad = g.metrics, is_bad(g, terms, {})
    else:
        metric_specs, rated, people, sources = reading
        vector = O.vector_of(metric_specs, rated, g.metrics, people.get(str(g.execution_id)), sources)
        bad = is_bad(g, terms, vector=vector)
    return {
        "runId": str(g.execution_id),
        "overallScore": g.score,
        "passed": g.passed,
        "bad": bad,
        "metrics": vector,
        "failureCategory": g.failure_category,
    }


def single_version(grades: Any, entity: Any) -> Any:
    """``grades`` without a chat role's episodes whose turns ran under two role versions (R22.9): they count in
    no window — neither the trigger's nor the watch's."""
    from grading.models import Entity

    if entity.kind != Entity.Kind.ROLE:
        return grades
    return grades.exclude(execution__episode__mixed_versions=True)


@dataclass
class Observed:
    """The observed span of one watch, read once.

    The window's run ids and their metric vectors are read with the span (a comparison of windows needs no more);
    ``window``, the runs as grades, is read on first use only (a count or a brain's function asks for it).
    """

    #: The window's runs (execution ids, as stored): the first ``need`` graded under the pinned judge, in that order.
    run_ids: list[Any]
    #: Runs graded under the pinned judge in the span (the window and beyond).
    graded: int
    #: Failed gradings plus grades under another judge (or none) in the span.
    ungraded: int
    need: int
    min_failures: int
    #: Each window run's metric vector as graded (the judge's or the code's), in the window's order.
    vectors: list[dict[str, Any]] = field(default_factory=list)
    #: Reads the window's grades, in the window's order (called once, on first use of ``window``).
    load: Callable[[list[Any]], list[Grade]] | None = field(default=None, repr=False)
    _grades: list[Grade] | None = field(default=None, repr=False)

    @property
    def window(self) -> list[Grade]:
        """The window's runs as grades, in the window's order (read on first use)."""
        if self._grades is None:
            self._grades = self.load(self.run_ids) if self.load is not None and self.run_ids else []
        return self._grades

    @property
    def have(self) -> int:
        return len(self.run_ids)

    @property
    def full(self) -> bool:
        return self.have >= self.need

    @property
    def judged(self) -> int:
        """graded + ungraded: the denominator of the judge-health share."""
        return self.graded + self.ungraded

    def share(self) -> Decimal:
        return Decimal(self.ungraded) / Decimal(self.judged) if self.judged else Decimal(0)

    def tally(self, *, bad: int | None = None) -> str:
        words = f"{self.have} of {self.need} {UNIT}"
        if bad is not None:
            words += f", {bad} bad"
        if self.ungraded:
            words += f", {self.ungraded} ungraded"
        return words


@dataclass
class Answer:
    """A comparator's answer: a verdict (or None for "not yet"), the record to store, the runs it rests on."""

    verdict: str | None
    record: dict[str, Any] | None = None
    reason: str = ""
    run_ids: list[str] = field(default_factory=list)
    bad: int | None = None
    asked: int | None = None


def record(verdict: str, reason: str, tally: str, **extra: Any) -> dict[str, Any]:
    """The verdict record of the engine's own comparators (nothing per metric: they count)."""
    return {"verdict": verdict, "perMetric": [], "perInput": [], "reason": reason, "tally": tally, **extra}
