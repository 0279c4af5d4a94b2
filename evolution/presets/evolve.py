"""The evolve preset: make what works better (seed 003, "Improving what already works — preset: evolve").

- ``evolve_window``: every grade that landed since the previous cycle's mark (the instant that cycle read its
  window), ready at the ``trigger.windowRuns``-th — the cadence. A grade still pending at the mark enters the next
  window; an entity with no mark reads its history, capped at ``WINDOW_BOUND`` runs. ``ready_at`` answers the same
  question for a whole batch of landings.
- ``evolve_should_open``: open on a ready window, whatever its runs scored: nothing has to be wrong.
- ``compare``: the post-merge comparator — the first ``watch.windowRuns`` runs graded since the watch opened
  against the window the cycle opened on, by the six rules in order (floors, guards, the objective through a
  bootstrap interval, unmeasured metrics, mustImprove, validated only when the whole interval clears the bar).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Max, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from evolution.core import periods
from evolution.models import Cycle
from evolution.presets import readings as R
from evolution.presets.base import EVOLVE, UNIT, Answer, ComparatorFault, Observed, single_version, trigger_terms
from evolution.steering import groups
from grading.cards import observed
from grading.metrics import OUTCOME_FIELDS, human_rated
from grading.models import Entity, Grade
from grading.people import people_values
from grading.pin import comparable_text, judge_text

#: The most graded runs one evolve window holds (the seed's "engine's window bound"; docs/decisions.md).
WINDOW_BOUND = 1000
#: What the trigger and the brief read of a window's grades.
WINDOW_FIELDS = OUTCOME_FIELDS


# --- The window ------------------------------------------------------------------------------


def cadence(terms: Mapping[str, Any]) -> int:
    """``trigger.windowRuns``: how many grades open the next cycle."""
    return int(trigger_terms(terms.get("loop") or {})["windowRuns"])


def mark(entity: Entity) -> datetime | None:
    """Where the next window starts: the instant the entity's previous cycle read its window (its start), never
    before its lock groups last changed; None for an entity no cycle has read yet."""
    read = Cycle.objects.filter(entity=entity, analysed=True).aggregate(at=Max("started_at"))["at"]
    changed = groups.changed_at(entity)
    return max((at for at in (read, changed) if at is not None), default=None)


def marks(entity_ids: list[int]) -> dict[int, datetime]:
    """The marks of many entities in one read (lock groups' clean bases are the caller's to add)."""
    rows = (
        Cycle.objects.filter(entity_id__in=entity_ids, analysed=True)
        .values("entity_id")
        .annotate(at=Max("started_at"))
        .values_list("entity_id", "at")
    )
    return dict(rows)


def _since(entity_id: int, since: datetime | None, now: datetime) -> Any:
    grades = Grade.objects.filter(
        entity_id=entity_id, status=Grade.Status.GRADED, execution__loop_launched=False, graded_at__lte=now
    )
    if since is not None:
        grades = grades.filter(graded_at__gt=since)
    return observed(grades, now=now)


def since_grades(entity: Entity, *, since: datetime | None, now: datetime, limit: int | None = None) -> list[Grade]:
    """The entity's own graded runs that landed after ``since`` through ``now``, newest first, at most ``limit``
    (the window bound by default)."""
    limit = WINDOW_BOUND if limit is None else limit
    runs = list(
        single_version(_since(entity.pk, since, now), entity)
        .select_related("execution")
        .only(*WINDOW_FIELDS, "execution__loop_launched", "execution__completed_at")
        .order_by("-graded_at", "-execution_id")[:limit]
    )
    for run in runs:
        run.entity = entity
    return runs


def evolve_window(
    entity: Entity,
    terms: Mapping[str, Any],
    *,
    now: datetime,
    since: datetime | None | str = "read",
    runs: list[Grade] | None = None,
) -> dict[str, Any]:
    """The evolve window at ``now``: every grade since the mark (``since``; read when not given), ready at the
    cadence. ``_grades`` carries its runs newest first (dropped before storing); ``runs`` are those grades when the
    caller holds them already (a backtest replaying the history)."""
    size = cadence(terms)
    start = mark(entity) if since == "read" else since
    assert not isinstance(start, str)
    if runs is None:
        runs = since_grades(entity, since=start, now=now)
    have = len(runs)
    if start is None:
        reason = f"the first window: the entity's {have} graded runs so far (at most {WINDOW_BOUND:,})"
        if have >= WINDOW_BOUND:
            reason = f"the first window: the entity's newest {have:,} graded runs (the most one window holds)"
    else:
        reason = f"{have} graded runs since the previous cycle's window (a cycle opens every {size})"
    window = {
        "from": start.isoformat() if start is not None else None,
        "to": now.isoformat(),
        "runIds": [str(g.execution_id) for g in reversed(runs)],
        "reason": reason,
        "ready": have >= size,
        "progress": {"have": have, "need": size, "unit": UNIT},
        "metrics": [],
    }
    window["_grades"] = runs
    return window


def ready_at(entities: Mapping[int, Entity], *, now: datetime) -> dict[int, datetime | None]:
    """For each entity, when its window became ready: the instant its windowRuns-th grade since its mark landed
    (None while fewer have). One read of the marks, then one short indexed read per entity."""
    found = marks(list(entities))
    answers: dict[int, datetime | None] = {}
    for pk, entity in entities.items():
        start = found.get(pk)
        changed = groups.changed_at(entity)
        if changed is not None and (start is None or changed > start):
            start = changed
        size = cadence(entity.terms or {})
        at = (
            _since(pk, start, now)
            .order_by("graded_at", "execution_id")
            .values_list("graded_at", flat=True)[size - 1 : size]
        )
        answers[pk] = next(iter(at), None)
    return answers


def evolve_should_open(window: list[dict[str, Any]], trigger: Mapping[str, Any]) -> dict[str, Any]:
    """The evolve trigger rule: a ready window opens, whatever its runs scored (``window``: its outcomes)."""
    return {
        "open": True,
        "reason": f"{len(window)} graded runs since the previous cycle's window (a cycle opens every "
        f"{trigger.get('windowRuns')})",
    }


# --- The watch ---------------------------------------------------------------------------------


def before_runs(cycle: Cycle) -> list[R.Run]:
    """The window the cycle opened on as (run id, metric vector) pairs, under the judge it pinned, oldest first.

    The window's run ids are read where they are stored, from the cycle's row inside the statement
    (``stored_window``), rather than sent back as a parameter of a thousand ids: the watch reads a locked, fresh
    row, so the two are the same ids.
    """
    run_ids = (cycle.window or {}).get("runIds") or []
    if cycle.pk is not None and connection.vendor in ("sqlite", "postgresql") and well_formed(run_ids):
        return _pinned(cycle, stored_window(cycle.pk))
    return pinned_runs(cycle, run_ids)


def well_formed(run_ids: Any) -> bool:
    """Whether a stored window's ``runIds`` is a list of run ids' text only (as the engine writes one)."""
    return isinstance(run_ids, list) and all(isinstance(r, str) and UUID_TEXT.fullmatch(r) for r in run_ids)


def stored_window(cycle_id: int) -> RawSQL:
    """The run ids of the window stored on cycle ``cycle_id``, as what ``execution__id__in`` reads (SQLite keeps a
    UUID as its 32 hex digits). Only for a window ``well_formed`` says holds run ids' text alone: Postgres would
    refuse to cast anything else."""
    if connection.vendor == "sqlite":
        return RawSQL(
            "SELECT replace(j.value, '-', '') FROM evolution_cycle c, json_each(c.\"window\", '$.runIds') j "
            "WHERE c.id = %s",
            (cycle_id,),
        )
    return RawSQL(
        "SELECT v::uuid FROM evolution_cycle c, jsonb_array_elements_text(c.\"window\" -> 'runIds') v WHERE c.id = %s",
        (cycle_id,),
    )


def pinned_runs(cycle: Cycle, run_ids: list[Any]) -> list[R.Run]:
    """The graded runs ``run_ids`` name as (run id, metric vector) pairs, under the judge the cycle pinned, in the
    order they were graded.

    One read of the judge's and the vector's stored text, the ids bound as one parameter (``named``): a judge is
    decoded once per distinct snapshot. A run's id is read only where people's ratings may be read for it (a
    human-rated metric votes); otherwise it is None.
    """
    return _pinned(cycle, named(run_ids))


def _pinned(cycle: Cycle, ids: Any) -> list[R.Run]:
    terms = cycle.entity.terms or {}
    with_ids = any(human_rated(spec) for _, spec in R.voting(terms))
    columns = ["execution_id"] if with_ids else []
    rows = (
        Grade.objects.filter(execution__id__in=ids, status=Grade.Status.GRADED)
        .order_by("graded_at", "execution_id")
        .values_list(*columns, judge_text(cycle.judge), Cast("metrics", TextField()))
    )
    pinned: dict[str | None, bool] = {}
    ids: list[Any] = []
    texts: list[str] = []
    for row in rows:
        execution_id, judge, metrics = row if with_ids else (None, *row)
        if comparable_text(cycle.judge, judge, pinned):
            ids.append(execution_id)
            texts.append(metrics or "{}")
    return list(zip(ids, R.vectors_of(texts), strict=True))


#: A run id as the engine stores one (``str(uuid)``).
UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def named(run_ids: list[Any]) -> Any:
    """The run ids a stored window names, as what ``execution__id__in`` binds: one parameter on SQLite (a JSON
    array read by ``json_each``) and Postgres (a ``uuid[]``), where a thousand ids bound one by one cost more to
    prepare than to read; a list of UUIDs elsewhere. A malformed id names no run."""
    vendor = connection.vendor
    if vendor == "sqlite":  # Django keeps a UUID there as its 32 hex digits
        return RawSQL("SELECT value FROM json_each(%s)", (json.dumps([str(r).replace("-", "") for r in run_ids]),))
    if vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::uuid[])", ([r for r in map(str, run_ids) if UUID_TEXT.fullmatch(r)],))
    return run_uuids(run_ids)


def run_uuids(ids: list[Any]) -> list[uuid.UUID]:
    """A stored window's run ids as UUIDs (a malformed id names no run and is left out)."""
    found = []
    for run in ids:
        try:
            found.append(run if isinstance(run, uuid.UUID) else uuid.UUID(str(run)))
        except ValueError:
            continue
    return found


def after_runs(seen: Observed, after_window: Mapping[str, Any] | None) -> list[R.Run]:
    """The watch's window as (run id, metric vector) pairs, oldest first — only the runs the after window names
    when the entity's own window() narrowed it."""
    runs = list(zip(seen.run_ids, seen.vectors, strict=True))
    named = (after_window or {}).get("runIds")
    if named is None:
        return runs
    kept = {str(run) for run in named}
    return [run for run in runs if str(run[0]) in kept]


def period_values(window: Mapping[str, Any] | None) -> dict[str, Any]:
    """The period metrics a window carries, by id (a list of {id, value} or a mapping)."""
    metrics = (window or {}).get("metrics")
    if isinstance(metrics, dict):
        return {str(k): v for k, v in metrics.items() if v is not None}
    if isinstance(metrics, list):
        return {
            str(item["id"]): item.get("value")
            for item in metrics
            if isinstance(item, dict) and "id" in item and item.get("value") is not None
        }
    return {}


def _reading(
    cycle: Cycle,
    terms: Mapping[str, Any],
    metric_id: str,
    spec: dict[str, Any],
    sides: R.Sides | None,
    period: tuple[Any, Any],
    confidence: float,
) -> dict[str, Any]:
    """One metric read on both windows: both points, the gain, the band, and for a run metric the interval."""
    if R.is_period(spec):
        before, after = period
        n_before, n_after = int(before is not None), int(after is not None)
        source, spread = "window", None
    else:
        assert sides is not None
        measured_before, measured_after = R.measured(sides.before), R.measured(sides.after)
        before, after = R.point_of(measured_before, spec), R.point_of(measured_after, spec)
        n_before, n_after = len(measured_before), len(measured_after)
        source = sides.source
        spread = None
        if n_before >= R.MIN_RUNS and n_after >= R.MIN_RUNS:
            spread = R.interval(
                measured_before, measured_after, spec=spec, confidence=confidence, seed=R.seed_for(cycle.pk, metric_id)
            )
    band = R.allowed(spec, terms, before) if before is not None else None
    moved = R.gain(spec, before, after)
    return {
        "metric": metric_id,
        "role": spec.get("role"),
        "direction": spec.get("direction", "max"),
        "scope": "period" if R.is_period(spec) else "run",
        "aggregate": R.how(spec),
        "source": source,
        "before": {"value": _json(before), "n": n_before},
        "after": {"value": _json(after), "n": n_after},
        "gain": _json(moved),
        "allowed": _json(band),
        "spread": [_json(spread[0]), _json(spread[1])] if spread else None,
        "confidence": confidence if spread else None,
        "floor": spec.get("floor"),
        "mustImprove": R.must_improve(spec),
        # Kept unserialized for the rules; dropped before storing.
        "_before": before,
        "_after": after,
        "_gain": moved,
        "_band": band,
        "_spread": spread,
    }


def _json(value: Any) -> Any:
    """A number as the record stores it: a Decimal as its decimal string, a float as it is."""
    if isinstance(value, Decimal):
        return f"{value.normalize():f}" if value == value.to_integral_value() else f"{value:f}"
    return value


def readings_of(cycle: Cycle, seen: Observed, after_window: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Every objective and guard read on both windows (one source per metric, period values from the windows)."""
    terms = cycle.entity.terms or {}
    metrics = R.voting(terms)
    run_ids = [mid for mid, spec in metrics if not R.is_period(spec)]
    sides = R.values_by_source(terms, run_ids, before_runs(cycle), after_runs(seen, after_window))
    before_period, after_period = period_values(cycle.window), period_values(after_window)
    confidence = R.confidence_of(terms)
    return [
        _reading(
            cycle,
            terms,
            mid,
            spec,
            sides.get(mid),
            (before_period.get(mid), after_period.get(mid)),
            confidence,
        )
        for mid, spec in metrics
    ]


def window_values(cycle: Cycle) -> dict[str, tuple[list[float], list[float]]]:
    """Each run metric the watch read, its per-run values on both windows from the source its reading names (the
    people's ratings or the grades), as floats for drawing: {metric: (before, after)}. Empty when the watch has not
    compared."""
    record = cycle.watch_verdict or {}
    if record.get("comparator") != EVOLVE:
        return {}
    read = {m["metric"]: m for m in record.get("perMetric") or [] if m.get("scope") == "run"}
    if not read:
        return {}
    before = before_runs(cycle)
    after = pinned_runs(cycle, (cycle.watch_window or {}).get("runIds") or [])
    people = any(m.get("source") == R.PEOPLE for m in read.values())
    ratings = people_values([run for run, _ in before + after]) if people else {}

    def side(runs: list[R.Run], metric: str, source: str | None) -> list[float]:
        if source == R.PEOPLE:
            values = [ratings.get(str(run), {}).get(metric) for run, _ in runs]
        else:
            values = [vector.get(metric) for _, vector in runs]
        return [float(v) for v in R.measured(values)]

    return {
        metric: (side(before, metric, m.get("source")), side(after, metric, m.get("source")))
        for metric, m in read.items()
    }


def _side_missing(reading: dict[str, Any]) -> str | None:
    """Which side a metric went unmeasured on (or measured too thinly for an interval), in words; None if neither."""
    b, a = reading["before"]["n"], reading["after"]["n"]
    if not b and not a:
        return "on either side (neither the window before the change nor the one after it)"
    if not b:
        return "before the change (the window the cycle opened on)"
    if not a:
        return "after the change (the window the watch observed)"
    return None


def decide(readings: list[dict[str, Any]], *, thin: str | None = None) -> tuple[str, int, str]:
    """The six rules in order over the readings; return (verdict, the rule that answered, the reason).

    ``thin`` says why the window the cycle opened on is not a baseline (it was not ready: an idea or Analyze now
    opened on it); rule 4 then answers inconclusive after the protective rules 1–3 had their say (R14.19).
    """
    for r in readings:  # 1. floors, on the after side's point
        if r["role"] in ("objective", "guard") and R.under_floor(r, r["_after"]):
            return (
                "regressed",
                1,
                (f"{r['metric']} stands at {R.shown(r['_after'])} after the change, under its floor {r['floor']}"),
            )
    for r in readings:  # 2. guards past their tolerance, point rule
        if r["role"] == "guard" and r["_gain"] is not None and -r["_gain"] > r["_band"]:
            return (
                "regressed",
                2,
                (
                    f"guard {r['metric']} moved {R.shown(r['_gain'])} ({R.shown(r['_before'])} → "
                    f"{R.shown(r['_after'])}), past its tolerance ±{R.shown(r['_band'])}"
                ),
            )
    for r in readings:  # 3. the objective past its tolerance (a run objective: the whole interval)
        if r["role"] != "objective" or r["_gain"] is None:
            continue
        if r["scope"] == "period" and -r["_gain"] > r["_band"]:
            return (
                "regressed",
                3,
                (
                    f"{r['metric']} moved {R.shown(r['_gain'])} ({R.shown(r['_before'])} → {R.shown(r['_after'])}), "
                    f"past its tolerance ±{R.shown(r['_band'])}"
                ),
            )
        spread = r["_spread"]
        if r["scope"] == "run" and spread is not None and spread[1] < -r["_band"]:
            return (
                "regressed",
                3,
                (
                    f"{r['metric']}: gain {R.shown(r['_gain'])} in [{R.shown(spread[0])}, {R.shown(spread[1])}], "
                    f"wholly past −{R.shown(r['_band'])}"
                ),
            )
    for r in readings:  # 4. unmeasured on a side (a run metric on fewer than three runs has no interval)
        where = _side_missing(r)
        if where:
            return "unvalidated", 4, f"inconclusive: {r['metric']} was not measured {where}"
        if r["role"] == "objective" and r["scope"] == "run" and r["_spread"] is None:
            return (
                "unvalidated",
                4,
                (
                    f"inconclusive: {r['metric']} was measured on {r['before']['n']} runs before and "
                    f"{r['after']['n']} after; an interval needs {R.MIN_RUNS} on each side"
                ),
            )
    if thin:
        return "unvalidated", 4, f"inconclusive: {thin}"
    for r in readings:  # 5. mustImprove with no gain to show
        if r["role"] != "objective" or not r["mustImprove"]:
            continue
        best = r["_spread"][1] if r["scope"] == "run" else r["_gain"]
        if best <= r["_band"]:
            return (
                "unvalidated",
                5,
                (f"shipped, no measurable gain: {r['metric']} {_gain_words(r)} against ±{R.shown(r['_band'])}"),
            )
    for r in readings:  # 6. validated only when the whole interval clears the bar
        if r["role"] != "objective" or r["scope"] != "run":
            continue
        bar = r["_band"] if r["mustImprove"] else -r["_band"]
        if not r["_spread"][0] > bar:
            return "unvalidated", 6, f"inconclusive: {r['metric']} {_gain_words(r)} against ±{R.shown(r['_band'])}"
    objectives = [r for r in readings if r["role"] == "objective"]
    if not objectives:
        return "validated", 6, "every guard held (no objective to move)"
    said = "; ".join(f"{r['metric']} {_gain_words(r)} against ±{R.shown(r['_band'])}" for r in objectives)
    return "validated", 6, said


def _gain_words(r: dict[str, Any]) -> str:
    if r["_spread"] is not None:
        low, high = r["_spread"]
        return f"gain {R.shown(r['_gain'])} in [{R.shown(low)}, {R.shown(high)}]"
    return f"gain {R.shown(r['_gain'])} ({R.shown(r['_before'])} → {R.shown(r['_after'])})"


def thin_baseline(cycle: Cycle) -> str | None:
    """Why the window the cycle opened on is too thin to compare against (it was not ready), or None."""
    window = cycle.window or {}
    if window.get("ready") is not False:
        return None
    progress = window.get("progress") or {}
    held = f"{progress.get('have')} of {progress.get('need')} {UNIT}" if progress.get("need") else "a window"
    return (
        f"the cycle opened on {held} (before its window was ready: an idea or Analyze now), a baseline too thin "
        "to show a gain against"
    )


def compare(cycle: Cycle, seen: Observed, after_window: Mapping[str, Any] | None = None) -> Answer:
    """The evolve comparator: None until the watch's window is full, then the six rules' verdict and its record."""
    runs = [str(run) for run in seen.run_ids]
    if not seen.full or (after_window is not None and after_window.get("ready") is False):
        return Answer(None, run_ids=runs)
    owed = periods.problem(cycle.entity.terms or {}, after_window)
    if owed:
        raise ComparatorFault(f"{owed} (at the watch)")
    readings = readings_of(cycle, seen, after_window)
    verdict, rule, reason = decide(readings, thin=thin_baseline(cycle))
    runs = [str(run) for run, _ in after_runs(seen, after_window)]  # the runs the after side read
    before_n = len((cycle.window or {}).get("runIds") or [])
    tally = f"{seen.have} of {seen.need} {UNIT} against the {before_n} the cycle opened on"
    per_metric = [{k: v for k, v in r.items() if not k.startswith("_")} for r in readings]
    record = {
        "verdict": verdict,
        "perMetric": per_metric,
        "perInput": [],
        "reason": reason if verdict != "validated" or rule != 6 else None,
        "summary": reason,
        "rule": rule,
        "comparator": EVOLVE,
        "tally": tally,
        "n": seen.have,
        "confidence": R.confidence_of(cycle.entity.terms or {}),
        "resamples": R.RESAMPLES,
        "seed": cycle.pk,
    }
    return Answer(verdict, record, reason, runs)


# --- What the decide card promises ---------------------------------------------------------------


def promise(terms: Mapping[str, Any]) -> str:
    """What the evolve watch will compare after the merge, in words the decide card reads after "Judged by ...":
    the window's size, each objective's reading (a run objective through the interval at the entity's confidence,
    a period one by its value per window), the guards held to their floors and tolerances, what a regression and
    an unproven change do."""
    loop = terms.get("loop") or {}
    watch, trigger = loop.get("watch") or {}, loop.get("trigger") or {}
    runs = int(watch.get("windowRuns") or trigger.get("windowRuns") or 5)
    confidence = R.confidence_of(terms)
    objectives, guards = [], []
    for metric_id, spec in R.voting(terms):
        if spec["role"] == "guard":
            guards.append(metric_id)
        elif R.is_period(spec):
            objectives.append(f"{metric_id} by its one value per window against its tolerance")
        else:
            bar = "+its tolerance (it must improve)" if R.must_improve(spec) else "−its tolerance"
            objectives.append(
                f"{metric_id} through a {confidence:.0%} interval of its median gain"
                f"{' (its mean: aggregate mean)' if R.how(spec) == 'mean' else ''}, validated only when the whole "
                f"interval clears {bar}"
            )
    parts = [f"the next {runs} graded runs after the merge compared with this window"]
    if objectives:
        parts.append("; ".join(objectives))
    if guards:
        named = " and ".join([", ".join(guards[:-1]), guards[-1]] if len(guards) > 1 else guards)
        parts.append(
            f"{named} held to {'its floor and tolerance' if len(guards) == 1 else 'their floors and tolerances'}"
        )
    after = "a regression opens its revert"
    if watch.get("onInconclusive") == "revert":
        after += ", and so does a change the watch cannot show worked (watch.onInconclusive: revert)"
    return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if parts[2:] else "") + f" — {after}"
