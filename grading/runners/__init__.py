"""Running an entity: one execution, started, run by its kind's runner, finished.

``run_entity`` dispatches by kind: a workflow scenario through the agent
loop (``workflow``), a pipeline scenario through its module (``pipeline``), a
heartbeat's tick through the agent loop with no input (``heartbeat``). The
execution is always finished: succeeded with the runner's output, or failed
with the reason — a gateway error, a broken definition, the pipeline's own
exception, the round limit. Cost, trace and tool failures are recorded
either way. A chat role's runs are episodes and are not started here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from grading.executions import finish_execution, start_execution
from grading.models import Entity, Execution
from grading.runners.context import RunFailed, RunRecorder, _Resources
from grading.runners.heartbeat import run_heartbeat
from grading.runners.pipeline import run_pipeline
from grading.runners.workflow import run_workflow
from singularity.brain.git import Checkout
from singularity.errors import ConfigError, UpstreamError

__all__ = ["RunFailed", "run_entity"]

logger = logging.getLogger("grading.runners")

Runner = Callable[..., dict[str, Any]]


def _runner_for(entity: Entity) -> Runner:
    if entity.kind == Entity.Kind.WORKFLOW:
        return run_workflow
    if entity.kind == Entity.Kind.HEARTBEAT:
        return run_heartbeat
    if entity.kind == Entity.Kind.PIPELINE:
        return run_pipeline
    raise ConfigError(f"{entity}: a {entity.kind}'s runs are chat episodes; they are not started as executions")


def check_runnable(entity: Entity, run_input: Any) -> None:
    """Raise ``ConfigError`` naming the entity when it cannot be run with this input."""
    if not entity.present:
        raise ConfigError(f"{entity}: is no longer in the brain")
    if entity.load_error:
        raise ConfigError(f"{entity}: cannot run: its definition failed to load: {entity.load_error}")
    _runner_for(entity)
    if run_input is not None and not isinstance(run_input, dict):
        raise ConfigError(f"{entity}: input: expected a JSON object, got {type(run_input).__name__}")
    if entity.kind == Entity.Kind.HEARTBEAT and run_input:
        raise ConfigError(f"{entity}: input: a heartbeat's tick takes no input")


def run_entity(
    entity: Entity,
    *,
    input: dict[str, Any] | None = None,
    source: str,
    loop_launched: bool = False,
    user: Any = None,
    gateway: Any = None,
    catalogue: Any = None,
    checkout: Checkout | None = None,
    execution: Execution | None = None,
) -> Execution:
    """Run ``entity`` once and return its finished execution.

    ``execution`` is a running row made beforehand (a replay prepared by
    ``grading.replays.prepare``) to run instead of starting a new one.

    ``gateway`` and ``catalogue`` default to the configured ones (made on
    first use, closed at the end); ``checkout`` to the engine's brain
    checkout. Raises ``ConfigError`` before starting anything when the entity
    cannot run or is switched off (``enabled: false``; a loop-launched replay
    still runs); an unexpected exception is recorded on the execution as its
    failure and raised again.
    """
    check_runnable(entity, input)
    if not loop_launched and entity.run_refusal():
        # A replay of the loop's check acts on nothing and is not the entity's run: only those go on.
        raise ConfigError(entity.run_refusal())
    runner = _runner_for(entity)
    if execution is None:
        execution = start_execution(entity, input=input or {}, source=source, loop_launched=loop_launched, user=user)
    resources = _Resources(gateway=gateway, catalogue=catalogue)
    model = (entity.frontmatter or {}).get("model")
    recorder = RunRecorder(execution, resources, model=model if isinstance(model, str) else "")
    extra = {"checkout": checkout} if runner is run_pipeline else {}
    try:
        output = runner(entity, recorder, execution.input, **extra)
    except (RunFailed, ConfigError, UpstreamError) as exc:
        return _finish(execution, recorder, status=Execution.Status.FAILED, error=str(exc))
    except Exception as exc:
        _finish(execution, recorder, status=Execution.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        resources.close()
    return _finish(execution, recorder, status=Execution.Status.SUCCEEDED, output=output)


def _finish(
    execution: Execution, recorder: RunRecorder, *, status: str, output: Any = None, error: str = ""
) -> Execution:
    if error:
        logger.info("%s %s failed: %s", execution.run_kind, execution.pk, error)
    return finish_execution(
        execution,
        status=status,
        output=output,
        error=error,
        cost_usd=recorder.cost,
        tool_failures=recorder.tool_failures,
        trace=recorder.trace,
    )
