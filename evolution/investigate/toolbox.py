"""The proposer agent's tools as the model is offered them, and each call answered (R8.17: read-only grants).

``for_round(cycle, round, checkout)`` is what ``evolution.loop.proposer`` asks for (registered by
``evolution.hooks``): a ``Toolbox`` with the OpenAI function tools (``specs``), ``call(name, arguments)``
answering JSON text, and ``close``. Nothing here writes: the proposer's editable surface is empty, and a
tool it is not offered (a write, a shell) is answered "no such tool".
"""

from __future__ import annotations

import json
from typing import Any

from evolution.investigate import database, files
from evolution.models import Cycle, Round
from grading.models import Entity


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


SPECS: dict[str, dict[str, Any]] = {
    "file_list": _fn(
        "file_list",
        "List the brain's files under a folder at the cycle's base commit (the judge's files, loop modules and "
        "secrets are hidden).",
        {"path": {"type": "string", "description": "A folder of the brain, e.g. features/support; '' for the root."}},
        [],
    ),
    "file_read": _fn(
        "file_read",
        "Read one file of the brain at the cycle's base commit (never constitution/Evaluation/**, *.loop.py or "
        "secrets).",
        {"path": {"type": "string", "description": "The file's path from the brain's root."}},
        ["path"],
    ),
    "db_schema": _fn("db_schema", "List the read-only views db_query can read, with their columns.", {}, []),
    "db_query": _fn(
        "db_query",
        "Run one SELECT over the ro_* views (runs, grades, spans, ratings, episodes, turns, cycles, rounds, "
        "lessons, ideas); read-only, a few seconds at most, a capped number of rows.",
        {"sql": {"type": "string", "description": "One SELECT statement."}},
        ["sql"],
    ),
    "loop_history": _fn(
        "loop_history",
        "The loop's settled and live cycles of this entity, newest first: outcome, rounds, PR, lessons.",
        {
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "cursor": {"type": "string", "description": "nextCursor of a previous answer."},
        },
        [],
    ),
    "eval_list_episodes": _fn(
        "eval_list_episodes",
        "This chat role's episodes, newest first: shape, ending, grade, metrics (never the words).",
        {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        [],
    ),
    "eval_get_episode": _fn(
        "eval_get_episode",
        "One episode of this chat role with its dialog, every message and tool call in order.",
        {"runId": {"type": "string", "description": "The episode's run id."}},
        ["runId"],
    ),
}

#: The capability each tool stands under (R8.17; R22.21: the episode reads are eval:read).
GRANTS = {
    "file_list": "file:read",
    "file_read": "file:read",
    "db_schema": "db:read",
    "db_query": "db:read",
    "loop_history": "loop:read",
    "eval_list_episodes": "eval:read",
    "eval_get_episode": "eval:read",
}

#: One line a tool, for the brief's "## Your tools".
ABOUT = {name: spec["function"]["description"] for name, spec in SPECS.items()}


def tool_names(entity: Entity) -> list[str]:
    """The tools the proposer agent has for ``entity``: the episode reads only for a chat role."""
    names = ["file_list", "file_read", "db_schema", "db_query", "loop_history"]
    if entity.kind == Entity.Kind.ROLE:
        names += ["eval_list_episodes", "eval_get_episode"]
    return names


class Toolbox:
    """The tools of one round's investigation over the brain at ``commit``."""

    def __init__(self, cycle: Cycle, checkout: Any | None = None) -> None:
        self.cycle = cycle
        self.entity = cycle.entity
        self._checkout = checkout
        self._commit: str | None = None
        self.names = tool_names(self.entity)
        self.reader = database.Reader()

    @property
    def checkout(self) -> Any:
        """The brain's clone (the engine's unless one was given), found on the first file read."""
        if self._checkout is None:
            from grading.sync import current_checkout

            self._checkout = current_checkout()
        return self._checkout

    @property
    def commit(self) -> str:
        """The commit every file read is at: the cycle's base (``base_commit``)."""
        if self._commit is None:
            self._commit = base_commit(self.cycle, self.checkout)
        return self._commit

    def narrow(self, capabilities: tuple[str, ...]) -> None:
        """Keep only the tools the role's declared capabilities grant ('*' widens nothing: the tools only read)."""
        granted = set(capabilities)
        if "*" in granted:
            return
        self.names = [name for name in self.names if GRANTS[name] in granted]

    @property
    def specs(self) -> list[dict[str, Any]]:
        return [SPECS[name] for name in self.names]

    def close(self) -> None:
        self.reader.close()

    def brief_section(self) -> str:
        """The brief's "## Your tools": what the proposer can read, one line a tool."""
        lines = [f"- `{name}`: {ABOUT[name]}" for name in self.names]
        return (
            "## Your tools\n\nBefore you answer you may read, read-only (the brain's files as of the cycle's "
            "base commit):\n\n" + "\n".join(lines) + "\n\nCall them as tools; when you know enough, "
            "answer with the JSON object alone."
        )

    def call(self, name: str, arguments: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Answer one tool call: (the answer as the model reads it, the arguments as read) — never raises on input."""
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return {"error": f"the arguments are not JSON ({exc.msg})"}, {"raw": (arguments or "")[:500]}
        if not isinstance(args, dict):
            return {"error": "the arguments are not a JSON object"}, {"raw": (arguments or "")[:500]}
        if name not in self.names:
            offered = ", ".join(self.names)
            return {"refused": f"no such tool {name!r}: the proposer only reads ({offered})"}, args
        try:
            return self._answer(name, args), args
        except ValueError as exc:
            return {"error": str(exc)}, args

    def _answer(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "file_list":
            return files.file_list(self.checkout, self.commit, args.get("path", ""))
        if name == "file_read":
            return files.file_read(self.checkout, self.commit, args.get("path"))
        if name == "db_schema":
            return self.reader.schema()
        if name == "db_query":
            return self.reader.query(args.get("sql"))
        if name == "loop_history":
            from evolution.reads.history import history

            return history(
                self.entity.target_kind, self.entity.slug, limit=args.get("limit", 20), cursor=args.get("cursor")
            )
        if name == "eval_list_episodes":
            return _episodes(self.entity, args.get("limit", 20))
        return _episode(self.entity, args.get("runId"))


def _episodes(role: Entity, limit: Any) -> dict[str, Any]:
    from grading.chat.shape import episodes_of, rows
    from singularity.apikit.pagination import page_size

    if not isinstance(limit, int):
        raise ValueError(f"limit: {limit!r} is not a whole number from 1 to 100")
    return {"episodes": [row.as_dict() for row in rows(list(episodes_of(role)[: page_size(limit)]))]}


def _episode(role: Entity, run_id: Any) -> dict[str, Any]:
    import uuid

    from grading.chat.shape import episodes_of, rows

    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        raise ValueError(f"runId: {run_id!r} is not an episode's run id") from None
    episode = episodes_of(role).filter(pk=key).first()
    if episode is None:
        return {"error": f"runId: {run_id} is no episode of {role.slug}"}
    body = rows([episode])[0].as_dict()
    body["dialog"] = [
        {"seq": t.seq, "role": t.role, "text": t.text, "toolCalls": t.tool_calls, "error": t.error}
        for t in episode.turns.order_by("seq")
    ]
    return body


def base_commit(cycle: Cycle, checkout: Any) -> str:
    """The commit the proposer reads: the cycle's frozen base when the checkout has it, else the entity's commit."""
    from singularity.brain.git import GitError, git

    base = (cycle.frozen or {}).get("baseSha") or ""
    if base:
        try:
            git("cat-file", "-e", f"{base}^{{commit}}", cwd=checkout.path)
            return base
        except GitError:
            pass  # not fetched here yet: the entity's commit is the brain this engine knows
    return cycle.entity.commit or base


def for_round(cycle: Cycle, round: Round, checkout: Any | None) -> Toolbox:
    """The toolbox of ``round``'s investigation (the engine's brain checkout unless one is given)."""
    return Toolbox(cycle, checkout)
