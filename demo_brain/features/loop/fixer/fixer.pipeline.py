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

What a person wrote comes first. On a cycle opened on an idea, the idea's
text is read for keywords and the label they belong to — ``refunds,
overcharged, receipt -> billing``, or a sentence naming one of the rules'
labels ("tickets about a refund or a receipt go to billing") — and those
words are what the round teaches; the bad runs are read only when the idea
names nothing the fixer can use, and the summary says so. A refinement (a
person's reply to the card) is read the same way, and words it turns down
("not 'password'", "drop crashes") are left out. The summary says what was
taken from each.

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
#: A clause ``a, b or c -> label`` (or →, =>) of an idea or a reply.
ARROW_CLAUSE = re.compile(r"(?P<keywords>[^.;:!?\n]+?)\s*(?:->|→|=>)\s*['\"“”‘’]?(?P<label>[A-Za-z][\w-]*)")
#: Words a person turns down in a reply: "not 'password'", "drop crashes", "without refund".
TURNED_DOWN = re.compile(
    r"\b(?:not|no|without|drop|remove|never|avoid|instead of)\s+['\"“‘]?(?P<word>[a-z][a-z0-9'-]*)", re.IGNORECASE
)
QUOTED_ANY = re.compile(r"['\"“‘]([^'\"”’]+)['\"”’]")
SENTENCE = re.compile(r"[^.;!?\n]+")
#: Words of a sentence about tickets that say nothing about which ones: never taken as keywords.
_META_TEXT = """
    ticket tickets label labels labelled rule rules route routed routing should goes going sort sorted
    customer customers mention mentions mentioning word words keyword keywords treat treated classify
    mark marked send belong belongs missing wrong issue issues problem problems question questions
    message messages anything everything people person user users idea add added adding teach use using
    instead also please
"""
META = frozenset(_META_TEXT.split())

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


# --- What a person wrote: an idea, a reply ------------------------------------------------------


class Asked:
    """What one text of a person asks for: (word, label) pairs to teach, words to leave out, labels no rule gives."""

    def __init__(self) -> None:
        self.teach: list[tuple[str, str]] = []
        self.avoid: list[str] = []
        self.unknown: list[str] = []

    def add(self, word: str, label: str) -> None:
        if word and (word, label) not in self.teach:
            self.teach.append((word, label))


def _keywords(text: str) -> list[str]:
    """The keywords of a list "a, b or c": each item cleaned of quotes; a phrase keeps its spaces."""
    items = re.split(r",|\bor\b|\band\b|/|\+", text, flags=re.IGNORECASE)
    out = []
    for item in items:
        word = item.strip().strip("'\"“”‘’`").strip().lower()
        word = re.sub(r"^(?:use|add|teach|also|words?|keywords?|like|e\.g\.?)\s+", "", word)
        word = " ".join(WORD.findall(word))[:40]
        if word and word not in out:
            out.append(word)
    return out


def _sentence_words(sentence: str, labels: set[str]) -> list[str]:
    """The words of a sentence worth a rule: quoted ones if any, else every distinctive word."""
    quoted = [q.strip().lower() for q in QUOTED_ANY.findall(sentence) if q.strip().lower() not in labels]
    if quoted:
        return quoted
    words = []
    for word in WORD.findall(sentence.lower()):
        word = word.removesuffix("'s")
        if len(word) < MIN_WORD or word in STOPWORDS or word in META or word in labels or word in words:
            continue
        words.append(word)
    return words


def read_asked(text: str, labels: list[str]) -> Asked:
    """Read ``text`` (an idea, a reply) for the keywords and labels it names and the words it turns down."""
    asked = Asked()
    known = {label.lower() for label in labels}
    for match in TURNED_DOWN.finditer(text):
        word = match["word"].lower().strip("'")
        if word not in known and word not in STOPWORDS and word not in asked.avoid:
            asked.avoid.append(word)
    rest = text
    for clause in ARROW_CLAUSE.finditer(text):
        label = clause["label"].lower()
        if label not in known:
            if label not in asked.unknown:
                asked.unknown.append(label)
        else:
            keywords = clause["keywords"]
            keywords = re.split(r"\b(?:use|add|teach|instead)\b|[—–]", keywords)[-1]
            for word in _keywords(keywords):
                if word not in asked.avoid and word not in known:
                    asked.add(word, label)
        rest = rest.replace(clause.group(0), " ")
    for sentence in SENTENCE.findall(rest):
        named = [label for label in labels if re.search(rf"(?<!\w){re.escape(label)}(?!\w)", sentence, re.IGNORECASE)]
        if len(named) != 1:
            continue
        for word in _sentence_words(sentence, known):
            if word not in asked.avoid:
                asked.add(word, named[0].lower())
    return asked


def teach_asked(lines: list[str], rules: list[Rule], asked: Asked) -> tuple[list[tuple[str, str]], list[str]]:
    """Teach each (word, label) a person asked for, in place; return (what was added, words a rule already gives)."""
    added: list[tuple[str, str]] = []
    already: list[str] = []
    for word, label in asked.teach:
        if label_of(rules, word) == label and fired(rules, word) is not None:
            already.append(word)
            continue
        trial = _with_word(lines, rules, Case(word, label, True), word)
        if trial is None:
            continue
        lines[:], rules[:] = trial
        added.append((word, label))
    return added, already


def _pairs(added: list[tuple[str, str]]) -> str:
    """Words grouped by label, in the order taught: "'a', 'b' → billing; 'c' → technical"."""
    by_label: dict[str, list[str]] = {}
    for word, label in added:
        by_label.setdefault(label, []).append(f"'{word}'")
    return "; ".join(f"{', '.join(words)} → {label}" for label, words in by_label.items())


def _taken(who: str, added: list[tuple[str, str]], asked: Asked, already: list[str]) -> str:
    """One sentence saying what was taken from a person's text."""
    parts = []
    if added:
        parts.append(_pairs(added))
    if already:
        parts.append("already there: " + ", ".join(f"'{w}'" for w in already))
    if asked.avoid:
        parts.append("left out " + ", ".join(f"'{w}'" for w in asked.avoid))
    for label in asked.unknown:
        parts.append(f"'{label}' is not a label of these rules")
    return f"From {who}: " + "; ".join(parts) + "." if parts else ""


def _quote(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def hasty(lines: list[str], rules: list[Rule], cases: list[Case]) -> tuple[str, str] | None:
    """The demo's hasty proposal for the first bad run, with none of the checks ``teach`` makes.

    When no rule named the run's words (it fell through to ``otherwise``), the fallback itself is pointed at
    the run's label — it fixes that run and misroutes every ticket no rule names. Otherwise the run's word most
    used by other labels' tickets is taught above every rule. Either fixes the bad run and breaks others: the
    change the pre-merge check exists to close. Returns (what it did, the label) or None.
    """
    bad = next((c for c in cases if c.bad and label_of(rules, c.text) != c.expected), None)
    if bad is None or not rules:
        return None
    fallback = next((r for r in rules if r.otherwise), None)
    if fallback is not None and fired(rules, bad.text) is None:
        fallback.label = bad.expected
        lines[fallback.line] = fallback.render() + "\n"
        return f"every ticket no rule names goes to {bad.expected}", bad.expected
    named = {k.lower() for rule in rules for k in rule.keywords}
    words = [w for w in dict.fromkeys(WORD.findall(bad.text.lower())) if len(w) >= MIN_WORD and w not in named]
    if not words:
        return None
    others = [c.text.lower() for c in cases if c.expected != bad.expected]
    word = max(words, key=lambda w: (sum(_matches(w, text) for text in others), -words.index(w)))
    first = rules[0]
    lines.insert(first.line, f"{first.lead}{word} {first.arrow} {bad.expected}\n")
    return f"'{word}' → {bad.expected}, placed first", bad.expected


def run(ctx: Any, brief: dict[str, Any]) -> dict[str, Any] | None:
    """Return {summary, hypothesis, files: [the scenario's whole new file], citedLessons}; None when nothing is to be learnt."""
    definition = brief.get("definition") or {}
    path, text = definition.get("path"), definition.get("content")
    if not isinstance(path, str) or not isinstance(text, str):
        return None
    cases = cases_of(brief)
    head, body = split_frontmatter(text)
    lines = body.splitlines(keepends=True)
    rules = read_rules(lines)
    if rules is None:
        return None
    labels = list(dict.fromkeys(rule.label for rule in rules))
    avoid, declined_ids = turned_down(brief)
    said: list[str] = []
    hypotheses: list[str] = []
    from_people: list[tuple[str, str]] = []

    idea = brief.get("idea") if isinstance(brief.get("idea"), dict) else None
    idea_text = idea.get("text") if idea and isinstance(idea.get("text"), str) else ""
    reply = brief.get("refinement") if isinstance(brief.get("refinement"), str) else ""
    # A reply overrules the idea it refines: what it turns down is left out of both.
    texts = [
        (who, written, read_asked(written, labels)) for who, written in (("the idea", idea_text), ("your reply", reply))
    ]
    for _, _, asked in texts:
        avoid |= set(asked.avoid)
    for who, written, asked in texts:
        if not written.strip():
            continue
        asked.teach = [(w, lab) for w, lab in asked.teach if w not in avoid]
        added, already = teach_asked(lines, rules, asked)
        from_people += added
        sentence = _taken(who, added, asked, already)
        if sentence:
            said.append(sentence)
        if added:
            hypotheses.append(
                f"{who[0].upper()}{who[1:]} (“{_quote(written)}”) says tickets using {_pairs(added)}; "
                "adding those words to the rule of that label labels such tickets that way."
            )
    if idea_text.strip() and not from_people:
        said.insert(
            0,
            "I could not read a keyword and a label in the idea (the labels here: "
            f"{', '.join(labels)}; write, say, “refund, receipt -> billing”), so this round reads the bad runs.",
        )

    name = path.rsplit("/", 1)[-1].split(".", 1)[0]
    every = int(((getattr(ctx, "params", None) or {}).get("hastyEvery")) or 0)
    cycle_id = int((brief.get("cycle") or {}).get("id") or 0)
    if getattr(ctx, "demo", False) and every and cycle_id % every == 0 and not from_people and not reply.strip():
        taken = hasty(lines, rules, cases)
        if taken is not None:
            what, label = taken
            return {
                "summary": f"Teach the {name} rules in haste: {what}.",
                "hypothesis": (
                    f"The first bad run should have been {label}; {what} labels it right — and nothing else in the "
                    "brief was looked at."
                ),
                "files": [{"path": path, "content": head + "".join(lines)}],
                "citedLessons": [],
            }

    learnt: list[tuple[str, str]] = []
    if not from_people or not idea_text.strip():
        learnt = teach(lines, rules, cases, avoid | {w for w, _ in from_people})
    if not learnt and not from_people:
        return None
    if learnt:
        bad = sum(1 for c in cases if c.bad)
        taught = ", ".join(f"'{word}' → {label}" for word, label in learnt)
        said.append(f"Teach the {name} rules {len(learnt)} missing keyword{'s' if len(learnt) != 1 else ''}: {taught}.")
        hypotheses.append(
            f"{len(learnt)} of the {bad} bad runs in the brief got the wrong label because no rule named a word "
            "they use; one distinctive word of each, added to the rule of its right label, labels them right "
            "and relabels no run the brief shows as right."
        )
    if ctx is not None and hasattr(ctx, "log"):
        ctx.log("taught " + ", ".join(f"{word} -> {label}" for word, label in from_people + learnt))
    return {
        "summary": " ".join(said),
        "hypothesis": " ".join(hypotheses),
        "files": [{"path": path, "content": head + "".join(lines)}],
        "citedLessons": sorted(set(worked_before(brief, path)) | set(declined_ids)),
    }
