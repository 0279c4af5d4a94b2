"""The demo model as the loop's proposer agent (issue 33): it investigates with its tools, then proposes.

Deterministic, like the rest of the demo model. Asked as the proposer (the proposer role's system message and
the read-only tools offered), it answers in turns:

1. it lists the entity's folder and reads its definition (``file_list``, ``file_read``);
2. it queries the entity's graded runs, bad first (``db_query`` over ``ro_runs`` and ``ro_grades``);
3. it proposes: for each bad run whose ticket the ``## Rules`` get wrong, one word of the ticket that no rule
   names, that no ticket of another label uses, and that leaves every run it read right that was right —
   added to the rule of the right label (or a new rule above the one that fired wrongly). With nothing to
   teach it declines (an empty ``files`` and why).

A request that is not the proposer's gets None, and the demo model answers as it otherwise would.
"""

from __future__ import annotations

import json
import re
from typing import Any

from singularity.demo_model import Reply, classify, parse_rules

#: The opening words of the engine's proposer role (evolution/prompts/role-proposer.md).
ROLE_OPENING = "You are the proposer of a self-evolving loop."
_DEFINITION = re.compile(r"^### (?P<path>\S+\.(?:scenario|heartbeat|agent)\.md)\s*$", re.MULTILINE)
_TITLE = re.compile(r"^# Propose a change to \S+ (?P<slug>[\w-]+)", re.MULTILINE)
_RULE = re.compile(r"^(?P<lead>\s*[-*]\s+)(?P<keywords>.+?)\s*(?P<arrow>->|→)\s*(?P<label>\S(?:.*\S)?)\s*$")
_WORD = re.compile(r"[a-z][a-z0-9]*(?:[-'][a-z0-9]+)*")
_STOPWORDS_TEXT = """about above after again also always another anyone anything been before being cannot could does doing
    done down each even ever every from have having hello here into just keep know last like made make many
    maybe might more most much must need needs never next nothing only other over please same seems should
    since some someone something still such sure than thank thanks that their them then there these they
    thing things this those though through time today very were what when where which while would your
    able already soon quick quickly really right well want wanted sent send tell told"""
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


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
    return _propose(path, text, _tickets(rows))


def _tickets(rows: list[Any]) -> list[tuple[str, str, bool]]:
    """(ticket text, right label, bad) of each queried run that carries a labelled ticket."""
    out = []
    for row in rows:
        data = row.get("input") if isinstance(row, dict) else None
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                continue
        if isinstance(data, dict) and isinstance(data.get("text"), str) and isinstance(data.get("_expected"), str):
            out.append((data["text"], data["_expected"].strip().lower(), row.get("passed") in (False, 0)))
    return out


def _rules_of(lines: list[str]) -> list[tuple[int, list[str], str]]:
    """(line index, keywords, label) of each rule of the first ``## Rules`` section."""
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Rules"), None)
    if start is None:
        return []
    rules = []
    for index in range(start + 1, len(lines)):
        if lines[index].startswith("#"):
            break
        match = _RULE.match(lines[index])
        if match:
            rules.append((index, [k.strip() for k in match["keywords"].split(",") if k.strip()], match["label"]))
    return rules


def _label(text: str, body: str) -> str | None:
    rules = parse_rules(body)
    return classify(rules, text) if rules else None


def _with_word(lines: list[str], text: str, expected: str, word: str) -> list[str] | None:
    """The lines with ``word`` taught for ``expected``; None when there is no place for it."""
    rules = _rules_of(lines)
    body = "\n".join(lines)
    wrong = _label(text, body)
    firing = next((r for r in rules if r[1] != ["otherwise"] and r[2] == wrong and wrong != expected), None)
    limit = rules.index(firing) if firing else len(rules)
    target = next((r for r in rules[:limit] if r[2] == expected and r[1] != ["otherwise"]), None)
    new = list(lines)
    if target is not None:
        match = _RULE.match(lines[target[0]])
        assert match is not None
        new[target[0]] = f"{match['lead']}{', '.join([*target[1], word])} {match['arrow']} {target[2]}"
        return new
    anchor = firing or next((r for r in rules if r[1] == ["otherwise"]), None)
    if anchor is None:
        return None
    match = _RULE.match(lines[anchor[0]])
    assert match is not None
    new.insert(anchor[0], f"{match['lead']}{word} {match['arrow']} {expected}")
    return new


def _propose(path: str, text: str, tickets: list[tuple[str, str, bool]]) -> Reply:
    head, sep, body = text.partition("\n---\n") if text.startswith("---\n") else ("", "", text)
    prefix = head + sep
    lines = body.split("\n")
    if not _rules_of(lines):
        return _answer(None, f"{path} has no ## Rules list I can change; nothing to propose.", [])

    def right(candidate: list[str]) -> set[int]:
        joined = "\n".join(candidate)
        return {i for i, (t, e, _) in enumerate(tickets) if _label(t, joined) == e}

    added: list[tuple[str, str]] = []
    bad = [(t, e) for t, e, is_bad in tickets if is_bad]
    for ticket, expected in bad:
        if _label(ticket, "\n".join(lines)) == expected:
            continue
        named = {k.lower() for r in _rules_of(lines) for k in r[1]}
        others = [t.lower() for t, e, _ in tickets if e != expected]
        before = right(lines)
        for word in dict.fromkeys(w.removesuffix("'s") for w in _WORD.findall(ticket.lower())):
            if len(word) < 4 or word in _STOPWORDS or word in named:
                continue
            if any(re.search(rf"(?<!\w){re.escape(word)}(?!\w)", other) for other in others):
                continue
            trial = _with_word(lines, ticket, expected, word)
            if trial is None or not before <= right(trial) or _label(ticket, "\n".join(trial)) != expected:
                continue
            lines = trial
            added.append((word, expected))
            break
    if not added:
        why = f"the query found {len(bad)} bad run(s) and no word of theirs I could add without breaking another"
        return _answer(None, f"Nothing to propose: {why}.", [])
    pairs = ", ".join(f"'{word}' → {label}" for word, label in added)
    summary = f"Teach the rules {pairs} (from the {len(bad)} bad run(s) the query found)."
    hypothesis = (
        f"The bad runs' tickets use words no rule names ({', '.join(w for w, _ in added)}), so they fell to the "
        "wrong label; adding each word to its label's rule sends them right and keeps every run read right."
    )
    return _answer({"path": path, "content": prefix + "\n".join(lines)}, summary, [], hypothesis)


def _answer(change: dict[str, Any] | None, summary: str, cited: list[int], hypothesis: str = "") -> Reply:
    body = {"summary": summary, "hypothesis": hypothesis, "files": [change] if change else [], "citedLessons": cited}
    return Reply(content=json.dumps(body))
