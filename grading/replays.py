"""Replays: an entity's run at a commit of the brain other than its current one, acting on nothing (seed 003).

The pre-merge check replays the candidate at the PR's head and the incumbent
at the commit the cycle froze. A replay is the entity's own run in every
respect but two: it executes the entity as defined at that commit
(``entity_at``), and it is loop-launched, so every tool that would write
answers a success marked dry-run (``grading.runners``), it is never carded for
a rating, never history, and its grade never opens a cycle.

``prepare`` creates the execution row up front (running, started now) so its
id can be written on the round before anything runs; ``run_replay`` runs that
row later, on a worker. A definition that will not load at the commit
finishes the execution failed with the reason, at once — the change failing
that run, not a run nobody looked at.
"""

from __future__ import annotations

import copy
import logging
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.utils import timezone

from grading.executions import run_kind_for
from grading.models import Entity, Execution
from singularity.brain.git import Checkout, GitError, git
from singularity.brain.loader import BrainSnapshot, load_brain
from singularity.errors import ConfigError

log = logging.getLogger(__name__)


class ReplayUnloadable(ConfigError):
    """The entity cannot be run at that commit (gone, or its definition fails to load there); names the commit."""


def ensure_commit(checkout: Checkout, sha: str, *, ref: str = "") -> None:
    """Make ``sha`` readable in ``checkout``: fetch ``ref`` (a branch of the origin) when the object is missing.

    GitError when the origin does not hold it either.
    """
    try:
        git("cat-file", "-e", f"{sha}^{{commit}}", cwd=checkout.path)
        return
    except GitError:
        pass
    from grading.sync import _file_lock, _lock_path

    with _file_lock(_lock_path(checkout.path)):
        if ref:
            git("fetch", "--quiet", "origin", f"+refs/heads/{ref}:refs/remotes/origin/{ref}", cwd=checkout.path)
        else:
            git("fetch", "--quiet", "origin", sha, cwd=checkout.path)
    git("cat-file", "-e", f"{sha}^{{commit}}", cwd=checkout.path)


@lru_cache(maxsize=16)
def _snapshot(path: str, branch: str, commit: str) -> BrainSnapshot:
    """The brain loaded at a full commit id never changes: one load per process and commit."""
    return load_brain(Checkout(path=Path(path), branch=branch), commit)


def entity_at(entity: Entity, commit: str, checkout: Checkout) -> Entity:
    """Return ``entity`` as the brain defines it at ``commit``: an unsaved copy carrying that commit's definition.

    The copy keeps the row's primary key (its runs are the entity's runs).
    ReplayUnloadable when the file is gone at that commit or does not load there.
    """
    from grading.sync import _values

    try:
        snapshot = _snapshot(str(checkout.path), checkout.branch, commit)
    except GitError as exc:
        raise ReplayUnloadable(f"{entity}: the brain cannot be read at {commit[:12]}: {exc}") from exc
    definition = next(
        (d for d in snapshot.entities if d.target_kind == entity.target_kind and d.slug == entity.slug), None
    )
    if definition is None:
        raise ReplayUnloadable(f"{entity}: {entity.path} is not in the brain at {commit[:12]}")
    if definition.error:
        raise ReplayUnloadable(f"{entity}: its definition does not load at {commit[:12]}: {definition.error}")
    replica = copy.copy(entity)
    replica._state = copy.copy(entity._state)
    for name, value in _values(definition).items():
        setattr(replica, name, value)
    replica.commit = commit
    return replica


def prepare(entity: Entity, *, input: dict[str, Any], commit: str, now: Any = None) -> Execution:
    """Create the running execution row of a replay of ``entity`` at ``commit`` (nothing runs yet)."""
    return prepare_many(entity, [(input, commit)], now=now)[0]


def prepare_many(entity: Entity, sides: list[tuple[dict[str, Any], str]], *, now: Any = None) -> list[Execution]:
    """Create the running execution rows of replays of ``entity``, one per (input, commit), in one statement."""
    started = now or timezone.now()
    rows = [
        Execution(
            id=uuid.uuid4(),
            entity=entity,
            run_kind=run_kind_for(entity),
            status=Execution.Status.RUNNING,
            source=Execution.Source.LOOP,
            input=value if isinstance(value, dict) else {},
            commit=commit,
            loop_launched=True,
            started_at=started,
        )
        for value, commit in sides
    ]
    return Execution.objects.bulk_create(rows)


def run_replay(
    execution: Execution, *, checkout: Checkout | None = None, ref: str = "", gateway: Any = None
) -> Execution:
    """Run the prepared replay ``execution`` at its commit and return it finished.

    A definition that will not load there (or a commit the origin does not
    hold) finishes it failed with the reason. Running it twice does nothing
    the second time (a finished row is returned as it is).
    """
    from grading.executions import finish_execution
    from grading.runners import run_entity
    from grading.sync import current_checkout

    if execution.status != Execution.Status.RUNNING:
        return execution
    checkout = checkout or current_checkout()
    entity = execution.entity
    try:
        ensure_commit(checkout, execution.commit, ref=ref)
        replica = entity_at(entity, execution.commit, checkout)
    except (ReplayUnloadable, GitError) as exc:
        log.info("replay %s of %s cannot run at %s: %s", execution.pk, entity, execution.commit[:12], exc)
        return finish_execution(execution, status=Execution.Status.FAILED, error=f"the replay could not start: {exc}")
    Execution.objects.filter(pk=execution.pk).update(definition_hash=replica.definition_hash)
    execution.definition_hash = replica.definition_hash
    return run_entity(
        replica,
        input=execution.input,
        source=Execution.Source.LOOP,
        loop_launched=True,
        execution=execution,
        checkout=checkout,
        gateway=gateway,
    )
