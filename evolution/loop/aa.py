"""A/A calibration (issue 31): how often the engine's verdicts would speak when nothing changed.

The pre-merge check is run with the incumbent as its own candidate — the
entity's current commit on both sides — on freshly frozen sets (one per
trial, each frozen through another of the entity's newest graded runs, as a
cycle's opening freezes through its anchor), every side replayed and graded
under the entity's current judge, and judged by the same function the real
check uses (``check.judge_pairs``: the judge's health, then the entity's
``verdict()``, the project's or the engine's rules). It should say
validated and regressed about never; how often it says inconclusive is the
price of the set's size. The watch is read the same way where history
allows: consecutive windows of ``watch.windowRuns`` graded runs made at one
commit, each counted by the repair watch's rule (``minFailures`` bad
regress).

Kept as reports like backtests (``AaReport``). The row is the job: a request
records it due and sends it to a worker after the commit; ``due`` names the
rows nobody took (or whose worker's hold ran out), which the loop's tick
sends again, so a lost message costs a tick. Nothing here opens a cycle: the
replays are loop-launched (never history, never a trigger).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from evolution.loop import check, freeze
from evolution.models import AaReport, Cycle
from evolution.presets import pairs as P
from grading.models import Entity, Execution, Grade
from singularity.money import money_str

log = logging.getLogger(__name__)

#: How many trials one report may ask for.
MAX_TRIALS = 100
#: A report nobody took this long after it was recorded is sent again by the sweep.
UNTAKEN_AFTER = timedelta(minutes=2)
#: How long a worker holds a report it took before the sweep hands it to another.
LEASE = timedelta(minutes=30)
OUTCOMES = ("validated", "regressed", "inconclusive")


class AaRefused(ValueError):
    """A request the A/A cannot serve (a bad trial count); the message says what and where."""


# --- The job -----------------------------------------------------------------------------------


def request(entity: Entity, *, trials: int, actor: str, now: datetime | None = None, send: bool = True) -> AaReport:
    """Record an A/A report due for ``entity`` and, after the commit, send it to a worker; AaRefused on bad input."""
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise AaRefused(f"trials: {trials!r} is not a whole number from 1 to {MAX_TRIALS}")
    report = AaReport.objects.create(
        entity=entity, trials=trials, created_by=actor[:200], created_at=now or timezone.now()
    )
    if send:
        transaction.on_commit(lambda: hand_over(report.pk))
    return report


#: How a report is sent to a worker: ``evolution.tasks`` registers its task here (the loop never imports tasks).
SENDERS: list[Callable[[int], Any]] = []


def register_sender(send: Callable[[int], Any]) -> None:
    SENDERS[:] = [send]


def hand_over(report_id: int) -> bool:
    """Send report ``report_id`` to a worker; a broker that cannot be reached is logged (the sweep sends it again)."""
    from kombu.exceptions import OperationalError as BrokerError

    if not SENDERS:
        log.warning("loop: A/A report %s: no worker task is registered; the tick's sweep sends it", report_id)
        return False
    try:
        SENDERS[0](report_id)
    except (BrokerError, OSError) as exc:
        log.warning("loop: A/A report %s could not reach the broker (%s); the tick's sweep resends it", report_id, exc)
        return False
    return True


def due(now: datetime) -> list[int]:
    """Reports still due that nobody took in time, or whose worker's hold ran out."""
    return list(
        AaReport.objects.filter(status=AaReport.Status.DUE)
        .filter(Q(started_at=None, created_at__lt=now - UNTAKEN_AFTER) | Q(started_at__lt=now - LEASE))
        .order_by("pk")
        .values_list("pk", flat=True)[:50]
    )


def sweep(now: datetime) -> int:
    """The tick's sweep: send every due report nobody holds again; return how many were sent."""
    return sum(hand_over(pk) for pk in due(now))


def take(report_id: int, now: datetime) -> AaReport | None:
    """Take report ``report_id`` for this worker (a conditional update); None when it is done or someone holds it."""
    taken = (
        AaReport.objects.filter(pk=report_id, status=AaReport.Status.DUE)
        .filter(Q(started_at=None) | Q(started_at__lt=now - LEASE))
        .update(started_at=now)
    )
    if not taken:
        return None
    return AaReport.objects.select_related("entity").get(pk=report_id)


def run(report_id: int, *, now: datetime | None = None) -> AaReport | None:
    """Run report ``report_id`` when it is this worker's to run; return it finished, else None."""
    now = now or timezone.now()
    report = take(report_id, now)
    if report is None:
        return None
    try:
        result = calibrate(report.entity, trials=report.trials, now=now)
    except Exception as exc:  # noqa: BLE001 - any fault of one report is recorded on it; the worker goes on
        log.exception("loop: A/A report %s of %s failed", report.pk, report.entity)
        AaReport.objects.filter(pk=report.pk).update(
            status=AaReport.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=timezone.now()
        )
    else:
        AaReport.objects.filter(pk=report.pk).update(
            status=AaReport.Status.DONE, result=result, finished_at=timezone.now()
        )
    report.refresh_from_db()
    return report


# --- The work ----------------------------------------------------------------------------------


def calibrate(entity: Entity, *, trials: int, now: datetime) -> dict[str, Any]:
    """The report: the check's A/A over ``trials`` freshly frozen sets and the watch's over windows of one commit."""
    checked = check_aa(entity, trials=trials, now=now)
    watched = watch_aa(entity, limit=trials)
    spend = Decimal(checked.get("spend_usd") or 0)
    report = {
        "entity": f"{entity.target_kind}:{entity.slug}",
        "commit": entity.commit,
        "trials": trials,
        "check": checked,
        "watch": watched,
        "spend_usd": money_str(spend),
    }
    report["words"] = words(report)
    return report


def _anchors(entity: Entity, count: int) -> list[Execution]:
    """The entity's newest graded runs (never the loop's own), one per trial at most: each opens a fresh set."""
    return list(
        Execution.objects.filter(entity=entity, loop_launched=False, grade__status=Grade.Status.GRADED)
        .order_by("-started_at")
        .defer("output")[:count]
    )


def check_aa(entity: Entity, *, trials: int, now: datetime) -> dict[str, Any]:
    """The check with the same commit on both sides, once per trial: the count of each verdict and the spend."""
    from grading.current_judge import current_judge

    if freeze.check_mode(entity) != freeze.REPLAY:
        return {"possible": False, "why": "this entity has no pre-merge check (it is not replayed)"}
    try:
        judge = current_judge(entity)
    except Exception as exc:  # noqa: BLE001 - a judge the brain will not resolve: no A/A, said in the report
        return {"possible": False, "why": f"the judge does not resolve: {exc}"}
    anchors = _anchors(entity, trials)
    if not anchors:
        return {"possible": False, "why": "the entity has no graded run to freeze a set through"}
    counts: Counter[str] = Counter()
    rows = []
    spend = Decimal(0)
    for index in range(trials):
        anchor = anchors[index % len(anchors)]
        cycle = Cycle(entity=entity, anchor=anchor, window={}, judge=judge)
        frozen = freeze.freeze(cycle, now=now) or {}
        frozen["baseSha"] = entity.commit
        cycle.frozen = frozen
        pairs, cost = replay_pairs(cycle, entity.commit, judge, now=now)
        verdict = check.judge_pairs(cycle, pairs)
        outcome = "inconclusive" if verdict.inconclusive or verdict.verdict == "unvalidated" else verdict.verdict
        counts[outcome] += 1
        spend += cost
        rows.append(
            {
                "trial": index + 1,
                "anchor": str(anchor.pk),
                "inputs": len(frozen.get("slots") or []),
                "heldOut": frozen.get("heldOut"),
                "verdict": verdict.verdict,
                "inconclusive": verdict.inconclusive,
                "rule": verdict.rule,
                "reason": verdict.reason,
                "spend_usd": money_str(cost),
            }
        )
    return {
        "possible": True,
        "commit": entity.commit,
        **{outcome: counts[outcome] for outcome in OUTCOMES},
        "trials": rows,
        "spend_usd": money_str(spend),
    }


def replay_pairs(cycle: Cycle, commit: str, judge: dict[str, Any], *, now: datetime) -> tuple[list[P.Pair], Decimal]:
    """Every frozen input replayed on both sides at ``commit`` (``check.trials`` each), graded now; the pairs and
    what the replays and their grading cost."""
    from grading.grade import grade_now
    from grading.replays import prepare_many, run_replay

    entity = cycle.entity
    slots = list((cycle.frozen or {}).get("slots") or [])
    trials = check.trials_of(cycle)
    wanted = [(side, i, t) for i in range(len(slots)) for t in range(1, trials + 1) for side in ("c", "b")]
    executions = prepare_many(entity, [(slots[i].get("input") or {}, commit) for _, i, _ in wanted], now=now)
    sides: dict[tuple[str, int, int], P.Side] = {}
    cost = Decimal(0)
    for (side, i, t), execution in zip(wanted, executions, strict=True):
        execution = run_replay(execution)
        grade = None
        if execution.status == Execution.Status.SUCCEEDED:
            grade = _graded(execution, cycle_note=f"aa:{entity.pk}", grade_now=grade_now)
        cost += Decimal(execution.cost_usd or 0) + Decimal(grade.cost_usd if grade is not None else 0)
        sides[(side, i, t)] = check._side(execution, grade, judge)
    pairs = [
        check.slot_pair(slot, index, trial, sides[("b", index, trial)], sides[("c", index, trial)])
        for index, slot in enumerate(slots)
        for trial in range(1, trials + 1)
    ]
    return pairs, cost


def _graded(execution: Execution, *, cycle_note: str, grade_now: Any) -> Grade | None:
    """Book the replay's grading as a loop replay's is (exempt, due at once) and grade it here; None when off."""
    from grading.booking import GradingOff, book_exempt

    try:
        booked = book_exempt(execution, cycle_note)
    except GradingOff as exc:
        log.warning("loop: A/A replay %s cannot be graded: %s", execution.pk, exc)
        return None
    if booked.status in (Grade.Status.BOOKED, Grade.Status.GRADING):
        return grade_now(booked)
    return booked


def watch_aa(entity: Entity, *, limit: int) -> dict[str, Any]:
    """The repair watch's count over consecutive windows of graded runs made at one commit (the entity's current).

    The first window stands for the one a cycle opened on; each later one is read as the watch would read the
    runs after a merge that changed nothing. Not read under evolve (its interval needs a baseline this does not
    fake) nor without two windows' worth of history at the commit.
    """
    from evolution.loop import watch
    from grading.metrics import is_bad

    loop = (entity.terms or {}).get("loop") or {}
    if (loop.get("preset") or "repair") != "repair":
        return {"possible": False, "why": "the evolve watch's A/A is not built: only the repair count is read"}
    runs, failures = watch.sizes(entity)
    grades = list(
        Grade.objects.filter(
            entity=entity,
            status=Grade.Status.GRADED,
            execution__loop_launched=False,
            execution__commit=entity.commit,
        ).order_by("graded_at")[: runs * (limit + 1)]
    )
    windows = [grades[i : i + runs] for i in range(0, len(grades) - runs + 1, runs)]
    if len(windows) < 2:
        return {
            "possible": False,
            "why": f"{len(grades)} graded runs at {entity.commit[:12]}: two windows of {runs} are needed",
            "runsPerWindow": runs,
            "minFailures": failures,
        }
    terms = entity.terms or {}
    bad = [sum(1 for g in window if is_bad(g, terms)) for window in windows[1:]]
    regressed = sum(1 for count in bad if count >= failures)
    return {
        "possible": True,
        "commit": entity.commit,
        "runsPerWindow": runs,
        "minFailures": failures,
        "windows": len(bad),
        "bad": bad,
        "regressed": regressed,
        "validated": len(bad) - regressed,
    }


def words(report: dict[str, Any]) -> str:
    """The report in one paragraph as people read it."""
    checked, watched = report.get("check") or {}, report.get("watch") or {}
    said = []
    if checked.get("possible"):
        said.append(
            f"The check, same commit on both sides, over {report['trials']} freshly frozen sets: "
            f"{checked['validated']} validated, {checked['regressed']} regressed, {checked['inconclusive']} "
            f"unvalidated or inconclusive (spend {checked['spend_usd']} USD)."
        )
    else:
        said.append(f"No check A/A: {checked.get('why', '')}.")
    if watched.get("possible"):
        said.append(
            f"The watch, {watched['windows']} windows of {watched['runsPerWindow']} runs at one commit: "
            f"{watched['regressed']} would have regressed (at {watched['minFailures']} bad)."
        )
    else:
        said.append(f"No watch A/A: {watched.get('why', '')}.")
    return " ".join(said)


def lines(report: dict[str, Any]) -> list[str]:
    """The report for a shell, line by line."""
    said = [f"A/A of {report['entity']} at {str(report['commit'])[:12]}: {report['words']}"]
    for row in (report.get("check") or {}).get("trials") or []:
        held = row.get("heldOut") or {}
        said.append(
            f"  trial {row['trial']}: {row['inputs']} inputs (held-out {held.get('k', 0)} of {held.get('n', 0)}) → "
            f"{'inconclusive' if row['inconclusive'] else row['verdict']}: {row['reason']}"
        )
    return said
