"""The judge an entity's runs would be graded by now, resolved whole — what a cycle pins when it opens (seed 003).

"The judge is pinned to the cycle": the cycle resolves its own judge when it
opens — the model chain, the method file and its hash, the loop module's
hash, the evaluator role's file and grant hash — rather than copying the
snapshot of whichever grade opened it. The snapshot is built exactly as a
grade builds its own (``grading.pin.snapshot``), so a run graded under the
same files compares equal to it. A judge that cannot be resolved (a method
file renamed, a loop module that will not import, an evaluator role that
does not parse) raises ``JudgeUnresolved`` naming the file.
"""

from __future__ import annotations

from typing import Any

from grading.judge import JudgeError, model_for, resolve_role
from grading.methods import MethodError, brain_checkout, method_name, resolve_method
from grading.models import Entity
from grading.pin import snapshot
from singularity.brain.modules import BrainModuleError, load_at
from singularity.errors import ConfigError


class JudgeUnresolved(ConfigError):
    """The entity's judge cannot be resolved now; the message names the file and why."""


def current_judge(entity: Entity, *, checkout: Any | None = None) -> dict[str, str]:
    """Return the judge snapshot the entity's next grade would record; JudgeUnresolved when it cannot be resolved."""
    loop_hash = ""
    try:
        if entity.loop_module_path and entity.commit:
            loop_hash = load_at(brain_checkout(checkout), entity.commit, entity.loop_module_path).sha256
        if method_name(entity) == "none":
            return snapshot(entity, None, loop_hash, "")
        method = resolve_method(entity, checkout=checkout)
        role = resolve_role(entity, checkout=checkout)
    except (BrainModuleError, MethodError, JudgeError) as exc:
        raise JudgeUnresolved(f"judge: {exc}") from exc
    return snapshot(entity, method, loop_hash, role.sha256, model=model_for(entity))
