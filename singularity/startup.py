"""What ``manage.py up`` does before it starts anything: steps the apps above register in their ``AppConfig.ready``.

singularity knows nothing of the brain's entities: grading registers its
brain sync here, so the dashboard and the demo driver find the entities as
soon as they start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StepReport:
    """What a step says: ``message`` on stdout (shown as a success when ``ok``), each of ``problems`` on stderr."""

    message: str
    ok: bool = True
    problems: tuple[str, ...] = ()


#: A step runs once, before the web server, the worker and beat start; ConfigError or UpstreamError stops ``up``.
Step = Callable[[], StepReport]

_steps: dict[str, Step] = {}


def register(name: str, step: Step) -> None:
    """Run ``step`` at ``manage.py up`` under ``name`` (what its failure is reported as), replacing one of that name."""
    _steps[name] = step


def unregister(name: str) -> None:
    """Forget the step ``name``, if any (for tests)."""
    _steps.pop(name, None)


def steps() -> list[tuple[str, Step]]:
    """Return the registered steps as (name, step), in the order they were registered."""
    return list(_steps.items())
