"""Keep the Entity rows in step with the brain: fetch, load the new head, write one row per entity file.

``sync_brain`` is what the periodic task and ``manage.py brain sync`` call.
Running it twice is harmless: the rows are keyed by (target kind, slug),
unchanged entities are reported unchanged, and concurrent syncs are
serialized by a file lock on the checkout (one machine) and row locks on the
entity table (several machines sharing one database).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from grading.models import Entity
from singularity.brain.git import Checkout, clone, init_bare_from
from singularity.brain.loader import BrainSnapshot, EntityDefinition, load_brain
from singularity.errors import ConfigError
from singularity.notify import manifest as notify_manifest
from singularity.startup import StepReport

#: The row fields a load decides; a sync that would change none of them leaves the entity "unchanged".
SYNCED_FIELDS = (
    "kind",
    "path",
    "name",
    "description",
    "body",
    "frontmatter",
    "terms",
    "provenance",
    "schedule",
    "definition_hash",
    "loop_module_hash",
    "pipeline_path",
    "loop_module_path",
    "load_error",
    "present",
    "evaluation_enabled",
    "loop_enabled",
)


@dataclass
class EntityLine:
    target_kind: str
    slug: str
    path: str
    error: str = ""
    created: bool = False
    changed: bool = False

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def label(self) -> str:
        return f"{self.target_kind}:{self.slug}"


@dataclass
class SyncReport:
    commit: str
    entities: list[EntityLine] = field(default_factory=list)
    #: Entities whose file is gone at this commit ("<target kind>:<slug>").
    removed: list[str] = field(default_factory=list)
    #: Brain-wide errors (MANIFEST.yaml, duplicate ids).
    errors: list[str] = field(default_factory=list)
    #: Method files that do not load (an error on that method only).
    method_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and all(line.ok for line in self.entities)

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary for a task result or a log line."""
        return {
            "commit": self.commit,
            "entities": len(self.entities),
            "broken": [line.label for line in self.entities if not line.ok],
            "changed": [line.label for line in self.entities if line.changed],
            "removed": self.removed,
            "errors": self.errors,
        }


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created when missing) for one process at a time on this machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_path(checkout_path: Path) -> Path:
    return checkout_path.parent / f".{checkout_path.name}.lock"


def demo_repository(branch: str | None = None) -> Path:
    """Return the local bare repository made from settings.DEMO_BRAIN_DIR (created under var/ on first use)."""
    branch = branch or settings.BRAIN_BRANCH
    bare = Path(settings.VAR_DIR) / "brain.git"
    if (bare / "HEAD").exists():
        return bare
    source = Path(settings.DEMO_BRAIN_DIR)
    if not source.is_dir():
        raise ConfigError(f"BRAIN_REPO is empty and the bundled demo brain {source} is missing")
    building = bare.with_name(f"{bare.name}.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)
    init_bare_from(source.resolve(), building, branch=branch, message="The demo brain")
    try:
        os.rename(building, bare)
    except OSError:
        # Another process finished first; its repository stands.
        shutil.rmtree(building, ignore_errors=True)
    return bare


def current_checkout() -> Checkout:
    """The engine's clone of the brain at settings.BRAIN_CHECKOUT, cloned on first use.

    The origin is settings.BRAIN_REPO or, when that is empty, the local demo
    repository made from settings.DEMO_BRAIN_DIR.
    """
    path = Path(settings.BRAIN_CHECKOUT)
    branch = settings.BRAIN_BRANCH
    if (path / ".git").exists():
        return Checkout(path=path, branch=branch)
    with _file_lock(_lock_path(path)):
        if (path / ".git").exists():
            return Checkout(path=path, branch=branch)
        if path.exists():
            if any(path.iterdir()):
                raise ConfigError(f"BRAIN_CHECKOUT {path} exists and is not a git clone of the brain")
            path.rmdir()
        origin = settings.BRAIN_REPO or str(demo_repository(branch))
        return clone(origin, path, branch=branch)


def sync_brain(*, checkout: Checkout | None = None) -> SyncReport:
    """Fetch the brain, load its new head and write every entity row; return what happened."""
    checkout = checkout or current_checkout()
    with _file_lock(_lock_path(checkout.path)):
        commit = checkout.fetch()
        snapshot = load_brain(checkout, commit)
    report = write_snapshot(snapshot)
    # Heartbeats and scheduled scenarios run on django-celery-beat: keep its rows in step with the brain.
    from grading.schedules import sync_schedules

    sync_schedules()
    return report


def write_snapshot(snapshot: BrainSnapshot) -> SyncReport:
    """Write the snapshot's entities as rows; mark the rows whose file is gone ``present=False``."""
    report = SyncReport(commit=snapshot.commit, errors=list(snapshot.errors))
    report.method_errors = [m.error for m in snapshot.methods.values() if m.error]
    notify_manifest.sync(snapshot.manifest, snapshot.errors)  # the notify: block (left as it was while refused)
    now = timezone.now()
    with transaction.atomic():
        existing = {(e.target_kind, e.slug): e for e in Entity.objects.select_for_update().order_by("pk")}
        for definition in snapshot.entities:
            row = existing.pop((definition.target_kind, definition.slug), None)
            report.entities.append(_write_entity(row, definition, snapshot.commit, now))
        for row in existing.values():
            if row.present:
                row.present = False
                row.evaluation_enabled = False
                row.loop_enabled = False
                row.synced_at = now
                row.save(update_fields=["present", "evaluation_enabled", "loop_enabled", "synced_at"])
                report.removed.append(str(row))
    return report


def _values(definition: EntityDefinition) -> dict[str, Any]:
    terms = definition.terms if definition.ok else {}
    return {
        "kind": definition.kind,
        "path": definition.path,
        "name": definition.name,
        "description": definition.description,
        "body": definition.body,
        "frontmatter": definition.frontmatter,
        "terms": terms,
        "provenance": definition.provenance if definition.ok else {},
        "schedule": definition.schedule,
        "definition_hash": definition.definition_hash,
        "loop_module_hash": definition.loop_module_hash,
        "pipeline_path": definition.pipeline_path,
        "loop_module_path": definition.loop_module_path,
        "load_error": definition.error,
        "present": True,
        "evaluation_enabled": bool(terms and terms["evaluation"]["enabled"]),
        "loop_enabled": bool(terms and terms["loop"]["enabled"]),
    }


def _write_entity(row: Entity | None, definition: EntityDefinition, commit: str, now: Any) -> EntityLine:
    values = _values(definition)
    line = EntityLine(definition.target_kind, definition.slug, definition.path, error=definition.error)
    if row is None:
        try:
            with transaction.atomic():
                Entity.objects.create(
                    target_kind=definition.target_kind,
                    slug=definition.slug,
                    commit=commit,
                    synced_at=now,
                    created_at=now,
                    **values,
                )
            line.created = line.changed = True
            return line
        except IntegrityError:
            # A sync on another machine created it a moment ago: update that row instead.
            row = Entity.objects.select_for_update().get(target_kind=definition.target_kind, slug=definition.slug)
    line.changed = any(getattr(row, name) != value for name, value in values.items())
    for name, value in values.items():
        setattr(row, name, value)
    row.commit = commit
    row.synced_at = now
    row.save(update_fields=[*values, "commit", "synced_at"])
    return line


def sync_before_up() -> StepReport:
    """Sync the brain for ``manage.py up`` (registered in ``GradingConfig.ready``); return what to show of it.

    The message counts the entities loaded; each broken entity and brain-wide error is a problem.
    """
    report = sync_brain()
    broken = [line for line in report.entities if not line.ok]
    loaded = len(report.entities) - len(broken)
    return StepReport(
        message=f"Brain at {report.commit[:12]}: {loaded} entities loaded",
        ok=not broken,
        problems=tuple(
            [f"{line.label} ({line.path}): {line.error}" for line in broken] + [f"brain: {e}" for e in report.errors]
        ),
    )
