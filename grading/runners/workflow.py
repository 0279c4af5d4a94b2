"""A workflow scenario's run: its body as the system prompt, its tasks in order, each an agent conversation.

With ``tasks:`` in the frontmatter every task is its own conversation: the
task's prompt, the results of the tasks before it, and the input. Without
tasks the run is one conversation with the input. Input keys starting with
"_" are labels for grading and never reach the agent. The output is
``{"result": <final text>, "tasks": {<id>: <text>}}``.
"""

from __future__ import annotations

from typing import Any

from grading.models import Entity
from grading.runners.context import RunFailed, RunRecorder, hide_labels, input_text


def tasks_of(entity: Entity) -> list[dict[str, str]]:
    """Return the scenario's ``tasks:`` as [{"id", "prompt"}], or raise ``RunFailed`` naming what is wrong."""
    tasks = (entity.frontmatter or {}).get("tasks") or []
    if not isinstance(tasks, list):
        raise RunFailed(f"{entity}: tasks: expected a list of {{id, prompt}}")
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not isinstance(task.get("prompt"), str):
            raise RunFailed(f"{entity}: tasks[{index}]: expected {{id: text, prompt: text}}")
        if task["id"] in seen:
            raise RunFailed(f"{entity}: tasks[{index}].id: {task['id']!r} is used twice")
        seen.add(task["id"])
    return [{"id": task["id"], "prompt": task["prompt"]} for task in tasks]


def task_message(prompt: str, earlier: dict[str, str], visible_input: dict[str, Any]) -> str:
    """Return the user message of one task: its prompt, the earlier tasks' results, the input."""
    parts = [prompt.strip()]
    if earlier:
        parts.append("Results of the earlier tasks:\n" + "\n\n".join(f"[{k}]\n{v}" for k, v in earlier.items()))
    parts.append(input_text(visible_input))
    return "\n\n".join(parts)


def run_workflow(entity: Entity, recorder: RunRecorder, run_input: dict[str, Any]) -> dict[str, Any]:
    """Run the scenario's conversations in order and return the output; raise ``RunFailed`` or ``UpstreamError``."""
    visible = hide_labels(run_input)
    system = entity.body.strip() or None
    tasks = tasks_of(entity)
    if not tasks:
        return {"result": recorder.converse(input_text(visible), system=system), "tasks": {}}
    results: dict[str, str] = {}
    for task in tasks:
        recorder.task = task["id"]
        results[task["id"]] = recorder.converse(task_message(task["prompt"], results, visible), system=system)
    recorder.task = ""
    return {"result": results[tasks[-1]["id"]], "tasks": results}
