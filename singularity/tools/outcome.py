"""The two values every part of the tool layer speaks: a tool's description and a call's outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SUCCESS = "success"
FAILED = "failed"
#: The call may or may not have had its effect (deadline passed, transport broke mid-call).
INDETERMINATE = "indeterminate"


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to the model; ``source`` is ``"builtin"`` or ``"mcp:<server>"``."""

    name: str
    description: str
    parameters: dict[str, Any]
    source: str
    #: Declared read-only (an MCP tool's ``readOnlyHint: true``, or a built-in that only reads).
    read_only: bool = False


@dataclass
class ToolOutcome:
    """What one call produced.

    ``result`` is what the model sees (JSON-able, after the output boundary);
    ``raw`` is the tool's structured result before the boundary, the only
    input revenue is read from, and ``None`` unless the call succeeded.
    """

    name: str
    status: str
    result: Any
    raw: Any
    error: str = ""
    duration_ms: int = 0
    #: Answered without running: a write under a loop-launched run (see ToolCatalogue.call).
    dry_run: bool = False
