"""The loop's prompts as instruction modules (seed 003, "Overriding the prompts"): which exist, where the engine's
template and the brain's copy live, who reads each, and which placeholders the loop fills in it.

Every file the engine ships for the loop is the module ``loop/<its path without .md>``; a brain overrides one by a
copy at ``constitution/Loop/<path>.md``. A path the engine does not ship is no module. A copy naming a placeholder
the loop does not fill in that brief would reach the agent verbatim, so it is refused at write
(``evolution.steering.instructions``), by the brief (``evolution.loop.brief``) and by the doctor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_EVOLUTION = Path(__file__).resolve().parent.parent
_GRADING = _EVOLUTION.parent / "grading"

#: What every proposer brief fills (``evolution.loop.brief._prompt``; a test keeps the two the same).
BRIEF_PLACEHOLDERS = frozenset(
    {
        "entity",
        "definition",
        "runs",
        "proposals",
        "lessons",
        "window",
        "grade",
        "metrics",
        "failures",
        "refinement",
        "maxChangedLines",
        "editablePaths",
    }
)
#: Filled only in the brief an idea cycle reads.
IDEA = "idea"
#: Any ``{{ … }}`` a person may write, so a misspelt or stale name is caught whatever its characters.
ANY_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
BRAIN_DIR = "constitution/Loop"


@dataclass(frozen=True)
class Module:
    """One instruction module: ``loop/<name>``, its engine template, who reads it and when, what it may name."""

    name: str
    engine: Path
    agents: tuple[str, ...]
    when: str
    fills: frozenset[str]

    @property
    def path(self) -> str:
        return f"loop/{self.name}"

    @property
    def brain_path(self) -> str:
        return f"{BRAIN_DIR}/{self.name}.md"


MODULES: dict[str, Module] = {
    module.path: module
    for module in (
        Module(
            "proposer/workflow",
            _EVOLUTION / "prompts" / "proposer" / "workflow.md",
            ("proposer",),
            "the brief of a workflow scenario's cycle under preset repair",
            BRIEF_PLACEHOLDERS,
        ),
        Module(
            "proposer/pipeline",
            _EVOLUTION / "prompts" / "proposer" / "pipeline.md",
            ("proposer",),
            "the brief of a pipeline scenario's cycle under preset repair",
            BRIEF_PLACEHOLDERS,
        ),
        Module(
            "proposer/heartbeat",
            _EVOLUTION / "prompts" / "proposer" / "heartbeat.md",
            ("proposer",),
            "the brief of a heartbeat's cycle under preset repair",
            BRIEF_PLACEHOLDERS,
        ),
        Module(
            "proposer/chat",
            _EVOLUTION / "prompts" / "proposer" / "chat.md",
            ("proposer",),
            "the brief of a chat role's cycle under preset repair",
            BRIEF_PLACEHOLDERS,
        ),
        Module(
            "proposer/evolve",
            _EVOLUTION / "prompts" / "proposer" / "evolve.md",
            ("proposer",),
            "the brief of every cycle under preset evolve, whatever the kind",
            BRIEF_PLACEHOLDERS,
        ),
        Module(
            "proposer/idea",
            _EVOLUTION / "prompts" / "proposer" / "idea.md",
            ("proposer",),
            "the brief of a cycle opened on an idea, whatever the entity",
            BRIEF_PLACEHOLDERS | {IDEA},
        ),
        Module(
            "chat-privacy",
            _GRADING / "chat" / "chat_privacy.md",
            ("proposer", "judge"),
            "appended to every chat role's brief under ## Privacy, and read by the judge of every chat episode",
            frozenset(),
        ),
    )
}


def module_at(brain_path: str) -> Module | None:
    """The module a brain file at ``brain_path`` overrides, or None when it is at no module's path."""
    return next((m for m in MODULES.values() if m.brain_path == brain_path), None)


def unfilled(module: Module, text: str) -> list[tuple[int, str]]:
    """Each placeholder of ``text`` the loop does not fill in ``module``'s brief: (line number, as written)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in ANY_PLACEHOLDER.finditer(line):
            if match.group(1) not in module.fills:
                found.append((number, match.group(0)))
    return found


def refusal(module: Module, text: str) -> str:
    """Why ``text`` cannot be ``module``'s copy, naming the first unfilled placeholder and its line ("" when none)."""
    found = unfilled(module, text)
    if not found:
        return ""
    number, written = found[0]
    where = f"{module.brain_path} line {number}"
    if written.strip("{} ") == IDEA:
        why = "{{idea}} is filled only in loop/proposer/idea, the one brief an idea cycle reads"
    elif module.fills:
        named = ", ".join("{{" + name + "}}" for name in sorted(module.fills))
        why = f"{written} is a placeholder the loop does not fill in this brief (it fills {named})"
    else:
        why = f"{written} is a placeholder, and the loop fills none in this module"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{where}: {why}; it would reach the agent verbatim{more}"
