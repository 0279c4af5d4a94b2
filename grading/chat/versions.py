"""A chat role's version: the hash of what the role DOES, and the text of the skills it names.

The version covers the role's body, its frontmatter without the blocks that
say how it is measured (``evaluation``, ``loop``, ``chat``, ``budget``), and
the ``SKILL.md`` of every skill it names (``skills: [name]`` →
``skills/<name>/SKILL.md`` in the brain at the role's commit). A rubric
edit, a sampling knob or a new idle pause is not a new version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from grading.methods import brain_checkout
from grading.models import Entity
from singularity.brain.git import GitError

#: Frontmatter blocks that say how a role is measured, not what it does.
MEASUREMENT_BLOCKS = frozenset({"evaluation", "loop", "chat", "budget"})


@dataclass(frozen=True)
class RoleVersion:
    """What a turn runs under: the version hash and the named skills' text (None for a skill the brain lacks)."""

    hash: str
    skills: dict[str, str | None]


def skill_path(name: str) -> str:
    return f"skills/{name}/SKILL.md"


def skill_names(frontmatter: dict[str, Any]) -> list[str]:
    """Return the skills a role names, in its order (text entries only, each once)."""
    names = frontmatter.get("skills") or []
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list):
        return []
    seen: list[str] = []
    for name in names:
        if isinstance(name, str) and name.strip() and name.strip() not in seen:
            seen.append(name.strip())
    return seen


def read_skills(entity: Entity, *, checkout: Any | None = None) -> dict[str, str | None]:
    """Return {skill name: its SKILL.md text at the role's commit, or None when the brain has no such file}."""
    names = skill_names(entity.frontmatter or {})
    if not names or not entity.commit:
        return {name: None for name in names}
    repo = brain_checkout(checkout)
    skills: dict[str, str | None] = {}
    for name in names:
        try:
            skills[name] = repo.read_at(entity.commit, skill_path(name)).decode("utf-8", errors="replace")
        except GitError:
            skills[name] = None
    return skills


def version_hash(body: str, frontmatter: dict[str, Any], skills: dict[str, str | None]) -> str:
    """Return the sha256 (hex) of the body, the frontmatter outside the measurement blocks and the skills' text."""
    payload = {
        "body": body,
        "frontmatter": {key: value for key, value in frontmatter.items() if key not in MEASUREMENT_BLOCKS},
        "skills": {name: text for name, text in sorted(skills.items())},
    }
    data = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def role_version(entity: Entity, *, checkout: Any | None = None) -> RoleVersion:
    """Return the role's current version (from its synced row and the brain at its commit)."""
    skills = read_skills(entity, checkout=checkout)
    return RoleVersion(hash=version_hash(entity.body or "", entity.frontmatter or {}, skills), skills=skills)


def system_prompt(entity: Entity, version: RoleVersion) -> str:
    """Return the role's system prompt: its body, then each named skill's SKILL.md under its own heading."""
    parts = [(entity.body or "").strip()]
    for name, text in version.skills.items():
        if text and text.strip():
            parts.append(f"## Skill: {name}\n\n{text.strip()}")
    return "\n\n".join(part for part in parts if part)
