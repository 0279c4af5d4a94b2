"""Entities and a throwaway brain repository for the runner and execution tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grading.models import Entity
from singularity.brain.git import Checkout, clone, git, init_bare_from


def make_entity(slug: str = "triage", kind: str = Entity.Kind.WORKFLOW, **fields: Any) -> Entity:
    """An entity row as the brain sync would write it (no terms needed by the runners)."""
    target_kind = {
        Entity.Kind.WORKFLOW: Entity.TargetKind.SCENARIO,
        Entity.Kind.PIPELINE: Entity.TargetKind.SCENARIO,
        Entity.Kind.HEARTBEAT: Entity.TargetKind.HEARTBEAT,
        Entity.Kind.ROLE: Entity.TargetKind.ROLE,
    }[kind]
    suffix = "heartbeat" if kind == Entity.Kind.HEARTBEAT else "scenario"
    fields.setdefault("path", f"features/{slug}/{slug}.{suffix}.md")
    fields.setdefault("commit", "c" * 40)
    fields.setdefault("definition_hash", "d" * 64)
    return Entity.objects.create(slug=slug, target_kind=target_kind, kind=kind, **fields)


class Brain:
    """A bare brain repository and a checkout of it; ``commit(files)`` adds a commit and returns its id."""

    def __init__(self, root: Path, files: dict[str, str]) -> None:
        source = root / "brain-source"
        for path, text in files.items():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            (source / path).write_text(text, encoding="utf-8")
        self.bare = root / "brain.git"
        init_bare_from(source, self.bare)
        self.checkout: Checkout = clone(str(self.bare), root / "brain-checkout")
        self.first = self.checkout.head()

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for path, text in files.items():
            target = self.checkout.path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        git("add", "--all", ".", cwd=self.checkout.path)
        git("commit", "--quiet", "-m", message, cwd=self.checkout.path)
        return self.checkout.head()
