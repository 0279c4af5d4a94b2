"""A heartbeat's tick: its body is the prompt, there is no input, one agent conversation."""

from __future__ import annotations

from typing import Any

from grading.models import Entity
from grading.runners.context import RunFailed, RunRecorder


def run_heartbeat(entity: Entity, recorder: RunRecorder, run_input: dict[str, Any]) -> dict[str, Any]:
    """Run one tick and return ``{"result": <final text>}``; raise ``RunFailed`` for a heartbeat with no body."""
    prompt = entity.body.strip()
    if not prompt:
        raise RunFailed(f"{entity}: the heartbeat's body is empty: a tick has no instructions")
    return {"result": recorder.converse(prompt)}
