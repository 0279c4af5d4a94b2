"""The tools a chat role's turn is offered: the MCP catalogue plus the engine tool ``agent_close_episode``.

A role gets ``agent_close_episode`` when its frontmatter grants the
capability ``episode:write`` (no person is asked: it is called mid-reply).
Called with no arguments it ends the episode of the turn it runs in; an
``id`` may only name the role itself, so an id that reached the role through
a message or a tool's output cannot end somebody else's dialog.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from grading.models import Entity
from singularity.tools.outcome import FAILED, SUCCESS, ToolOutcome

CLOSE_TOOL = "agent_close_episode"
CAPABILITY = "episode:write"

CLOSE_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": CLOSE_TOOL,
        "description": (
            "End this dialog now: call it when the dialog is over (the issue is resolved, the person said "
            "goodbye). Called with no arguments it ends the dialog of this turn; finish your reply as usual."
        ),
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "Your own agent id; leave it out."}},
            "additionalProperties": False,
        },
    },
}


def capabilities(entity: Entity) -> set[str]:
    """Return the capabilities the role's frontmatter grants (a list, or one text)."""
    granted = (entity.frontmatter or {}).get("capabilities") or []
    if isinstance(granted, str):
        granted = [granted]
    return (
        {str(item).strip() for item in granted if isinstance(item, str | int)} if isinstance(granted, list) else set()
    )


def may_close(entity: Entity) -> bool:
    """True when the role is granted ``episode:write`` and so is offered ``agent_close_episode``."""
    return CAPABILITY in capabilities(entity)


def _outcome(status: str, result: Any, error: str = "", started: float = 0.0) -> ToolOutcome:
    shown = result if status == SUCCESS else {"error": error}
    outcome = ToolOutcome(CLOSE_TOOL, status, shown, result if status == SUCCESS else None, error=error)
    outcome.duration_ms = int((time.monotonic() - started) * 1000) if started else 0
    return outcome


class TurnTools:
    """The catalogue of one turn: MCP tools (dry under a replay) and, when granted, ``agent_close_episode``.

    ``close()`` ends the turn's episode and returns whether it did (False
    when it had already ended).
    """

    def __init__(self, catalogue: Any, role: Entity, close: Callable[[], bool]) -> None:
        self.catalogue = catalogue
        self.role = role
        self._close = close

    def openai_tools(self) -> list[dict[str, Any]]:
        tools = list(self.catalogue.openai_tools())
        return tools + [CLOSE_SPEC] if may_close(self.role) else tools

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolOutcome:
        """Run one tool call and return its outcome; the close tool never raises for a bad call."""
        if name != CLOSE_TOOL or not may_close(self.role):
            return self.catalogue.call(None, name, arguments)
        started = time.monotonic()
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return _outcome(FAILED, None, f"invalid arguments: not JSON: {exc.msg}", started)
        if not isinstance(arguments, dict) or set(arguments) - {"id"}:
            return _outcome(FAILED, None, "invalid arguments: takes nothing, or {id: <your own agent id>}", started)
        named = arguments.get("id")
        if named not in (None, "", self.role.slug):
            return _outcome(
                FAILED,
                None,
                f"refused: an agent may close only its own episode; you are {self.role.slug!r}, not {named!r}",
                started,
            )
        closed = self._close()
        result = {"closed": closed} if closed else {"closed": False, "reason": "this dialog had already ended"}
        return _outcome(SUCCESS, result, started=started)
