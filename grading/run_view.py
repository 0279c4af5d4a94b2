"""A run as a person judging it reads it: its input, its output, the answer expected of it and the judge's verdicts.

One presentation shared by every place a run is judged — Rate runs' rows, the rating card (web and, as plain
text, Telegram), the decide card's evidence runs and the check's side-by-side pairs — and drawn by one partial,
``grading/partials/run_view.html`` (``render_run_view``). Text is shown as text, anything else as pretty-printed
JSON, and a long value shows its start with the whole behind a "show all" fold.

The expected answer is the one the run's input carries for grading (``EXPECTED_KEYS``: the demo triage's
``_expected`` label, a scenario's or a dataset case's ``expected``): shown apart from the input it came with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.template.loader import get_template
from django.utils.safestring import SafeString

from grading.models import Execution, Grade

#: Input keys that hold the answer a run is graded against, not what the run read (first found wins).
EXPECTED_KEYS = ("_expected", "expected", "expected_output", "expectedOutput")
#: A value longer than this many characters, or than ``LONG_LINES`` lines, is shown cut with a "show all" fold.
LONG_CHARS = 600
LONG_LINES = 12
#: The plain-text form (a Telegram card) cuts the input and the output here.
TEXT_INPUT_CHARS = 600
TEXT_OUTPUT_CHARS = 1500


@dataclass
class Piece:
    """One value of a run's input, output or expected answer, ready to show.

    ``name`` is its key in the run's object ("" for a whole value); ``text`` the value whole (text as it is,
    anything else pretty-printed JSON, ``is_json``); ``short`` its start when ``long``.
    """

    name: str
    text: str
    is_json: bool
    long: bool = False
    short: str = ""

    @property
    def size(self) -> str:
        """How many characters the whole value has, for the "show all" fold: "2,000"."""
        return f"{len(self.text):,}"


@dataclass
class Verdict:
    """One criterion the judge answered: its words, whether it passed, its score, its reasoning and evidence."""

    criterion: str
    scope: str
    passed: bool | None
    score: str
    reasoning: str
    evidence: str

    @property
    def words(self) -> str:
        return {True: "passed", False: "failed"}.get(self.passed, "")  # type: ignore[arg-type]


@dataclass
class RunView:
    """What a person reads of one run where they judge it (``run_view``)."""

    run_id: str
    url: str
    status: str
    input: list[Piece]
    output: list[Piece]
    expected: list[Piece]
    error: str = ""
    verdicts: list[Verdict] = field(default_factory=list)
    feedback: str = ""
    graded: bool = False
    #: The run's trace for ``grading/partials/span_tree.html`` (its contract: ``spans`` and ``totals``).
    spans: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)


def _text_of(value: Any) -> tuple[str, bool]:
    """A value as shown: text as it is; anything else pretty-printed JSON (True when JSON)."""
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=str), True


def _cut(text: str, chars: int = LONG_CHARS, lines: int = LONG_LINES) -> tuple[bool, str]:
    """(Whether ``text`` is long, its start): the first ``lines`` lines, at most ``chars`` characters."""
    kept = "\n".join(text.split("\n")[:lines])[:chars]
    return kept != text, kept.rstrip() + ("…" if kept != text else "")


def piece(name: str, value: Any) -> Piece:
    """``value`` under ``name`` as a ``Piece``."""
    text, is_json = _text_of(value)
    long, short = _cut(text)
    return Piece(name=name, text=text, is_json=is_json, long=long, short=short if long else "")


def pieces(value: Any) -> list[Piece]:
    """A run's input or output as pieces: an object one a key (in its order; empty values left out) — but one text
    under one key is that text alone — anything else one whole; none for nothing (None, an empty object or text)."""
    if _empty(value):
        return []
    if isinstance(value, dict):
        value = {key: item for key, item in value.items() if not _empty(item)}  # a workflow's empty ``tasks``
        if len(value) == 1 and isinstance(next(iter(value.values())), str):
            # One text under one key (a ticket's ``text``, a run's ``result``): the text alone says it.
            return [piece("", next(iter(value.values())))]
        return [piece(str(key), item) for key, item in value.items()]
    return [piece("", value)]


def _empty(value: Any) -> bool:
    """None, or an empty text, object or list."""
    return value is None or (isinstance(value, (str, dict, list)) and not value)


def expected_of(run_input: Any) -> tuple[Any, Any]:
    """(The expected answer the input carries or None, the input without it)."""
    if not isinstance(run_input, dict):
        return None, run_input
    for key in EXPECTED_KEYS:
        if key in run_input and run_input[key] not in (None, ""):
            rest = {k: v for k, v in run_input.items() if k not in EXPECTED_KEYS}
            return run_input[key], rest
    return None, run_input


def _score(value: Any) -> str:
    """A criterion's score for people: at most 3 decimals, no trailing zeros; "" when none."""
    if value is None or isinstance(value, bool):
        return ""
    try:
        number = Decimal(str(value)).quantize(Decimal("0.001"))
    except ArithmeticError:
        return str(value)
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "") else text


def verdicts_of(grade: Grade | None) -> list[Verdict]:
    """The judge's per-criterion verdicts of a graded run (``Grade.criteria``), in the judge's order."""
    if grade is None or grade.status != Grade.Status.GRADED or not isinstance(grade.criteria, list):
        return []
    rows = []
    for item in grade.criteria:
        if not isinstance(item, dict):
            continue
        scope = str(item.get("scope") or "run")
        rows.append(
            Verdict(
                criterion=str(item.get("criterion") or ""),
                scope="" if scope == "run" else scope.replace("task:", "task "),
                passed=item.get("passed") if isinstance(item.get("passed"), bool) else None,
                score=_score(item.get("score")),
                reasoning=str(item.get("reasoning") or ""),
                evidence=str(item.get("evidence") or ""),
            )
        )
    return rows


def spans_of(run: Execution) -> dict[str, Any]:
    """The run's trace as the span tree partial takes it (``grading.spans.page_context``: spans and totals)."""
    from grading.spans import page_context

    return page_context(run.trace if isinstance(run.trace, list) else [])


def run_view(run: Execution, grade: Grade | None = None) -> RunView:
    """What a person reads of ``run`` (with ``grade``, its judge's verdicts, when given or read with the run)."""
    if grade is None:  # read with the run (select_related), else not read here
        grade = run._state.fields_cache.get("grade")
    expected, run_input = expected_of(run.input)
    return RunView(
        run_id=str(run.pk),
        url=run.get_absolute_url(),
        status=run.status,
        input=pieces(run_input),
        output=pieces(run.output),
        expected=[] if expected is None else [piece("", expected)],
        error=run.error or "",
        verdicts=verdicts_of(grade),
        feedback=(grade.feedback if grade is not None and grade.status == Grade.Status.GRADED else "") or "",
        graded=grade is not None and grade.status == Grade.Status.GRADED,
        **spans_of(run),
    )


def render_run_view(view: RunView, *, trace: bool = True) -> SafeString:
    """``view`` drawn by ``grading/partials/run_view.html`` (``trace``: with its span tree when it has spans)."""
    return get_template("grading/partials/run_view.html").render({"view": view, "trace": trace})


def as_text(value: Any, limit: int) -> str:
    """A run's input or output as plain text, cut at ``limit`` characters and saying so ("" for nothing).

    Each key of an object on its own line ("text: …"); a value that is JSON under its key on the lines after.
    """
    lines = []
    for p in pieces(value):
        if not p.name:
            lines.append(p.text)
        elif p.is_json:
            lines.append(f"{p.name}:\n{p.text}")
        else:
            lines.append(f"{p.name}: {p.text}")
    text = "\n".join(lines)
    if len(text) > limit:
        return text[:limit].rstrip() + f"\n… (cut at {limit:,} characters)"
    return text
