"""The entity's ``<id>.loop.py``: imported at the entity's commit, asked ``measure(run)`` for its run-scoped metrics.

Every computed, run-scoped metric the entity declares beyond the catalog is
owed by ``measure()``. A live grading missing one fails naming it (unless it
is ``optional``); a replay may return fewer. No loop module while such
metrics are declared fails every grading, replays included. The module's
hash is what the grade pins, so a module that changes while a run is being
graded fails that attempt: the retry reads the module and its hash again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from grading.methods import brain_checkout
from grading.models import Entity, Execution
from singularity.brain import deadline
from singularity.brain.deadline import BrainDeadline
from singularity.brain.git import GitError
from singularity.brain.modules import BrainModule, BrainModuleError, load_at, sha256
from singularity.brain.sandbox import SandboxError
from singularity.errors import ConfigError


class MeasureError(ConfigError):
    """The loop module could not produce what the grade owes; the message names the module or the ids."""


@dataclass(frozen=True)
class RunInfo:
    """The execution being scored (never the grading): what ``measure(run)`` receives."""

    runKind: str  # noqa: N815 - the seed's field names, as brain authors read them
    runId: str  # noqa: N815
    targetId: str  # noqa: N815
    completedAt: datetime | None  # noqa: N815
    replay: bool
    input: Any = None
    output: Any = None


@dataclass(frozen=True)
class Measured:
    #: Declared run-scoped computed ids → the number measure() returned.
    values: dict[str, float] = field(default_factory=dict)
    #: sha256 of the loop module's bytes ("" when the entity has none).
    loop_hash: str = ""


def run_info(execution: Execution) -> RunInfo:
    """Return the RunInfo describing ``execution``."""
    return RunInfo(
        runKind=execution.run_kind,
        runId=str(execution.pk),
        targetId=execution.entity.slug,
        completedAt=execution.completed_at,
        replay=execution.loop_launched,
        input=execution.input,
        output=execution.output,
    )


def _metrics(entity: Entity) -> dict[str, dict[str, Any]]:
    return dict(entity.evaluation().get("metrics") or {})


def measured_ids(entity: Entity) -> list[str]:
    """Return the ids measure() produces for the entity: declared computed run-scoped metrics outside the catalog."""
    return sorted(
        metric_id
        for metric_id, spec in _metrics(entity).items()
        if spec.get("kind") == "computed" and (spec.get("scope") or "run") == "run" and not spec.get("catalog")
    )


def owed_ids(entity: Entity) -> list[str]:
    """Return the ids a live grading fails without: the measured ids not declared ``optional``."""
    metrics = _metrics(entity)
    return [metric_id for metric_id in measured_ids(entity) if not metrics[metric_id].get("optional")]


def _number(module_path: str, metric_id: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise MeasureError(f"{module_path}: measure() returned {value!r} for {metric_id!r}, not a number")
    number = float(value)
    if not math.isfinite(number):
        raise MeasureError(f"{module_path}: measure() returned {value!r} for {metric_id!r}, not a finite number")
    return number


def _parse(module_path: str, raw: Any, wanted: list[str]) -> dict[str, float]:
    """Return the wanted ids of measure()'s answer ``[{"id", "value"}]``; MeasureError on a malformed answer."""
    if not isinstance(raw, list | tuple):
        raise MeasureError(f"{module_path}: measure() returned {type(raw).__name__}, expected a list of {{id, value}}")
    values: dict[str, float] = {}
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or "value" not in item:
            raise MeasureError(f"{module_path}: measure() returned {item!r}, expected {{'id': str, 'value': number}}")
        if item["id"] in wanted:
            values[item["id"]] = _number(module_path, item["id"], item["value"])
    return values


def _load(entity: Entity, repo: Any) -> BrainModule:
    if not entity.commit:
        raise MeasureError(f"{entity}: {entity.loop_module_path} cannot be read: the entity has no brain commit")
    try:
        return load_at(repo, entity.commit, entity.loop_module_path)
    except BrainModuleError as exc:
        raise MeasureError(f"loop module {exc}") from exc


def _check_unchanged(entity: Entity, repo: Any, loaded: BrainModule) -> None:
    """MeasureError when a brain sync moved the entity's loop module while measure() ran."""
    fresh = Entity.objects.filter(pk=entity.pk).values("commit", "loop_module_path").first()
    if fresh is None or (fresh["commit"] == loaded.commit and fresh["loop_module_path"] == loaded.path):
        return
    try:
        now = sha256(repo.read_at(fresh["commit"], fresh["loop_module_path"])) if fresh["loop_module_path"] else ""
    except GitError:
        now = ""
    if now != loaded.sha256:
        raise MeasureError(
            f"loop module changed while grading: {loaded.path} moved from {loaded.sha256[:12]} "
            f"to {now[:12] or 'nothing'}; the retry reads it again"
        )


def project_measure() -> Any | None:
    """The project's ``measure(run)`` (``LOOP_MEASURE``, R5.2) under the brain-code deadline, or None when unset.

    It answers for an entity whose own loop module defines no ``measure()``; it is the project's code, so it runs
    in this process (in a thread the caller can abandon), not in the brain's sandbox.
    """
    from django.conf import settings
    from django.utils.module_loading import import_string

    path = getattr(settings, "LOOP_MEASURE", "")
    return deadline.bounded(import_string(path), path=path, name="measure") if path else None


def loop_module_hash(entity: Entity, *, checkout: Any | None = None) -> str:
    """Return the sha256 of the entity's loop module at its commit ("" when it has none)."""
    if not entity.loop_module_path:
        return ""
    return _load(entity, brain_checkout(checkout)).sha256


@dataclass(frozen=True)
class Measurer:
    """Who answers an entity's ``measure(run)``: the function (None: nobody owes it), its path, the loop module's
    hash the grade pins, and the module and checkout to re-check when it is the entity's own."""

    function: Any
    path: str = ""
    loop_hash: str = ""
    loaded: BrainModule | None = None
    repo: Any = None


def measurer(entity: Entity, checkout: Any | None = None) -> Measurer:
    """The entity's loop module's ``measure()``, else the project's ``LOOP_MEASURE`` (R5.2); a Measurer with no
    function when no metric is owed; MeasureError naming the ids when some are owed and nothing measures them."""
    from django.conf import settings

    wanted = measured_ids(entity)
    project = project_measure() if wanted else None
    if not entity.loop_module_path:
        if project is not None:
            return Measurer(project, settings.LOOP_MEASURE)
        if wanted:
            raise MeasureError(f"{entity}: no loop module measures {', '.join(wanted)}")
        return Measurer(None)
    repo = brain_checkout(checkout)
    loaded = _load(entity, repo)
    function = getattr(loaded.module, "measure", None)
    if function is not None:
        return Measurer(function, loaded.path, loaded.sha256, loaded, repo)
    if project is not None:  # the entity's module measures nothing: the project does
        return Measurer(project, settings.LOOP_MEASURE, loaded.sha256, loaded, repo)
    if wanted:
        raise MeasureError(f"{loaded.path} has no measure(): {', '.join(wanted)} not measured")
    return Measurer(None, loaded.path, loaded.sha256)


def measure(entity: Entity, execution: Execution, *, checkout: Any | None = None) -> Measured:
    """Ask the entity's loop module for the execution's run-scoped metrics; return them with the module's hash.

    MeasureError (naming the ids) when declared computed metrics have no
    module or no ``measure()``, when a live grading misses a non-optional id,
    when measure() raises or answers malformed, and when the module changed
    while it was measuring.
    """
    wanted, owed = measured_ids(entity), owed_ids(entity)
    who = measurer(entity, checkout)
    if who.function is None:
        return Measured(loop_hash=who.loop_hash)
    function, path, loop_hash, loaded, repo = who.function, who.path, who.loop_hash, who.loaded, who.repo
    try:
        raw = deadline.call(function, run_info(execution), path=path, name="measure")
    except (BrainDeadline, SandboxError) as exc:
        raise MeasureError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the brain's own code: any failure fails this measurement, named
        raise MeasureError(f"{path}: measure() raised {type(exc).__name__}: {exc}") from exc
    if loaded is not None:
        _check_unchanged(entity, repo, loaded)
    values = _parse(path, raw, wanted)
    missing = [metric_id for metric_id in owed if metric_id not in values]
    if missing and not execution.loop_launched:
        raise MeasureError(f"{path}: measure() did not return {', '.join(missing)}")
    return Measured(values=values, loop_hash=loop_hash)
