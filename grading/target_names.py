"""Target names as the seed spells them (``targetKind`` ∈ scenario | heartbeat | role), and the names one deploy
back read as the entity they named (R5.21): ``workflow`` and ``pipeline`` name a scenario, ``chat`` a role."""

from __future__ import annotations

from grading.models import Entity

#: The names one deploy back, read as the kind they named.
OLD_NAMES = {
    "workflow": Entity.TargetKind.SCENARIO,
    "pipeline": Entity.TargetKind.SCENARIO,
    "chat": Entity.TargetKind.ROLE,
}


def target_kind_named(value: str, *, name: str = "targetKind") -> str:
    """The target kind ``value`` names (an old name read as its kind); ValueError naming ``name`` otherwise."""
    text = str(value).strip()
    if text in Entity.TargetKind.values:
        return text
    if text in OLD_NAMES:
        return str(OLD_NAMES[text])
    raise ValueError(
        f"{name}: {text[:40]!r} is not scenario, heartbeat or role "
        "(workflow, pipeline and chat are read as the scenario or role they named)"
    )
