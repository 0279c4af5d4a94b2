"""The watch: after the merge, the entity's own next graded runs say whether the change held (seed 003).

"How a cycle is judged" and "The watch — when the evidence never arrives".
The watch opens at the merge (``open_watch``) with its deadline counted from
it, and is asked again at every landed grade of the entity (``on_grades``)
and on the loop's clock (``tick``). Each time it reads the observed span —
every finished run of the entity that started since the merge and before the
deadline, never a loop replay, never a run still waiting for a rating, for a
chat role never an episode that ran under two role versions — and splits its
grades into three baskets:

- graded under the judge the cycle pinned (``grading.pin.comparable``): the
  window is the first ``watch.windowRuns`` of them, in the order they were
  graded (so a full window never changes);
- ungraded: gradings that failed, and grades made under another judge (or
  recording none) — they fill no slot and count toward judge health;
- not graded at all (sampled out, still booked): in neither.

Then one comparator answers, nearest first: the entity's ``compare(before,
after, terms)`` (or the project's ``LOOP_COMPARE``), else its
``should_open`` (or ``LOOP_SHOULD_OPEN``) asked at each grade of the window,
else the engine's count by the trigger's own rule: ``watch.minFailures`` bad
runs regress on the spot; a full window with fewer validates. A verdict is
withheld while the judge is unhealthy (``judge_unhealthy``), and the cycle
settles unvalidated on that instead. At the deadline a window that never got
a verdict settles unvalidated ("the watch closed short: …"). A comparator of
the brain's that throws, will not load or answers a shape the engine cannot
read settles unvalidated naming it, with no verdict record.

While the window is short and the deadline ahead, the entity's runs are
graded whatever the sample (``exempt``) and under the pinned judge
(``frozen_judge``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from evolution.models import Cycle, as_json
from grading.cards import observed
from grading.metrics import aggregate, is_bad
from grading.models import Entity, Execution, Grade
from grading.pin import comparable

log = logging.getLogger(__name__)

UNIT = "graded runs"
VERDICTS = ("validated", "regressed", "unvalidated")
#: The engine's default evaluation.judge.maxUngradedShare and watch.deadlineHours (DESIGN).
DEFAULT_MAX_UNGRADED = Decimal("0.34")
DEFAULT_DEADLINE_HOURS = 336

COUNT, SHOULD_OPEN, COMPARE = "count", "should_open", "compare"


class ComparatorFault(Exception):
    """The brain's comparator failed (raised, would not load, answered a shape the engine cannot read).

    The message names the function and what went wrong; the cycle settles
    unvalidated on it, with no verdict record.
    """


# --- Terms --------------------------------------------------------------------------------


def watch_terms(entity: Entity) -> dict[str, Any]:
    """Return the entity's resolved ``loop.watch`` block (empty when it has none)."""
    return dict(((entity.terms or {}).get("loop") or {}).get("watch") or {})


def sizes(entity: Entity) -> tuple[int, int]:
    """Return (windowRuns, minFailures) of the watch: the watch's own, else the trigger's (5 and 2 by default)."""
    loop = (entity.terms or {}).get("loop") or {}
    watch, trigger = loop.get("watch") or {}, loop.get("trigger") or {}
    need = watch.get("windowRuns") or trigger.get("windowRuns") or 5
    failures = watch.get("minFailures") or trigger.get("minFailures") or 2
    return int(need), int(failures)


def max_ungraded_share(entity: Entity) -> Decimal:
    """Return ``evaluation.judge.maxUngradedShare`` (manifest only; 0.34 by default)."""
    judge = ((entity.terms or {}).get("evaluation") or {}).get("judge") or {}
    value = judge.get("maxUngradedShare")
    return Decimal(str(value)) if value is not None else DEFAULT_MAX_UNGRADED


def _need(cycle: Cycle) -> tuple[int, int]:
    """Return the window size and minFailures the watch fixed when it opened (the terms' when it stored none)."""
    stored = cycle.watch_window or {}
    need, failures = sizes(cycle.entity)
    return int((stored.get("progress") or {}).get("need") or need), int(stored.get("minFailures") or failures)


# --- Opening ------------------------------------------------------------------------------


def open_watch(cycle: Cycle, now: datetime, *, evaluated_at: datetime | None = None) -> Cycle:
    """Open the watch of a merged change at ``now`` (the merge) and return the cycle.

    The deadline is ``watch.deadlineHours`` from ``now``, read once here; the
    window size and minFailures are fixed here too. Under ``watch.mode:
    none`` the cycle settles unvalidated at once, by design, with no verdict
    record. Grades already landed since ``now`` are read at once
    (``evaluated_at``, default the current time, is the clock of that read).
    """
    from evolution import cycles

    watch = watch_terms(cycle.entity)
    if watch.get("mode") == "none":
        return cycles.settle(
            cycle,
            Cycle.Status.UNVALIDATED,
            reason="watch.mode is none: the change shipped unwatched, by design",
            now=evaluated_at or now,
        )
    need, failures = sizes(cycle.entity)
    hours = watch.get("deadlineHours")
    deadline = now + timedelta(hours=float(hours if hours is not None else DEFAULT_DEADLINE_HOURS))
    window = {
        "from": now.isoformat(),
        "to": deadline.isoformat(),
        "runIds": [],
        "reason": f"0 of {need} {UNIT}",
        "ready": False,
        "progress": {"have": 0, "need": need, "unit": UNIT},
        "minFailures": failures,
        "bad": 0,
        "ungraded": 0,
    }
    cycles.advance(
        cycle,
        Cycle.Phase.WATCHING,
        watch_opened_at=now,
        watch_deadline=deadline,
        watch_window=window,
        watch_tally=window["reason"],
        next_poll_at=None,
        now=evaluated_at or now,
    )
    log.info("loop: cycle %s: watching %s until %s", cycle.pk, cycle.entity, deadline.isoformat())
    evaluate(cycle, evaluated_at or timezone.now())
    return cycle


# --- What the watch observes -----------------------------------------------------------


@dataclass
class Observed:
    """The observed span of one watch, read once."""

    #: The window: the first ``need`` runs graded under the pinned judge, in the order they were graded.
    window: list[Grade]
    #: Runs graded under the pinned judge in the span (the window and beyond).
    graded: int
    #: Failed gradings plus grades under another judge (or none) in the span.
    ungraded: int
    need: int
    min_failures: int
    bad: list[bool] = field(default_factory=list)

    @property
    def have(self) -> int:
        return len(self.window)

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


def span(cycle: Cycle, now: datetime) -> Any:
    """Return the executions the watch observes: the entity's own finished runs started since the merge.

    Never a loop replay, never a run started past the deadline, never one
    still waiting on a rating card; for a chat role never an episode that ran
    under two role versions.
    """
    runs = Execution.objects.filter(
        entity_id=cycle.entity_id, loop_launched=False, started_at__gte=cycle.watch_opened_at
    ).exclude(status=Execution.Status.RUNNING)
    if cycle.watch_deadline is not None:
        runs = runs.filter(started_at__lt=cycle.watch_deadline)
    if cycle.entity.kind == Entity.Kind.ROLE:
        runs = runs.exclude(episode__mixed_versions=True)
    return observed(runs, now=now)


def observe(cycle: Cycle, now: datetime) -> Observed:
    """Read the observed span's grades into the three baskets (see the module docstring)."""
    need, failures = _need(cycle)
    grades = Grade.objects.filter(execution__in=span(cycle, now), status__in=[Grade.Status.GRADED, Grade.Status.FAILED])
    if cycle.watch_deadline is not None:
        grades = grades.filter(Q(graded_at__lt=cycle.watch_deadline) | Q(graded_at=None))
    rows = grades.values_list("execution_id", "status", "judge", "graded_at", "execution__completed_at")
    pinned, ungraded = [], 0
    for execution_id, status, judge, graded_at, completed_at in rows:
        if status == Grade.Status.GRADED and comparable(cycle.judge, judge):
            pinned.append((graded_at, completed_at, str(execution_id), execution_id))
        else:
            ungraded += 1
    pinned.sort(key=lambda row: row[:3])
    first = [row[3] for row in pinned[:need]]
    by_id = Grade.objects.select_related("entity", "execution").in_bulk(first)
    window = [by_id[pk] for pk in first]
    return Observed(window=window, graded=len(pinned), ungraded=ungraded, need=need, min_failures=failures)


def judge_unhealthy(cycle: Cycle, seen: Observed, *, deciding: bool) -> str | None:
    """Return the "judge unhealthy" reason when the ungraded share is above maxUngradedShare, else None.

    The share is read once the span holds a window's worth of judged runs
    (graded + ungraded ≥ windowRuns), when a verdict is about to be given
    (``deciding``), or at the deadline (also ``deciding``) — never on the
    first lone failure, which would be a fifth of an answer.
    """
    ceiling = max_ungraded_share(cycle.entity)
    if not seen.judged or seen.share() <= ceiling:
        return None
    if not deciding and seen.judged < seen.need:
        return None
    share = seen.share().quantize(Decimal("0.01"))
    return (
        f"judge unhealthy: {seen.ungraded} of {seen.judged} runs of {cycle.entity} judged since the merge were not "
        f"graded under the pinned judge ({share} is above evaluation.judge.maxUngradedShare {ceiling})"
    )


# --- Comparators ------------------------------------------------------------------------


@dataclass
class Answer:
    """A comparator's answer: a verdict (or None for "not yet"), the record to store, the runs it rests on."""

    verdict: str | None
    record: dict[str, Any] | None = None
    reason: str = ""
    run_ids: list[str] = field(default_factory=list)
    bad: int | None = None
    asked: int | None = None


def _module_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    """Return the entity's loop-module function ``name`` at its commit, or None; ComparatorFault when it won't load."""
    if not entity.loop_module_path or not entity.commit:
        return None
    from grading.methods import brain_checkout
    from singularity.brain.modules import load_at
    from singularity.errors import SingularityError

    try:
        loaded = load_at(brain_checkout(None), entity.commit, entity.loop_module_path)
    except SingularityError as exc:
        raise ComparatorFault(f"loop module {entity.loop_module_path} would not load: {exc}") from exc
    function = getattr(loaded.module, name, None)
    return function if callable(function) else None


def _project_function(setting: str) -> Callable[..., Any] | None:
    path = getattr(settings, setting, "")
    return import_string(path) if path else None


def comparator(entity: Entity) -> tuple[str, Callable[..., Any] | None]:
    """Return which comparator answers for ``entity`` and the brain's function (None for the engine's count)."""
    compare = _module_function(entity, "compare") or _project_function("LOOP_COMPARE")
    if compare is not None:
        return COMPARE, compare
    rule = _module_function(entity, "should_open") or _project_function("LOOP_SHOULD_OPEN")
    if rule is not None:
        return SHOULD_OPEN, rule
    return COUNT, None


def _record(verdict: str, reason: str, tally: str, **extra: Any) -> dict[str, Any]:
    """The verdict record of the engine's own comparators (nothing per metric: they count)."""
    return {"verdict": verdict, "perMetric": [], "perInput": [], "reason": reason, "tally": tally, **extra}


def count(cycle: Cycle, seen: Observed) -> Answer:
    """The engine's count by the trigger's rule: minFailures bad regress on the spot; a full window validates."""
    terms = cycle.entity.terms or {}
    bad = 0
    for index, grade in enumerate(seen.window):
        bad += int(is_bad(grade, terms))
        if bad >= seen.min_failures:
            runs = [str(g.execution_id) for g in seen.window[: index + 1]]
            tally = f"{len(runs)} of {seen.need} {UNIT}, {bad} bad"
            reason = (
                f"{bad} bad of {len(runs)} {UNIT} since the merge (minFailures {seen.min_failures}): "
                "the entity would have triggered again"
            )
            record = _record("regressed", reason, tally, comparator=COUNT, n=len(runs), bad=bad)
            return Answer("regressed", record, reason, runs, bad)
    runs = [str(g.execution_id) for g in seen.window]
    if not seen.full:
        return Answer(None, run_ids=runs, bad=bad)
    tally = f"{seen.have} of {seen.need} {UNIT}, {bad} bad"
    reason = f"{tally} since the merge (regresses at {seen.min_failures}): the entity would not have triggered again"
    return Answer(
        "validated", _record("validated", reason, tally, comparator=COUNT, n=seen.have, bad=bad), reason, runs, bad
    )


def _outcomes(grades: Iterable[Grade], terms: dict[str, Any]) -> list[dict[str, Any]]:
    from evolution.trigger import outcomes

    return outcomes(grades, terms)


def ask_should_open(cycle: Cycle, seen: Observed, rule: Callable[..., Any]) -> Answer:
    """Ask the brain's should_open at each grade of the window not asked yet; open at any → regressed."""
    terms = cycle.entity.terms or {}
    from evolution.trigger import trigger_terms

    trigger = trigger_terms(terms.get("loop") or {})
    trigger.update(windowRuns=seen.need, minFailures=seen.min_failures)
    asked = int((cycle.watch_window or {}).get("asked") or 0)
    runs = [str(g.execution_id) for g in seen.window]
    if inspect.iscoroutinefunction(rule):
        raise ComparatorFault("should_open must answer synchronously; it is declared async")
    for upto in range(asked + 1, seen.have + 1):
        window = _outcomes(reversed(seen.window[:upto]), terms)  # newest first, as the trigger asks
        try:
            answer = rule(window=window, trigger=trigger)
        except Exception as exc:  # noqa: BLE001 - the brain's rule: any failure settles unvalidated, named
            raise ComparatorFault(f"should_open raised {type(exc).__name__}: {exc}") from exc
        if isinstance(answer, bool) or not isinstance(answer, dict) or not isinstance(answer.get("open"), bool):
            raise ComparatorFault(f"should_open must answer {{open, reason}}, not {answer!r}")
        if answer["open"]:
            tally = f"{upto} of {seen.need} {UNIT}"
            reason = f"should_open answered open at {tally} since the merge: {answer.get('reason') or 'no reason'}"
            record = _record("regressed", reason, tally, comparator=SHOULD_OPEN, n=upto)
            return Answer("regressed", record, reason, runs[:upto], asked=upto)
    if not seen.full:
        return Answer(None, run_ids=runs, asked=seen.have)
    tally = f"{seen.have} of {seen.need} {UNIT}"
    reason = f"should_open never opened over {tally} since the merge"
    return Answer(
        "validated",
        _record("validated", reason, tally, comparator=SHOULD_OPEN, n=seen.have),
        reason,
        runs,
        asked=seen.have,
    )


def _vector(grades: list[Grade], period: Any) -> dict[str, Any]:
    """Per-metric median of the grades' vectors, the window's own period metrics laid over it."""
    ids = sorted({metric for grade in grades for metric in (grade.metrics or {})})
    vector = {metric: aggregate((grade.metrics or {}).get(metric) for grade in grades) for metric in ids}
    if isinstance(period, dict):
        vector.update(period)
    elif isinstance(period, list):
        vector.update({item["id"]: item.get("value") for item in period if isinstance(item, dict) and "id" in item})
    return {metric: value for metric, value in vector.items() if value is not None}


def before_side(cycle: Cycle) -> dict[str, Any]:
    """The window the cycle opened on, as compare reads it: {window, vector, outcomes} under the pinned judge."""
    window = cycle.window or {}
    ids = [str(run) for run in window.get("runIds") or []]
    grades = [
        grade
        for grade in Grade.objects.filter(execution_id__in=ids, status=Grade.Status.GRADED)
        .select_related("entity", "execution")
        .order_by("execution__completed_at", "execution_id")
        if comparable(cycle.judge, grade.judge)
    ]
    terms = cycle.entity.terms or {}
    return {"window": window, "vector": _vector(grades, window.get("metrics")), "outcomes": _outcomes(grades, terms)}


def after_side(cycle: Cycle, seen: Observed, window: dict[str, Any]) -> dict[str, Any]:
    """The window the watch sampled, as compare reads it (oldest first)."""
    terms = cycle.entity.terms or {}
    return {"window": window, "vector": _vector(seen.window, None), "outcomes": _outcomes(seen.window, terms)}


def _checked(result: Any) -> dict[str, Any] | None:
    """Return compare's answer when it is null or a verdict record; ComparatorFault naming the shape otherwise."""
    owed = "null or a verdict record {verdict, perMetric, perInput, reason}"
    if result is None:
        return None
    if isinstance(result, bool):
        raise ComparatorFault(f"compare returned a bare boolean ({result}); it owes {owed}")
    if not isinstance(result, dict):
        raise ComparatorFault(f"compare returned {type(result).__name__}; it owes {owed}")
    if result.get("verdict") not in VERDICTS:
        raise ComparatorFault(
            f"compare returned verdict {result.get('verdict')!r}; it owes one of {', '.join(VERDICTS)}"
        )
    for key in ("perMetric", "perInput"):
        if not isinstance(result.get(key), list):
            raise ComparatorFault(f"compare's record has no {key} list; it owes {owed}")
    if result["verdict"] != "validated" and not result.get("reason"):
        raise ComparatorFault(f"compare answered {result['verdict']} with no reason; a negative verdict owes one")
    return result


def ask_compare(cycle: Cycle, seen: Observed, compare: Callable[..., Any], window: dict[str, Any]) -> Answer:
    """Ask the brain's compare(before, after, terms): None is "not yet", a verdict record settles verbatim."""
    runs = [str(g.execution_id) for g in seen.window]
    if inspect.iscoroutinefunction(compare):
        raise ComparatorFault("compare must answer synchronously; it is declared async")
    try:
        result = compare(before=before_side(cycle), after=after_side(cycle, seen, window), terms=cycle.entity.terms)
    except Exception as exc:  # noqa: BLE001 - the brain's comparator: any failure settles unvalidated, named
        raise ComparatorFault(f"compare raised {type(exc).__name__}: {exc}") from exc
    record = _checked(result)
    if record is None:
        return Answer(None, run_ids=runs)
    record = as_json(record)
    return Answer(record["verdict"], record, str(record.get("reason") or f"compare answered {record['verdict']}"), runs)


# --- Evaluating ---------------------------------------------------------------------------


def _window_record(cycle: Cycle, seen: Observed, answer: Answer | None, which: str) -> dict[str, Any]:
    """The watch_window to store: the runs the answer rests on, oldest first, and the progress in graded runs."""
    runs = answer.run_ids if answer is not None else [str(g.execution_id) for g in seen.window]
    bad = answer.bad if answer is not None else None
    window = dict(cycle.watch_window or {})
    window.update(
        runIds=runs,
        reason=seen.tally(bad=bad),
        ready=seen.full,
        progress={"have": seen.have, "need": seen.need, "unit": UNIT},
        minFailures=seen.min_failures,
        ungraded=seen.ungraded,
        comparator=which,
    )
    if bad is not None:
        window["bad"] = bad
    if answer is not None and answer.asked is not None:
        window["asked"] = answer.asked
    return window


def _store(cycle: Cycle, window: dict[str, Any]) -> None:
    if window != cycle.watch_window or window["reason"] != cycle.watch_tally:
        Cycle.objects.filter(pk=cycle.pk).update(watch_window=window, watch_tally=window["reason"][:200])
        cycle.watch_window, cycle.watch_tally = window, window["reason"][:200]


def _settle(cycle: Cycle, status: str, reason: str, record: dict[str, Any] | None, now: datetime) -> str:
    from evolution import cycles

    log.info("loop: cycle %s: the watch settles %s: %s", cycle.pk, status, reason)
    cycles.settle(cycle, status, reason=reason, watch_verdict=record, now=now)
    # watch.onInconclusive (issue 6): an unvalidated settle of a watched change is where "revert" opens the
    # policy revert (settle's caller sees status unvalidated and reverted_by_policy); keep is this default.
    return status


def _answer(cycle: Cycle, seen: Observed, which: str, function: Callable[..., Any] | None) -> Answer:
    if which == COMPARE:
        assert function is not None
        return ask_compare(cycle, seen, function, _window_record(cycle, seen, None, which))
    if which == SHOULD_OPEN:
        assert function is not None
        return ask_should_open(cycle, seen, function)
    return count(cycle, seen)


def _closed_short(cycle: Cycle, seen: Observed, which: str, answer: Answer) -> tuple[str, dict[str, Any]]:
    """The reason and the record of a window the deadline closed without a verdict."""
    tally = seen.tally(bad=answer.bad)
    if which == COMPARE:
        reason = f"the watch closed short: compare gave no verdict by the deadline ({tally})"
    else:
        reason = f"the watch closed short: {tally}"
    return reason, _record("unvalidated", reason, tally, comparator=which, n=seen.have, bad=answer.bad)


def _evaluate_locked(cycle: Cycle, now: datetime, closing: bool) -> str | None:
    seen = observe(cycle, now)
    sick = judge_unhealthy(cycle, seen, deciding=closing)
    if sick:
        return _settle(cycle, Cycle.Status.UNVALIDATED, sick, None, now)
    try:
        which, function = comparator(cycle.entity)
        answer = _answer(cycle, seen, which, function)
    except ComparatorFault as fault:
        return _settle(cycle, Cycle.Status.UNVALIDATED, str(fault), None, now)
    _store(cycle, _window_record(cycle, seen, answer, which))
    if answer.verdict is not None:
        sick = judge_unhealthy(cycle, seen, deciding=True)
        if sick:
            return _settle(cycle, Cycle.Status.UNVALIDATED, sick, None, now)
        return _settle(cycle, answer.verdict, answer.reason, answer.record, now)
    if closing:
        reason, record = _closed_short(cycle, seen, which, answer)
        return _settle(cycle, Cycle.Status.UNVALIDATED, reason, record, now)
    return None


def evaluate(cycle: Cycle, now: datetime | None = None) -> str | None:
    """Read the watch of ``cycle`` once; return the status it settled at, or None while it keeps watching.

    Past the deadline this is the closing read: a window with no verdict
    settles unvalidated. The cycle row is locked while it is read (Postgres),
    so two workers hearing two grades of one entity settle it once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        fresh = Cycle.objects.select_for_update().select_related("entity").filter(pk=cycle.pk).first()
        if fresh is None or fresh.phase != Cycle.Phase.WATCHING or fresh.status:
            return None
        closing = fresh.watch_deadline is not None and now >= fresh.watch_deadline
        settled = _evaluate_locked(fresh, now, closing)
    cycle.refresh_from_db()
    return settled


def on_grades(grade_ids: list[Any], *, now: datetime | None = None) -> int:
    """Hear landed grades: read the watch of every watching cycle of their entities; return how many settled."""
    now = now or timezone.now()
    entity_ids = set(Grade.objects.filter(pk__in=list(grade_ids)).values_list("entity_id", flat=True))
    if not entity_ids:
        return 0
    watching = Cycle.objects.filter(phase=Cycle.Phase.WATCHING, entity_id__in=entity_ids).order_by("pk")
    return sum(evaluate(cycle, now) is not None for cycle in watching)


def tick(now: datetime | None = None) -> int:
    """The loop's clock: read every watching cycle (compare asks again; a deadline closes); return how many settled.

    A cycle whose read fails for a bug is logged and read again on the next tick.
    """
    now = now or timezone.now()
    settled = 0
    for cycle in Cycle.objects.filter(phase=Cycle.Phase.WATCHING).order_by("watch_deadline", "pk"):
        try:
            settled += int(evaluate(cycle, now) is not None)
        except Exception:
            log.exception("loop: cycle %s: the watch's tick failed; read again on the next tick", cycle.pk)
    return settled


# --- What grading asks the watch ---------------------------------------------------------


def _short(cycle: Cycle, started_at: datetime | None, now: datetime) -> bool:
    """Whether a run started at ``started_at`` is a challenger of this watch: after the merge, window short, in time."""
    if cycle.watch_opened_at is None or started_at is None or started_at < cycle.watch_opened_at:
        return False
    if cycle.watch_deadline is not None and (now >= cycle.watch_deadline or started_at >= cycle.watch_deadline):
        return False
    progress = (cycle.watch_window or {}).get("progress") or {}
    need = progress.get("need") or sizes(cycle.entity)[0]
    have = progress.get("have")
    if have is None:
        have = len((cycle.watch_window or {}).get("runIds") or [])
    return int(have) < int(need)


def _watching(entity_id: Any) -> Cycle | None:
    """The entity's watching cycle, read once per grading batch (grading.scope) rather than once per run."""
    from grading import scope

    memo = scope.memo()
    key = ("loop:watching", entity_id)
    if memo is not None and key in memo:
        return memo[key]
    cycle = Cycle.objects.filter(phase=Cycle.Phase.WATCHING, entity_id=entity_id).select_related("entity").first()
    if memo is not None:
        memo[key] = cycle
    return cycle


def exempt(execution: Execution) -> str | None:
    """Return "watch:<cycle id>" when ``execution`` must be graded whatever the sample, else None.

    That is while its entity's watch is short of its window and before the
    deadline, for a run of the entity's own that started since the merge.
    """
    if execution.loop_launched:
        return None
    cycle = _watching(execution.entity_id)
    if cycle is None or not _short(cycle, execution.started_at, timezone.now()):
        return None
    return f"watch:{cycle.pk}"


def frozen_judge(grade: Grade) -> dict[str, Any] | None:
    """Return the judge the watching cycle pinned when ``grade`` is of one of its challengers, else None.

    A challenger is the entity's own run started since the merge, graded while
    the window is short and before the deadline.
    """
    cycle = _watching(grade.entity_id)
    if cycle is None or not cycle.judge:
        return None
    run = Execution.objects.filter(pk=grade.execution_id).values("started_at", "loop_launched").first()
    if run is None or run["loop_launched"] or not _short(cycle, run["started_at"], timezone.now()):
        return None
    return dict(cycle.judge)
