"""The demo model as the loop's proposer agent (issue 33): it investigates with its tools, then proposes.

Deterministic, like the rest of the demo model. Asked as the proposer (the proposer role's system message and
the read-only tools offered), it answers in turns:

1. it lists the entity's folder and reads its definition (``file_list``, ``file_read``);
2. it queries the entity's graded runs, bad first (``db_query`` over ``ro_runs`` and ``ro_grades``);
3. it proposes the change the demo brain's rule fixer (``features/loop/fixer/fixer.pipeline.py``, bundled with
   the engine) writes from what it read — the file, the queried runs — and from the brief's idea, a person's
   reply and the lessons: a person's words first, one distinctive word of each bad ticket otherwise, never a
   word a person turned down; while the demo driver runs, every third cycle's proposal is hasty (so the
   pre-merge check has a harmful change to close). With nothing to teach it declines (an empty ``files`` and why).

A request that is not the proposer's gets None, and the demo model answers as it otherwise would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from singularity.demo_model import Reply

#: The demo brain's rule fixer, bundled with the engine: how the demo model picks the words it teaches.
_FIXER_PATH = "features/loop/fixer/fixer.pipeline.py"
_FIXER_FILE = Path(__file__).resolve().parent.parent / "demo_brain" / _FIXER_PATH
_FIXER_SCENARIO = _FIXER_FILE.with_name("fixer.scenario.md")

#: The opening words of the engine's proposer role (evolution/prompts/role-proposer.md).
ROLE_OPENING = "You are the proposer of a self-evolving loop."
_DEFINITION = re.compile(r"^### (?P<path>\S+\.(?:scenario|heartbeat|agent)\.md)\s*$", re.MULTILINE)
_TITLE = re.compile(r"^# Propose a change to \S+ (?P<slug>[\w-]+)", re.MULTILINE)


def is_proposer_request(request_json: dict[str, Any]) -> bool:
    """True when the loop asks its proposer agent and offers the tools to investigate with."""
    messages = request_json.get("messages") or []
    system = messages[0].get("content") if messages and isinstance(messages[0], dict) else ""
    return isinstance(system, str) and system.startswith(ROLE_OPENING) and "file_read" in str(request_json)


def _tool_answers(messages: list[Any]) -> dict[str, Any]:
    """What each tool answered so far, by tool name (the last answer of each)."""
    names: dict[str, str] = {}
    answers: dict[str, Any] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = call.get("function", {}).get("name", "")
        if message.get("role") == "tool":
            try:
                answers[names.get(message.get("tool_call_id", ""), "")] = json.loads(message.get("content") or "")
            except ValueError:
                continue
    return answers


def proposer_reply(request_json: dict[str, Any]) -> Reply:
    """The demo proposer's next turn: investigate, then answer one proposal (or decline)."""
    messages = request_json.get("messages") or []
    brief = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"), "") or ""
    offered = {t.get("function", {}).get("name") for t in request_json.get("tools") or [] if isinstance(t, dict)}
    found = _DEFINITION.search(brief)
    if found is None:
        return _answer(None, "The brief names no definition file I can read; nothing to propose.", [])
    path = found["path"]
    title = _TITLE.search(brief)
    slug = title["slug"] if title else path.rsplit("/", 1)[-1].split(".", 1)[0]
    done = _tool_answers(messages)
    if "file_read" not in done and {"file_list", "file_read"} <= offered:
        folder = path.rsplit("/", 1)[0]
        return Reply(tool_calls=[("file_list", {"path": folder}), ("file_read", {"path": path})])
    if "db_query" not in done and "db_query" in offered:
        sql = (
            "SELECT r.run_id, r.input, g.passed FROM ro_runs r JOIN ro_grades g ON g.run_id = r.run_id "
            f"WHERE r.entity = '{slug}' AND r.loop_launched = false AND g.status = 'graded' "
            "ORDER BY g.passed, g.graded_at DESC LIMIT 60"
        )
        return Reply(tool_calls=[("db_query", {"sql": sql})])
    text = (done.get("file_read") or {}).get("content")
    rows = (done.get("db_query") or {}).get("rows") or []
    if not isinstance(text, str):
        return _answer(None, f"I could not read {path}; nothing to propose.", [])
    return _propose(path, text, rows, brief)


def _runs(rows: list[Any]) -> list[dict[str, Any]]:
    """The queried runs as the fixer reads a brief's runs: each run's input (a ticket) and whether it was bad."""
    out = []
    for row in rows:
        data = row.get("input") if isinstance(row, dict) else None
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                continue
        if isinstance(data, dict):
            out.append({"input": data, "bad": row.get("passed") in (False, 0)})
    return out


def _document(brief: str, name: str) -> str | None:
    """The text of the brief's document ``name`` (``lessons.json``, ``idea.md``…) as the prompt fences it; None."""
    found = re.search(
        rf"^{re.escape(name)} — (?:(?!\n\n).)*\n\n(?P<fence>`{{3,4}})(?:json|markdown)\n(?P<body>.*?)\n(?P=fence)",
        brief,
        re.MULTILINE | re.DOTALL,
    )
    return found["body"] if found else None


def _json_document(brief: str, name: str) -> Any:
    text = _document(brief, name)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _idea_text(brief: str) -> str:
    """The idea's own words (idea.md without its heading and its "Posted by" line)."""
    text = _document(brief, "idea.md") or ""
    text = re.sub(r"^# Idea\s*\n", "", text.strip())
    return re.sub(r"\n+Posted by [^\n]*$", "", text).strip()


class _Ctx:
    """What the fixer reads of its context: the driver's flag and the fixer's own params."""

    def __init__(self) -> None:
        from django.conf import settings

        self.demo = bool(getattr(settings, "DEMO_DRIVER", False))
        self.params: dict[str, Any] = {}
        head = _FIXER_SCENARIO.read_text(encoding="utf-8") if _FIXER_SCENARIO.exists() else ""
        if head.startswith("---\n"):
            import yaml

            front = yaml.safe_load(head[4 : head.find("\n---\n", 3)]) or {}
            self.params = dict(front.get("params") or {}) if isinstance(front, dict) else {}


def _fixer() -> Any:
    """The bundled demo brain's rule fixer (``features/loop/fixer/fixer.pipeline.py``): the demo model's skill."""
    from singularity.brain.modules import module_from_source

    return module_from_source(_FIXER_PATH, _FIXER_FILE.read_bytes())[0]


def _cycle_id(proposals: Any) -> int:
    """The cycle's id as the brief lets it be seen (the fixer's hasty turn is every third cycle by id): the newest
    earlier round's cycle while that one is live (this is its retry), the next one once it ended; 1 at first."""
    newest = proposals[0] if isinstance(proposals, list) and proposals and isinstance(proposals[0], dict) else {}
    cycle = newest.get("cycle")
    if not isinstance(cycle, int):
        return 1
    return cycle if str(newest.get("ended") or "").startswith("live") else cycle + 1


def _propose(path: str, text: str, rows: list[Any], brief: str) -> Reply:
    """Propose from what was read: the file, the queried runs, and the brief's idea, reply and lessons.

    The words are chosen as the demo brain's fixer chooses them (a person's words first, never a word a person
    turned down, and — while the demo driver runs — every third proposal hasty), over the runs the query found.
    """
    runs = _runs(rows)
    bad = sum(1 for run in runs if run["bad"])
    proposals = _json_document(brief, "proposals.json")
    data = {
        "definition": {"path": path, "content": text},
        "runs": runs,
        "lessons": _json_document(brief, "lessons.json") or [],
        "idea": {"text": _idea_text(brief)} if _document(brief, "idea.md") else None,
        "refinement": _document(brief, "refinement.md"),
        "cycle": {"id": _cycle_id(proposals)},
    }
    answer = _fixer().run(_Ctx(), data)
    if not answer:
        why = f"the query found {bad} bad run(s) and no word of theirs I could add without breaking another"
        return _answer(None, f"Nothing to propose: {why}.", [])
    summary = f"{answer['summary']} (Read {path} and the {len(runs)} graded run(s) the query found, {bad} bad.)"
    return Reply(content=json.dumps({**answer, "summary": summary}))


def _answer(change: dict[str, Any] | None, summary: str, cited: list[int], hypothesis: str = "") -> Reply:
    body = {"summary": summary, "hypothesis": hypothesis, "files": [change] if change else [], "citedLessons": cited}
    return Reply(content=json.dumps(body))
