"""What a stage answers the machine (settle, fail, move on) and what the brief hands the proposer.

A stage does its work and returns one of these (or None: nothing to do,
keep waiting); only ``evolution.loop.machine`` reads them, moves the cycle
and starts the next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Settle:
    """End the cycle at ``status`` with ``reason`` (the watch's record, if any; lesson False: none is written)."""

    status: str
    reason: str = ""
    watch_verdict: dict[str, Any] | None = None
    lesson: bool = True


@dataclass(frozen=True)
class Fail:
    """The round broke (analysis or apply): a Retry card asks a person, or the cycle closes at once when unattended."""

    error: str
    paths: list[str] | None = None
    unattended: bool = False


@dataclass(frozen=True)
class Move:
    """Move the cycle to ``phase`` (setting ``fields``); the machine starts what that phase does."""

    phase: str
    fields: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None


@dataclass
class Brief:
    """What the proposer is handed: documents by name (JSON text unless ``.md``), the prompt, the same as data."""

    documents: dict[str, str]
    prompt: str
    data: dict[str, Any]
    evidence_run_ids: list[str]
    recalled: list[int]
    tokens: int
    #: Where the prompt's template came from: "engine:proposer/<name>.md" or the brain path.
    template: str = ""
    #: What the ceiling cut: {"traces": bool, "runs": [ids dropped]}.
    trimmed: dict[str, Any] = field(default_factory=dict)
