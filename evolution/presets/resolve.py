"""The five functions, resolved in one place: the entity's loop module, then the project's callables, then the preset.

Seed 003, "window() and should_open()" and "Your own post-merge comparator":
an entity's ``<id>.loop.py`` may define ``window``, ``should_open``,
``compare`` (and ``measure``, ``verdict``, read by grading and the check); a
project-wide replacement is a setting naming a callable (``LOOP_SHOULD_OPEN``,
``LOOP_COMPARE``, ``LOOP_WINDOW``; ``LOOP_VERDICT`` for the check,
``LOOP_MEASURE`` for grading); the preset answers the rest. The entity's
function wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from evolution.presets.base import COMPARE, COUNT, EVOLVE, SHOULD_OPEN, ComparatorFault, RuleError
from evolution.presets.evolve import evolve_should_open, evolve_window
from evolution.presets.repair import repair_should_open, repair_window
from evolution.steering import groups
from grading.models import Entity, Grade
from singularity.brain import deadline
from singularity.brain.sandbox import is_async

log = logging.getLogger(__name__)

#: Inside ``pinned_modules``: the functions already read, by (path, commit, name) — one read of the brain per replay.
_PINNED: ContextVar[dict[tuple[str, str, str], Any] | None] = ContextVar("pinned_modules", default=None)


@contextmanager
def pinned_modules() -> Iterator[None]:
    """Read each loop-module function once for the block (a backtest asks the same module at every graded run)."""
    token = _PINNED.set({})
    try:
        yield
    finally:
        _PINNED.reset(token)


def module_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    """The entity's loop module function ``name`` at its commit, or None (no module, or no such function); for
    ``window``, the project's ``LOOP_WINDOW`` when the entity declares none (R5.2: entity, then project)."""
    own = _own_function(entity, name)
    if own is None and name == "window":
        return _project_function("LOOP_WINDOW")
    return own


def _own_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    if not entity.loop_module_path or not entity.commit:
        return None
    pinned = _PINNED.get()
    if pinned is None:
        return _read_function(entity, name)
    key = (entity.loop_module_path, entity.commit, name)
    if key not in pinned:
        pinned[key] = _read_function(entity, name)
    return pinned[key]


def _read_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    from grading.methods import brain_checkout
    from singularity.brain.modules import load_at

    loaded = load_at(brain_checkout(None), entity.commit, entity.loop_module_path)
    function = getattr(loaded.module, name, None)
    return deadline.bounded(function, path=loaded.path, name=name) if callable(function) else function


def project_rule() -> Callable[..., Any] | None:
    path = getattr(settings, "LOOP_SHOULD_OPEN", "")
    return deadline.bounded(import_string(path), path=path, name="should_open") if path else None


def preset_of(entity: Entity) -> str:
    """The entity's ``loop.preset``: ``repair`` (the default) or ``evolve``."""
    return str(((entity.terms or {}).get("loop") or {}).get("preset") or "repair")


def ask_should_open(entity: Entity, window: list[dict[str, Any]], trigger: dict[str, Any]) -> dict[str, Any]:
    """Ask the nearest should_open (the entity's module, the project's, the preset's); RuleError on a bad shape."""
    preset_rule = evolve_should_open if preset_of(entity) == "evolve" else repair_should_open
    rule = module_function(entity, "should_open") or project_rule() or preset_rule
    if is_async(rule):
        raise RuleError(f"{entity}: should_open must answer synchronously; it is declared async")
    answer = rule(window=window, trigger=trigger)
    if isinstance(answer, bool) or not isinstance(answer, dict) or not isinstance(answer.get("open"), bool):
        raise RuleError(f"{entity}: should_open must answer {{open, reason}}, not {answer!r}")
    return {"open": answer["open"], "reason": str(answer.get("reason") or "")}


def ask_window(
    entity: Entity,
    terms: dict[str, Any],
    preset: dict[str, Any],
    grades: list[Grade],
    *,
    anchor: Grade | None,
    now: datetime,
    since: datetime | None = None,
    past: Any = None,
) -> tuple[dict[str, Any], list[Grade]]:
    """Ask the entity's own window(ctx) at the trigger; return its answer and the graded runs it names, newest first.

    The answer is recorded (a waiting window, or the end of one; a ready window carrying awaitingPerson is a load
    error) and its run ids are re-filtered by the engine's rules: the entity's own graded runs, never the loop's
    replays; an id that fails is dropped; a window naming one run twice is refused.

    ``past`` replays a history instead of reading the tables (a backtest): it answers ``changed_at``,
    ``graded_runs(since, through, limit)`` and ``kept(ids)`` from the runs replayed so far, and nothing is recorded.
    """
    from types import SimpleNamespace

    from evolution.steering import cadence

    function = module_function(entity, "window")
    shown = {k: v for k, v in preset.items() if not k.startswith("_")}
    ctx = SimpleNamespace(
        targetKind=entity.target_kind,
        targetId=entity.slug,
        phase="trigger",
        now=now,
        anchor={"id": str(anchor.execution_id), "createdAt": anchor.graded_at.isoformat()} if anchor else None,
        since=since.isoformat() if since is not None else None,
        groupChangedAt=past.changed_at if past is not None else groups.changed_at(entity),
        terms=terms,
        preset=SimpleNamespace(window=lambda _ctx=None: dict(shown)),
        gradedRuns=lambda since=None, through=None, limit=None: (
            past.graded_runs(since, through, limit)
            if past is not None
            else graded_runs(entity, since, through, limit, now=now)
        ),
        calibration=lambda: calibration_of(entity),
    )
    if is_async(function):
        raise RuleError(f"{entity}: window must answer synchronously here; it is declared async")
    answer = function(ctx)
    cadence.check_window(entity, answer)
    if past is None:
        cadence.record_window(entity, answer, now)
    ids = [str(i) for i in answer.get("runIds") or []]
    if len(ids) != len(set(ids)):
        raise RuleError(f"{entity}: window() named a run twice: a run is one vote")
    if past is not None:
        kept = past.kept(ids)
    else:
        kept = {
            str(g.execution_id): g
            for g in Grade.objects.filter(
                entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False, execution_id__in=ids
            ).select_related("execution")
        }
    rejected = [i for i in ids if i not in kept]
    if rejected:
        log.info("loop: %s: window() named %d runs the engine does not count (rejected)", entity, len(rejected))
    survivors = [kept[i] for i in ids if i in kept]
    window = {**answer, "runIds": [str(g.execution_id) for g in survivors]}
    if window.get("progress") == shown.get("progress"):  # the preset's count handed back: restated (R6.24)
        restate_progress(window)
    return window, sorted(survivors, key=lambda g: (g.graded_at, str(g.execution_id)), reverse=True)


def restate_progress(window: dict[str, Any]) -> None:
    """The engine restates the preset's count so it never runs ahead of the runs the window keeps (R6.24): a
    window() that hands the preset's progress back after dropping runs says "4 of 5", never "5 of 5" over four.
    A sampler's own progress is its own (R6.24: it belongs to the sampler) and is never restated."""
    progress = window.get("progress")
    kept = len(window.get("runIds") or [])
    have = progress.get("have") if isinstance(progress, dict) else None
    if isinstance(have, int) and not isinstance(have, bool) and have > kept:
        window["progress"] = {**progress, "have": kept}


def preset_counts(entity: Entity) -> bool:
    """Whether the repair preset's own count decides this entity's landings (no rule or window of its own)."""
    loop = (entity.terms or {}).get("loop") or {}
    if (loop.get("preset") or "repair") != "repair" or project_rule():
        return False
    if not entity.loop_module_path:
        return True
    return module_function(entity, "should_open") is None and module_function(entity, "window") is None


def request_window(entity: Entity, *, now: datetime) -> dict[str, Any]:
    """The preset's window for a look with no grade behind it ("Analyze now", a scheduled look, an idea): under
    repair the last windowRuns graded runs through now, under evolve every grade since the previous cycle's mark."""
    terms = entity.terms or {}
    if preset_of(entity) == "evolve":
        window = evolve_window(entity, terms, now=now)
    else:
        window = repair_window(entity, terms, anchor=None, now=now)
    window.pop("_grades")
    return window


def graded_runs(entity: Entity, since: Any, through: Any, limit: Any, *, now: datetime) -> dict[str, Any]:
    """``ctx.gradedRuns``: the entity's own completed graded runs, newest first, capped, and the judge's failures."""
    from django.utils.dateparse import parse_datetime

    from evolution.presets.base import outcomes
    from evolution.presets.evolve import WINDOW_BOUND

    def instant(value: Any) -> datetime | None:
        return parse_datetime(value) if isinstance(value, str) else value

    bound = min(int(limit), WINDOW_BOUND) if limit else WINDOW_BOUND
    rows = Grade.objects.filter(entity=entity, execution__loop_launched=False, graded_at__lte=instant(through) or now)
    if since is not None:
        rows = rows.filter(graded_at__gt=instant(since))
    comparable = list(
        rows.filter(status=Grade.Status.GRADED).select_related("execution").order_by("-graded_at")[:bound]
    )
    for grade in comparable:
        grade.entity = entity
    ungraded = rows.filter(status=Grade.Status.FAILED).count()
    return {"comparable": outcomes(comparable, entity.terms or {}), "ungraded": ungraded}


def calibration_of(entity: Entity) -> dict[str, Any]:
    """``ctx.calibration()``: how far the judge agrees with people on each judged ``human: true`` metric."""
    from grading.calibration import calibration

    return {"metrics": [metric.as_dict() for metric in calibration(entity)]}


def ask_watch_window(cycle: Any, preset: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """The entity's own window() at the watch (phase ``watch``, since the watch opened), or ``preset`` when it
    declares none. Its run ids are never widened past the preset's; its period metrics are kept. ComparatorFault
    naming window() when it throws, will not load or answers a shape the engine cannot read."""
    from types import SimpleNamespace

    entity = cycle.entity
    function = checked_module_function(entity, "window")
    if function is None:
        return preset
    shown = {k: v for k, v in preset.items() if not k.startswith("_")}
    ctx = SimpleNamespace(
        targetKind=entity.target_kind,
        targetId=entity.slug,
        phase="watch",
        now=now,
        anchor=None,
        since=cycle.watch_opened_at.isoformat() if cycle.watch_opened_at else None,
        groupChangedAt=None,
        terms=entity.terms or {},
        preset=SimpleNamespace(window=lambda _ctx=None: dict(shown)),
        gradedRuns=lambda since=None, through=None, limit=None: graded_runs(entity, since, through, limit, now=now),
        calibration=lambda: calibration_of(entity),
    )
    if is_async(function):
        raise ComparatorFault("window must answer synchronously; it is declared async")
    try:
        answer = function(ctx)
    except Exception as exc:  # noqa: BLE001 - the brain's window(): any failure settles unvalidated, named
        raise ComparatorFault(f"window raised {type(exc).__name__} at the watch: {exc}") from exc
    if not isinstance(answer, dict):
        raise ComparatorFault(f"window must answer an object at the watch, not {answer!r}")
    kept = set(shown.get("runIds") or [])
    ids = [str(i) for i in answer.get("runIds") or shown.get("runIds") or []]
    return {**shown, **answer, "runIds": [i for i in ids if i in kept]}


def checked_module_function(entity: Entity, name: str) -> Callable[..., Any] | None:
    """Return the entity's loop-module function ``name`` at its commit, or None; ComparatorFault when it won't load.
    For ``window`` the project's ``LOOP_WINDOW`` answers when the entity has none."""
    if not entity.loop_module_path or not entity.commit:
        return _project_function("LOOP_WINDOW") if name == "window" else None
    from grading.methods import brain_checkout
    from singularity.brain.modules import load_at
    from singularity.errors import SingularityError

    try:
        loaded = load_at(brain_checkout(None), entity.commit, entity.loop_module_path)
    except SingularityError as exc:
        raise ComparatorFault(f"loop module {entity.loop_module_path} would not load: {exc}") from exc
    function = getattr(loaded.module, name, None)
    if callable(function):
        return deadline.bounded(function, path=loaded.path, name=name)
    return _project_function("LOOP_WINDOW") if name == "window" else None


#: The project tier's settings (R5.2) and the function each stands for.
PROJECT_FUNCTIONS = {
    "LOOP_SHOULD_OPEN": "should_open",
    "LOOP_COMPARE": "compare",
    "LOOP_WINDOW": "window",
    "LOOP_VERDICT": "verdict",
    "LOOP_MEASURE": "measure",
}


def _project_function(setting: str) -> Callable[..., Any] | None:
    path = getattr(settings, setting, "")
    if not path:
        return None
    return deadline.bounded(import_string(path), path=path, name=PROJECT_FUNCTIONS[setting])


def comparator(entity: Entity) -> tuple[str, Callable[..., Any] | None]:
    """Return which comparator answers for ``entity`` and the brain's function (None for the engine's count)."""
    compare = checked_module_function(entity, "compare") or _project_function("LOOP_COMPARE")
    if compare is not None:
        return COMPARE, compare
    if preset_of(entity) == "evolve":
        return EVOLVE, None  # evolve compares two windows: a trigger rule is not asked after the merge
    rule = checked_module_function(entity, "should_open") or _project_function("LOOP_SHOULD_OPEN")
    if rule is not None:
        return SHOULD_OPEN, rule
    return COUNT, None
