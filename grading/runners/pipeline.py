"""A pipeline scenario's invocation: ``<id>.pipeline.py`` imported at the entity's commit, ``run(ctx, input)``.

The module is built from the file's bytes at the commit the entity was
loaded from (never the working tree), so an invocation runs the code its
``definition_hash`` names. ``run`` gets a ``PipelineContext`` and the input
without its "_" label keys, and returns a JSON object: the output. Anything
it raises fails the execution with the error and where in the brain's code
it was raised.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from django.conf import settings

from grading.models import Entity
from grading.runners.context import PipelineContext, RunFailed, RunRecorder, hide_labels
from singularity.brain import deadline
from singularity.brain.git import Checkout
from singularity.brain.modules import BrainModuleError, load_at

#: How many of the brain's own frames an error keeps.
TRACEBACK_FRAMES = 5


def default_checkout() -> Checkout:
    """Return the engine's brain checkout (``grading.sync.current_checkout``)."""
    from grading.sync import current_checkout

    return current_checkout()


def error_summary(exc: BaseException) -> str:
    """Return ``Type: message`` and the last few frames that are the brain's own code (``<brain>/…``)."""
    from singularity.brain.sandbox import SandboxError

    if isinstance(exc, SandboxError):
        return str(exc)  # the sandbox's own sentence names the file and what it did
    # Raised in the sandbox, the brain's frames come with the exception (``brain_frames``); raised here, they are
    # read off its traceback.
    frames = getattr(exc, "brain_frames", None) or [
        (frame.filename, frame.lineno, frame.name)
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename.startswith("<brain>/")
    ]
    lines = [f"{type(exc).__name__}: {exc}"]
    lines += [f"  at {frame[0][len('<brain>/') :]}:{frame[1]} in {frame[2]}" for frame in frames[-TRACEBACK_FRAMES:]]
    return "\n".join(lines)


def params_of(entity: Entity) -> dict[str, Any]:
    """Return the scenario's ``params:`` (empty when absent); ``RunFailed`` when it is not a mapping."""
    params = (entity.frontmatter or {}).get("params")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RunFailed(f"{entity}: params: expected a mapping, got {type(params).__name__}")
    return params


def run_pipeline(
    entity: Entity, recorder: RunRecorder, run_input: dict[str, Any], *, checkout: Checkout | None = None
) -> dict[str, Any]:
    """Import the pipeline at the entity's commit, call ``run(ctx, input)`` and return its dict.

    Raises ``RunFailed`` when the module cannot be imported, has no ``run``,
    raises, or returns something that is not a JSON object.
    """
    if not entity.pipeline_path:
        raise RunFailed(f"{entity}: no <id>.pipeline.py beside the scenario")
    if not entity.commit:
        raise RunFailed(f"{entity}: no commit recorded: sync the brain first")
    try:
        brain_module = load_at(checkout or default_checkout(), entity.commit, entity.pipeline_path)
    except BrainModuleError as exc:
        raise RunFailed(str(exc)) from exc
    run = getattr(brain_module.module, "run", None)
    if not callable(run):
        raise RunFailed(f"{entity.pipeline_path}: has no module-level run(ctx, input)")
    ctx = PipelineContext(recorder, entity=entity.slug, params=params_of(entity))
    try:
        output = deadline.call(
            run,
            ctx,
            hide_labels(run_input),
            path=entity.pipeline_path,
            name="run",
            seconds=settings.BRAIN_PIPELINE_DEADLINE_SECS,
        )
    except deadline.BrainDeadline as exc:
        raise RunFailed(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the brain's code failing is the run failing, recorded on it
        raise RunFailed(error_summary(exc)) from exc
    if not isinstance(output, dict):
        raise RunFailed(f"{entity.pipeline_path}: run() returned {type(output).__name__}, expected a dict")
    try:
        json.dumps(output)
    except (TypeError, ValueError) as exc:
        raise RunFailed(f"{entity.pipeline_path}: run() returned a dict that is not JSON: {exc}") from exc
    return output
