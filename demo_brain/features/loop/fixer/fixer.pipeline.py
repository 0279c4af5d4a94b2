"""The demo brain's proposer pipeline: teach a keyword-rule scenario the words its bad runs used.

The loop calls ``run(ctx, brief)`` with the proposer brief (the entity's
definition, its graded runs bad ones first, the lessons of earlier rounds).
For every bad run whose input carries its right label (``_expected``), it
picks one distinctive word of the ticket that no rule names and adds it to
the rule of that label — or, when a rule of another label fired first, to a
new rule placed just above that one. A word is never added when it would
relabel a run the brief shows as right, or when a person turned it down in
an earlier round. The answer is the scenario's whole new file with its
frontmatter byte for byte as it was; None when no run is bad or nothing can
be learnt.

It writes nothing anywhere, so a loop-launched invocation (``ctx.loop_launched``)
needs no different path. (Plain classes, no dataclasses: the engine builds a
brain module outside ``sys.modules``, where a dataclass cannot read its fields.)
"""

from __future__ import annotations

import re
from typing import Any

RULES_HEADING = re.compile(r"^##\s+Rules\s*$")
ANY_HEADING = re.compile(r"^#{1,6}\s")
RULE_LINE = re.compile(r"^(?P<lead>\s*[-*]\s+)(?P<keywords>.+?)\s*(?P<arrow>->|→)\s*(?P<label>\S(?:.*\S)?)\s*$")
WORD = re.compile(r"[a-z][a-z0-9]*(?:[-'][a-z0-9]+)*")
QUOTED = re.compile(r"'([^']+)'")
MIN_WORD = 4

#: Words that say nothing about a ticket's kind.
_STOPWORDS_TEXT = """
    about above after again against also always another anyone anything around asked away back been before
    being below between both cannot can't could didn't does doesn't doing done don't down during each either
    else even ever every from further have haven't having hello here hers herself himself how's i'd i'll i'm
    into isn't it's itself just keep keeps know last like made make many maybe might more most much must
    myself need needs never next none nothing only other ought ours ourselves over own please same seems
    should shouldn't since some someone something still such sure than thank thanks that that's their
    theirs them themselves then there there's these they they're thing things this those though through
    time times today together tomorrow very wasn't week weeks we'll we're were weren't what what's when
    where which while whom whose why would wouldn't yesterday you'd you'll you're your yours yourself
    able already soon quick quickly really right well want wanted would like sent send tell told
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


class Rule:
    """One rule line of the ``## Rules`` list: where it is, its keywords and its label."""

    def __init__(self, line: int, keywords: list[str], label: str, lead: str, arrow: str) -> None:
        self.line = line
        self.keywords = keywords
        self.label = label
        self.lead = lead
        self.arrow = arrow

    @property
    def otherwise(self) -> bool:
        return self.keywords == ["otherwise"]

    def render(self) -> str:
        return f"{self.lead}{', '.join(self.keywords)} {self.arrow} {self.label}"


def split_frontmatter(text: str) -> tuple[str, str]:
    """Return (the frontmatter block with both fences, the body); ("", text) without a block."""
    if not text.startswith("---\n"):
        return "", text
    end = text.find("\n---\n", 3)
    if end < 0:
        return "", text
    return text[: end + 5], text[end + 5 :]


def read_rules(lines: list[str]) -> list[Rule] | None:
    """Return the rules of the first ``## Rules`` section, in order; None without one."""
    start = next((i for i, line in enumerate(lines) if RULES_HEADING.match(line.rstrip("\r\n"))), None)
    if start is None:
        return None
    rules = []
    for index in range(start + 1, len(lines)):
        text = lines[index].rstrip("\r\n")
        if ANY_HEADING.match(text):
            break
        match = RULE_LINE.match(text)
        if match is None:
            continue
        keywords = [k.strip() for k in match["keywords"].split(",") if k.strip()]
        if keywords:
            rules.append(Rule(index, keywords, match["label"], match["lead"], match["arrow"]))
    return rules


def _matches(keyword: str, text: str) -> bool:
    words = r"\s+".join(re.escape(word) for word in keyword.split())
    return re.search(rf"(?<!\w){words}(?!\w)", text, re.IGNORECASE) is not None


def fired(rules: list[Rule], text: str) -> Rule | None:
    """Return the first rule with a keyword in ``text``; None when only ``otherwise`` applies."""
    for rule in rules:
        if not rule.otherwise and any(_matches(keyword, text) for keyword in rule.keywords):
            return rule
    return None


def label_of(rules: list[Rule], text: str) -> str | None:
    """Return the label the rules give ``text`` (the ``otherwise`` label when none fires)."""
    rule = fired(rules, text)
    if rule is not None:
        return rule.label
    fallback = next((r for r in rules if r.otherwise), None)
    return fallback.label if fallback else None


class Case:
    """A run of the brief as the fixer reads it: the ticket, its right label, and whether the brief calls it bad."""

    def __init__(self, text: str, expected: str, bad: bool) -> None:
        self.text = text
        self.expected = expected
        self.bad = bad


def cases_of(brief: dict[str, Any]) -> list[Case]:
    """Return the brief's runs that carry a ticket and its right label."""
    cases = []
    for run in brief.get("runs") or []:
        data = run.get("input") if isinstance(run, dict) else None
        if not isinstance(data, dict):
            continue
        text, expected = data.get("text"), data.get("_expected")
        if isinstance(text, str) and isinstance(expected, str) and expected.strip():
            cases.append(Case(text, expected.strip().lower(), bool(run.get("bad"))))
    return cases


def turned_down(brief: dict[str, Any]) -> tuple[set[str], list[int]]:
    """Return the words earlier rounds added that a person turned down or that regressed, and those lessons' ids."""
    words: set[str] = set()
    ids: list[int] = []
    for lesson in brief.get("lessons") or []:
        rejection = lesson.get("rejection") or {}
        if rejection.get("kind") == "human" or lesson.get("outcome") == "regressed":
            found = {w.lower() for w in QUOTED.findall(lesson.get("summary") or "")}
            if found:
                words |= found
                ids.append(lesson["id"])
    return words, ids


def worked_before(brief: dict[str, Any], path: str) -> list[int]:
    """Return the ids of validated lessons that changed this file: the approach this round repeats."""
    return [
        lesson["id"]
        for lesson in brief.get("lessons") or []
        if lesson.get("outcome") == "validated" and path in (lesson.get("files") or [])
    ]


def candidates(case: Case, rules: list[Rule], cases: list[Case], avoid: set[str]) -> list[str]:
    """Return the ticket's words worth a rule, most distinctive first.

    A word no rule names, not a stopword, in no ticket of another label in the
    brief; ranked by how many tickets of the same label use it, then length.
    """
    named = {k.lower() for rule in rules for k in rule.keywords}
    others = [c.text.lower() for c in cases if c.expected != case.expected]
    same = [c.text.lower() for c in cases if c.expected == case.expected]
    seen: list[str] = []
    for word in WORD.findall(case.text.lower()):
        word = word.removesuffix("'s")
        if len(word) < MIN_WORD or word in STOPWORDS or word in named or word in avoid or word in seen:
            continue
        if any(_matches(word, text) for text in others):
            continue
        seen.append(word)
    return sorted(seen, key=lambda w: (-sum(_matches(w, t) for t in same), -len(w), seen.index(w)))


def _target(rules: list[Rule], case: Case, wrong: Rule | None) -> Rule | None:
    """The rule of the right label that fires before ``wrong`` (or anywhere, when nothing fired); None for a new rule."""
    limit = rules.index(wrong) if wrong is not None else len(rules)
    return next((r for r in rules[:limit] if r.label == case.expected and not r.otherwise), None)


def _right(rules: list[Rule], cases: list[Case]) -> set[int]:
    return {i for i, c in enumerate(cases) if label_of(rules, c.text) == c.expected}


def teach(lines: list[str], rules: list[Rule], cases: list[Case], avoid: set[str]) -> list[tuple[str, str]]:
    """Add one word per bad case the rules get wrong, in place; return the (word, label) pairs added."""
    added: list[tuple[str, str]] = []
    for case in cases:
        if not case.bad or label_of(rules, case.text) == case.expected:
            continue
        before = _right(rules, cases)
        for word in candidates(case, rules, cases, avoid):
            trial = _with_word(lines, rules, case, word)
            if trial is None:
                continue
            new_lines, new_rules = trial
            now_right = _right(new_rules, cases)
            if before <= now_right and label_of(new_rules, case.text) == case.expected:
                lines[:], rules[:] = new_lines, new_rules
                added.append((word, case.expected))
                break
    return added


def _with_word(lines: list[str], rules: list[Rule], case: Case, word: str) -> tuple[list[str], list[Rule]] | None:
    """Return the lines and rules with ``word`` taught for ``case``; None when there is no place to put it."""
    new_lines = list(lines)
    wrong = fired(rules, case.text)
    target = _target(rules, case, wrong)
    if target is not None:
        ending = lines[target.line][len(lines[target.line].rstrip("\r\n")) :]
        updated = Rule(target.line, [*target.keywords, word], target.label, target.lead, target.arrow)
        new_lines[target.line] = updated.render() + ending
    else:
        anchor = wrong or next((r for r in rules if r.otherwise), None)
        if anchor is None:
            return None
        ending = lines[anchor.line][len(lines[anchor.line].rstrip("\r\n")) :] or "\n"
        new_lines.insert(
            anchor.line, Rule(anchor.line, [word], case.expected, anchor.lead, anchor.arrow).render() + ending
        )
    new_rules = read_rules(new_lines)
    return (new_lines, new_rules) if new_rules is not None else None


def run(ctx: Any, brief: dict[str, Any]) -> dict[str, Any] | None:
    """Return {summary, hypothesis, files: [the scenario's whole new file], citedLessons}; None when nothing is to be learnt."""
    definition = brief.get("definition") or {}
    path, text = definition.get("path"), definition.get("content")
    if not isinstance(path, str) or not isinstance(text, str):
        return None
    cases = cases_of(brief)
    if not any(c.bad for c in cases):
        return None
    head, body = split_frontmatter(text)
    lines = body.splitlines(keepends=True)
    rules = read_rules(lines)
    if rules is None:
        return None
    avoid, declined_ids = turned_down(brief)
    added = teach(lines, rules, cases, avoid)
    if not added:
        return None
    if ctx is not None and hasattr(ctx, "log"):
        ctx.log("taught " + ", ".join(f"{word} -> {label}" for word, label in added))
    bad = sum(1 for c in cases if c.bad)
    taught = ", ".join(f"'{word}' → {label}" for word, label in added)
    return {
        "summary": f"Teach the triage rules {len(added)} missing keyword{'s' if len(added) != 1 else ''}: {taught}.",
        "hypothesis": (
            f"{len(added)} of the {bad} bad runs in the brief got the wrong label because no rule named a word "
            "they use; one distinctive word of each, added to the rule of its right label, labels them right "
            "and relabels no run the brief shows as right."
        ),
        "files": [{"path": path, "content": head + "".join(lines)}],
        "citedLessons": sorted(set(worked_before(brief, path)) | set(declined_ids)),
    }
