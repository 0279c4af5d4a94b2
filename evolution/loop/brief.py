"""The proposer's brief: the evidence about one entity as documents, measured and trimmed, and the prompt carrying them.

``build_brief(cycle, round)`` assembles, the same way for every kind of entity
(seed 003, "What the loop does, step by step", item 1):

- ``runs.json`` — ``evidence.runs`` graded runs (never the loop's own
  replays): under repair the newest through the window's newest run, under
  evolve the window's best and worst by the objective; bad runs first by the
  trigger's own rule (``grading.metrics.is_bad``). The tool calls ride along
  only under ``evidence.includeTrace``.
- ``proposals.json`` — the entity's ten most recent rounds, across cycles.
- ``lessons.json`` — ``lessons.maxRecalled`` lessons in recall order.
- ``window.json`` — the cycle's window, its vector and its runs ranked.
- ``grade.json`` (only when one grade opened the cycle), ``metrics.json``
  (when the entity declares metrics), ``refinement.md`` (a person's reply),
  ``failures.json`` (other entities recently failing the anchor's category),
  ``idea.md`` (an idea cycle), and ``definition.md`` (the entity's files).

Everything is measured as characters / 4 against ``evidence.maxTokens``;
over it, every trace goes first, then the oldest runs one at a time. The
definition, window, grade, idea and metrics are never cut. The prompt is the
kind's template (the brain's copy at ``constitution/Loop/proposer/<name>.md``
over the engine's) with its placeholders filled, then
``loop.proposer.instructions`` in two sections. ``data`` is the same evidence
as JSON values: what a proposer pipeline is handed (its ProposerBrief).
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Max
from django.utils import timezone

from evolution.core import prompts
from evolution.loop.steps import Brief
from evolution.models import Cycle, Recall, Round
from grading.metrics import aggregate, is_bad, run_value, specs
from grading.models import Entity, Execution, Grade
from grading.spans import tool_calls
from singularity.brain import defaults as D
from singularity.brain.git import GitError
from singularity.errors import SingularityError

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
#: Where a brain's copy of a proposer prompt lives (the same path as the engine's, under constitution/).
BRAIN_PROMPTS_DIR = "constitution/Loop/proposer"
#: How many of the entity's rounds proposals.json shows.
PROPOSALS_SHOWN = 10
#: How far back failures.json looks for other entities failing the same category.
FAILURES_SINCE = timedelta(days=7)
#: Characters per token, the estimate every ceiling of the loop is measured with.
CHARS_PER_TOKEN = 4
#: The template of each kind of entity (a chat role reads chat.md).
KIND_PROMPT = {"workflow": "workflow", "pipeline": "pipeline", "heartbeat": "heartbeat", "role": "chat"}
#: Documents the prompt drops the line of when they are absent.
OPTIONAL = ("grade", "metrics", "failures", "refinement", "idea")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z]+)\s*\}\}")

BRAIN_HEADING = "## Instructions for every entity of this brain"
ENTITY_HEADING = "## Instructions for this entity"
PRIVACY_HEADING = "## Privacy"


class BriefError(SingularityError):
    """The brief cannot be assembled (a prompt that does not read, an entity with no terms); the message says why."""


# --- Small readers ----------------------------------------------------------------


def _loop(entity: Entity) -> dict[str, Any]:
    """The entity's resolved loop terms, read live, with the engine's blocks for any it lacks."""
    loop = dict(D.LOOP)
    loop.update((entity.terms or {}).get("loop") or {})
    return loop


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def dumps(value: Any) -> str:
    """Return ``value`` as the JSON text of a document (indented; Decimals as strings, instants ISO)."""
    return json.dumps(value, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder)


def estimate_tokens(text: str) -> int:
    """Return the tokens ``text`` is counted as: its characters / 4, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _checkout(checkout: Any | None) -> Any:
    if checkout is not None:
        return checkout
    from grading.sync import current_checkout

    return current_checkout()


def _read_at(entity: Entity, path: str, checkout: Any | None) -> str | None:
    """Return ``path`` as text at the entity's commit; None when the entity has no commit or the file is not there."""
    if not entity.commit:
        return None
    try:
        return _checkout(checkout).read_at(entity.commit, path).decode("utf-8")
    except GitError:
        return None


def prompt_name(cycle: Cycle, entity: Entity) -> str:
    """Return which proposer prompt the cycle reads: idea, else evolve under preset evolve, else the kind's."""
    if cycle.origin == Cycle.Origin.IDEA or cycle.idea_id is not None:
        return "idea"
    if _loop(entity).get("preset") == "evolve":
        return "evolve"
    return KIND_PROMPT.get(entity.kind, "workflow")


def template_for(entity: Entity, name: str, *, checkout: Any | None = None) -> tuple[str, str]:
    """Return (template text, where it came from): the brain's copy at the entity's commit, else the engine's.

    BriefError when the engine ships no such prompt, or the brain's copy names a placeholder the loop does not fill.
    """
    brain_path = f"{BRAIN_PROMPTS_DIR}/{name}.md"
    text = _read_at(entity, brain_path, checkout)
    if text is not None:
        # A copy naming a placeholder the loop does not fill would reach the proposer verbatim (R8.32).
        why = prompts.refusal(prompts.MODULES[f"loop/proposer/{name}"], text)
        if why:
            raise BriefError(why)
        return text, brain_path
    engine = PROMPTS_DIR / "proposer" / f"{name}.md"
    try:
        return engine.read_text(encoding="utf-8"), f"engine:proposer/{name}.md"
    except OSError as exc:
        raise BriefError(f"the engine's proposer prompt proposer/{name}.md cannot be read: {exc}") from exc


# --- The definition -------------------------------------------------------------


def _frontmatter_text(entity: Entity) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(entity.frontmatter or {}, sort_keys=False, allow_unicode=True) + "---\n"


def definition_files(entity: Entity, *, checkout: Any | None = None) -> list[dict[str, str]]:
    """Return the entity's own files as [{path, content}] at its commit: its definition, then its pipeline code.

    Without a commit (or with the file gone from it) the definition is rebuilt
    from the stored frontmatter and body.
    """
    text = _read_at(entity, entity.path, checkout)
    if text is None:
        log.info("brief: %s read from its row (no file at commit %s)", entity, entity.commit[:12] or "none")
        text = _frontmatter_text(entity) + (entity.body or "")
    files = [{"path": entity.path, "content": text}]
    if entity.pipeline_path:
        code = _read_at(entity, entity.pipeline_path, checkout)
        if code is not None:
            files.append({"path": entity.pipeline_path, "content": code})
    return files


def _definition_md(files: list[dict[str, str]]) -> str:
    parts = []
    for item in files:
        fence = "````" if "```" in item["content"] else "```"
        parts.append(f"### {item['path']}\n\n{fence}\n{item['content'].rstrip(chr(10))}\n{fence}")
    return "\n\n".join(parts)


# --- Runs -------------------------------------------------------------------------


def _graded(entity: Entity) -> Any:
    """The entity's graded runs that are its own (the loop's replays are never evidence)."""
    return Grade.objects.filter(
        entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False
    ).select_related("execution", "entity")


def window_grades(cycle: Cycle) -> list[Grade]:
    """Return the graded runs the cycle's window names (``window.runIds``), in the window's order."""
    ids = [str(run_id) for run_id in (cycle.window or {}).get("runIds") or []]
    if not ids:
        return []
    found = {str(g.execution_id): g for g in _graded(cycle.entity).filter(execution_id__in=ids)}
    return [found[run_id] for run_id in ids if run_id in found]


def _newest_bound(cycle: Cycle, grades: list[Grade]) -> datetime | None:
    """The end of the window's newest run (or the window's ``to``); None when the window names neither."""
    ends = [g.execution.completed_at for g in grades if g.execution.completed_at]
    if ends:
        return max(ends)
    to = (cycle.window or {}).get("to")
    if isinstance(to, str):
        from django.utils.dateparse import parse_datetime

        return parse_datetime(to)
    return None


def _objective(terms: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for metric_id, spec in specs(terms).items():
        if spec.get("role") == "objective":
            return metric_id, spec
    return None


def _best_and_worst(grades: list[Grade], terms: dict[str, Any], count: int) -> list[Grade]:
    """Under evolve: the best half (rounded toward the best) and the worst of the rest, by the objective."""
    objective = _objective(terms)
    if objective is None:
        return grades[:count]
    metric_id, spec = objective
    measured = [(g, run_value(g, metric_id)) for g in grades]
    scored = [(g, v) for g, v in measured if v is not None]
    unscored = [g for g, v in measured if v is None]
    scored.sort(key=lambda pair: float(pair[1]), reverse=spec.get("direction", "max") == "max")
    ranked = [g for g, _ in scored] + unscored
    if len(ranked) <= count:
        return ranked
    best = math.ceil(count / 2)
    worst = count - best
    return ranked[:best] + (ranked[-worst:] if worst else [])


def select_runs(cycle: Cycle, count: int) -> list[Grade]:
    """Return the graded runs runs.json is made of, bad ones first (the order is otherwise kept).

    Repair: the ``count`` newest graded runs through the window's newest run,
    newest first. Evolve: the window's best and worst by the objective.
    """
    entity = cycle.entity
    terms = entity.terms or {}
    in_window = window_grades(cycle)
    if count <= 0:
        return []
    if _loop(entity).get("preset") == "evolve" and in_window:
        chosen = _best_and_worst(in_window, terms, count)
    else:
        query = _graded(entity)
        bound = _newest_bound(cycle, in_window)
        if bound is not None:
            query = query.filter(execution__completed_at__lte=bound)
        chosen = list(query.order_by("-execution__completed_at", "-execution__started_at")[:count])
    bad = {g.pk: is_bad(g, terms) for g in chosen}
    return sorted(chosen, key=lambda g: not bad[g.pk])


def _vector(grade: Grade) -> dict[str, Any]:
    """The run's metric vector as the loop reads it (people's ratings over the judge for human-rated metrics)."""
    vector = dict(grade.metrics or {})
    for metric_id in specs(grade.entity.terms):
        value = run_value(grade, metric_id)
        if value is not None:
            vector[metric_id] = value
    return vector


def _tool_calls(execution: Execution) -> list[dict[str, Any]]:
    """The tool calls the engine still holds for the run ([] when none: never invented)."""
    return tool_calls(execution.trace)


def run_record(grade: Grade, *, bad: bool, include_trace: bool) -> dict[str, Any]:
    """Return one run of runs.json: what it got, produced and was judged, and its tool calls when asked."""
    execution = grade.execution
    record: dict[str, Any] = {
        "id": str(execution.pk),
        "runKind": execution.run_kind,
        "status": execution.status,
        "completedAt": _iso(execution.completed_at),
        "bad": bad,
        "passed": grade.passed,
        "score": grade.score,
        "input": execution.input,
        "output": execution.output,
        "error": execution.error,
        "criteria": grade.criteria or [],
        "metrics": _vector(grade),
        "failureCategory": grade.failure_category,
        "feedback": grade.feedback,
    }
    if include_trace:
        record["trace"] = _tool_calls(execution)
    return record


# --- The other documents ---------------------------------------------------------------


def _per_metric(verdict: Any) -> Any:
    return (verdict or {}).get("perMetric") if isinstance(verdict, dict) else None


def proposals_doc(entity: Entity, current: Round) -> list[dict[str, Any]]:
    """Return proposals.json: the entity's ten most recent rounds across cycles (this round left out), newest first."""
    rounds = (
        Round.objects.filter(cycle__entity=entity)
        .exclude(pk=current.pk)
        .select_related("cycle", "parent")
        .order_by("-created_at", "-pk")[:PROPOSALS_SHOWN]
    )
    return [
        {
            "cycle": r.cycle_id,
            "number": r.number,
            "refines": r.parent.number if r.parent_id else None,
            "author": r.author,
            "summary": r.summary,
            "hypothesis": r.hypothesis,
            "status": r.status,
            "ended": r.cycle.status or f"live ({r.cycle.phase})",
            # A round set aside after its Accept is no rejection (issue 31): what set it aside is said apart.
            "rejection": None if r.rejection == Round.Rejection.ASIDE else (r.rejection or None),
            "setAside": r.set_aside or None,
            "note": r.decision_note,
            "files": [f.get("path") for f in r.files or [] if isinstance(f, dict)],
            "pr": {"number": r.pr_number, "url": r.pr_url} if r.pr_number else None,
            "deltas": _per_metric(r.check_verdict),
            "proposedAt": _iso(r.proposed_at),
        }
        for r in rounds
    ]


def _strength(cycle: Cycle) -> str | None:
    from evolution.loop.lessons import strength_of

    return strength_of(cycle)


def lessons_doc(lessons: list[Any]) -> list[dict[str, Any]]:
    """Return lessons.json: each recalled lesson with how its round was turned down, and its verdict's strength."""
    out = []
    for lesson in lessons:
        rnd = lesson.round
        rejection = set_aside = None
        if lesson.rejection == Round.Rejection.ASIDE:
            # Accepted, then set aside (the lock, a hold, a sibling's Accept): never a person's no (issue 31).
            set_aside = {"acceptedBy": rnd.decided_by, "reason": rnd.set_aside}
        elif lesson.rejection:
            rejection = {"kind": lesson.rejection, "by": rnd.decided_by, "note": lesson.note}
        out.append(
            {
                "id": lesson.pk,
                "cycle": lesson.cycle_id,
                "round": rnd.number,
                "outcome": lesson.outcome,
                "strength": _strength(lesson.cycle),
                "summary": lesson.summary,
                "hypothesis": lesson.hypothesis,
                "rejection": rejection,
                "setAside": set_aside,
                "note": lesson.note,
                "perMetric": lesson.per_metric,
                "reason": lesson.reason,
                "files": lesson.files,
                "helpful": lesson.helpful,
                "harmful": lesson.harmful,
                "createdAt": _iso(lesson.created_at),
            }
        )
    return out


def _json_number(value: Any) -> Any:
    from decimal import Decimal

    return str(value) if isinstance(value, Decimal) else value


def window_vector(entity: Entity, grades: list[Grade]) -> dict[str, Any]:
    """Return the window's one vector: each metric's median over its runs (mean for ``aggregate: mean``)."""
    metric_specs = specs(entity.terms or {})
    ids = list(metric_specs)
    for grade in grades:
        ids += [metric_id for metric_id in (grade.metrics or {}) if metric_id not in ids]
    vector: dict[str, Any] = {}
    for metric_id in ids:
        how = (metric_specs.get(metric_id) or {}).get("aggregate") or "median"
        value = aggregate((run_value(g, metric_id) for g in grades), how if how in ("median", "mean") else "median")
        if value is not None:
            vector[metric_id] = _json_number(value)
    return vector


def window_doc(cycle: Cycle) -> dict[str, Any]:
    """Return window.json: the stored window, its vector, and its runs ranked bad first."""
    grades = window_grades(cycle)
    terms = cycle.entity.terms or {}
    ranked = [
        {
            "runId": str(g.execution_id),
            "bad": is_bad(g, terms),
            "passed": g.passed,
            "score": g.score,
            "failureCategory": g.failure_category,
            "completedAt": _iso(g.execution.completed_at),
        }
        for g in grades
    ]
    ranked.sort(key=lambda r: not r["bad"])
    return {**(cycle.window or {}), "vector": window_vector(cycle.entity, grades), "ranked": ranked}


def anchor_grade(cycle: Cycle) -> Grade | None:
    """The grade of the run that opened the cycle; None for a request, a cadence look or an idea."""
    if cycle.anchor_id is None:
        return None
    return Grade.objects.filter(execution_id=cycle.anchor_id).select_related("execution").first()


def grade_doc(grade: Grade) -> dict[str, Any]:
    """Return grade.json: the grade that opened the cycle, whole."""
    return {
        "runId": str(grade.execution_id),
        "status": grade.status,
        "reason": grade.reason,
        "score": grade.score,
        "passed": grade.passed,
        "failureCategory": grade.failure_category,
        "criteria": grade.criteria or [],
        "feedback": grade.feedback,
        "metrics": _vector(grade) if grade.status == Grade.Status.GRADED else dict(grade.metrics or {}),
        "judge": grade.judge or {},
        "error": grade.error,
        "gradedAt": _iso(grade.graded_at),
    }


def declares_metrics(entity: Entity) -> bool:
    """True when a tier of the brain declares a metric for the entity (not only the engine's catalog)."""
    provenance = entity.provenance or {}
    if any(k.startswith("evaluation.metrics.") and v != "engine" for k, v in provenance.items()):
        return True
    return any(not spec.get("catalog") for spec in specs(entity.terms or {}).values())


def failures_doc(entity: Entity, category: str, *, now: datetime) -> list[dict[str, Any]]:
    """Return failures.json: other entities whose grades of the last week failed in ``category``."""
    rows = (
        Grade.objects.filter(
            status=Grade.Status.GRADED,
            failure_category=category,
            graded_at__gte=now - FAILURES_SINCE,
            execution__loop_launched=False,
        )
        .exclude(entity=entity)
        .values("entity_id")
        .annotate(failures=Count("pk"), last=Max("graded_at"))
        .order_by("-last")
    )
    entities = {e.pk: e for e in Entity.objects.filter(pk__in=[row["entity_id"] for row in rows])}
    return [
        {
            "entity": str(entities[row["entity_id"]]),
            "kind": entities[row["entity_id"]].kind,
            "category": category,
            "failures": row["failures"],
            "lastAt": _iso(row["last"]),
        }
        for row in rows
    ]


def idea_doc(cycle: Cycle) -> tuple[str, dict[str, Any]] | None:
    """Return idea.md and its data for an idea cycle (text, author, when); None otherwise."""
    idea = cycle.idea
    if idea is None:
        return None
    when = _iso(idea.created_at)
    text = f"# Idea\n\n{idea.text.strip()}\n\nPosted by {idea.author} at {when}.\n"
    return text, {"id": idea.pk, "text": idea.text, "author": idea.author, "postedAt": when}


# --- The prompt -------------------------------------------------------------------


def _bullet(line: str) -> str:
    text = line.strip()
    if text[:2] in ("- ", "* "):
        text = text[2:].strip()
    return f"- {text}"


def instructions_of(entity: Entity) -> dict[str, list[str]]:
    """Return ``loop.proposer.instructions`` as {brain: [...], entity: [...]} (the resolver keeps both tiers)."""
    raw = (_loop(entity).get("proposer") or {}).get("instructions")
    if isinstance(raw, dict):
        return {
            "brain": [str(x) for x in raw.get("brain") or [] if str(x).strip()],
            "entity": [str(x) for x in raw.get("entity") or [] if str(x).strip()],
        }
    if isinstance(raw, list):
        return {"brain": [], "entity": [str(x) for x in raw if str(x).strip()]}
    return {"brain": [], "entity": []}


def instructions_text(instructions: dict[str, list[str]]) -> str:
    """Return the two instruction sections (a section with no lines is left out); "" when both are empty."""
    sections = []
    for heading, lines in ((BRAIN_HEADING, instructions["brain"]), (ENTITY_HEADING, instructions["entity"])):
        if lines:
            sections.append(heading + "\n\n" + "\n".join(_bullet(line) for line in lines))
    return "\n\n".join(sections)


def _fenced(text: str, language: str = "json") -> str:
    fence = "````" if "```" in text else "```"
    return f"\n\n{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def fill(template: str, values: dict[str, str | None]) -> str:
    """Return ``template`` with its placeholders filled.

    A line naming an optional document that is absent (value None) is
    dropped whole; a placeholder the loop does not fill stays as written.
    """
    lines = []
    for line in template.splitlines(keepends=True):
        names = PLACEHOLDER.findall(line)
        if any(name in values and values[name] is None for name in names):
            continue
        lines.append(PLACEHOLDER.sub(lambda m: _value(m, values), line))
    return "".join(lines)


def _value(match: re.Match[str], values: dict[str, str | None]) -> str:
    value = values.get(match.group(1))
    return match.group(0) if value is None else value


def editable_text(entity: Entity, files: list[dict[str, str]]) -> str:
    """Return the entity's editable surface in words: its own files and ``loop.editablePaths``."""
    own = [item["path"] for item in files]
    extra = [p for p in _loop(entity).get("editablePaths") or [] if p not in own]
    text = ", ".join(own)
    if extra:
        text += "; and under loop.editablePaths: " + ", ".join(extra)
    return text


# --- Assembly -----------------------------------------------------------------------


@dataclass
class _Parts:
    """Everything the brief holds before it is rendered (runs are trimmed in place)."""

    runs: list[dict[str, Any]]
    fixed: dict[str, Any]  # name -> JSON value or text (every document but runs.json)
    definition: list[dict[str, str]]
    template: str
    tail: str  # privacy and instructions, after the template
    entity_label: str
    max_changed_lines: Any
    editable: str


def _documents(parts: _Parts) -> dict[str, str]:
    documents: dict[str, str] = {"runs.json": dumps(parts.runs)}
    for name, value in parts.fixed.items():
        documents[name] = value if name.endswith(".md") else dumps(value)
    documents["definition.md"] = _definition_md(parts.definition)
    return documents


def _prompt(parts: _Parts, documents: dict[str, str]) -> str:
    def doc(name: str) -> str | None:
        text = documents.get(name)
        if text is None:
            return None
        return _fenced(text, "json" if name.endswith(".json") else "markdown")

    values: dict[str, str | None] = {
        "entity": parts.entity_label,
        "definition": "\n\n" + documents["definition.md"],
        "runs": doc("runs.json"),
        "proposals": doc("proposals.json"),
        "lessons": doc("lessons.json"),
        "window": doc("window.json"),
        "grade": doc("grade.json"),
        "metrics": doc("metrics.json"),
        "failures": doc("failures.json"),
        "refinement": doc("refinement.md"),
        "idea": doc("idea.md"),
        "maxChangedLines": str(parts.max_changed_lines),
        "editablePaths": parts.editable,
    }
    prompt = fill(parts.template, values).rstrip("\n")
    return prompt + ("\n\n" + parts.tail if parts.tail else "") + "\n"


def _oldest(runs: list[dict[str, Any]]) -> int:
    """Index of the oldest run (by completedAt; a run with none counts as oldest)."""
    return min(range(len(runs)), key=lambda i: runs[i].get("completedAt") or "")


def _render_within(parts: _Parts, ceiling: int) -> tuple[dict[str, str], str, dict[str, Any]]:
    """Render, cutting every trace and then the oldest runs one at a time while over ``ceiling`` tokens."""
    trimmed: dict[str, Any] = {"traces": False, "runs": []}
    while True:
        documents = _documents(parts)
        prompt = _prompt(parts, documents)
        if estimate_tokens(prompt) <= ceiling:
            return documents, prompt, trimmed
        if any("trace" in run for run in parts.runs):
            for run in parts.runs:
                run.pop("trace", None)
            trimmed["traces"] = True
            continue
        if parts.runs:
            trimmed["runs"].append(parts.runs.pop(_oldest(parts.runs))["id"])
            continue
        return documents, prompt, trimmed


def _tail(entity: Entity, instructions: dict[str, list[str]], checkout: Any | None) -> str:
    """Privacy (a chat role's) then the instruction sections."""
    parts = []
    if entity.kind == Entity.Kind.ROLE:
        from grading.chat.transcript import privacy_rule

        rule = privacy_rule(entity, checkout=checkout)
        if rule:
            parts.append(f"{PRIVACY_HEADING}\n\n{rule}")
    text = instructions_text(instructions)
    if text:
        parts.append(text)
    return "\n\n".join(parts)


def _record_recalls(round: Round, lessons: list[Any]) -> None:
    """Write a Recall row per lesson handed to this round (once each)."""
    for lesson in lessons:
        Recall.objects.get_or_create(lesson=lesson, round=round)


def build_brief(cycle: Cycle, round: Round, *, checkout: Any | None = None, now: datetime | None = None) -> Brief:
    """Assemble the brief for ``round`` of ``cycle``; record the lessons it recalls (Recall rows).

    ``checkout`` defaults to the engine's brain checkout (read only for an
    entity with a commit). Raises BriefError when the prompt cannot be read.
    """
    from evolution.loop.lessons import recall

    now = now or timezone.now()
    entity = cycle.entity
    loop = _loop(entity)
    evidence = {**D.LOOP["evidence"], **(loop.get("evidence") or {})}
    lessons_terms = {**D.LOOP["lessons"], **(loop.get("lessons") or {})}
    include_trace = bool(evidence.get("includeTrace"))

    terms = entity.terms or {}
    chosen = select_runs(cycle, int(evidence.get("runs") or 0))
    runs = [run_record(g, bad=is_bad(g, terms), include_trace=include_trace) for g in chosen]

    recalled = recall(entity, int(lessons_terms.get("maxRecalled") or 0))
    fixed: dict[str, Any] = {
        "proposals.json": proposals_doc(entity, round),
        "lessons.json": lessons_doc(recalled),
        "window.json": window_doc(cycle),
    }
    anchor = anchor_grade(cycle)
    if anchor is not None:
        fixed["grade.json"] = grade_doc(anchor)
    if declares_metrics(entity):
        fixed["metrics.json"] = specs(terms)
    if round.refinement.strip():
        fixed["refinement.md"] = round.refinement
    if anchor is not None and anchor.failure_category:
        failing = failures_doc(entity, anchor.failure_category, now=now)
        if failing:
            fixed["failures.json"] = failing
    idea = idea_doc(cycle)
    if idea is not None:
        fixed["idea.md"] = idea[0]

    definition = definition_files(entity, checkout=checkout)
    name = prompt_name(cycle, entity)
    template, source = template_for(entity, name, checkout=checkout)
    instructions = instructions_of(entity)
    parts = _Parts(
        runs=runs,
        fixed=fixed,
        definition=definition,
        template=template,
        tail=_tail(entity, instructions, checkout),
        entity_label=f"{entity.target_kind} {entity.slug}" + (f" ({entity.name})" if entity.name else ""),
        max_changed_lines=loop.get("maxChangedLines"),
        editable=editable_text(entity, definition),
    )
    documents, prompt, trimmed = _render_within(parts, int(evidence.get("maxTokens") or 0))
    data = brief_data(
        cycle, round, entity, documents, idea[1] if idea else None, definition, instructions, loop, prompt=name
    )
    _record_recalls(round, recalled)
    return Brief(
        documents=documents,
        prompt=prompt,
        data=data,
        evidence_run_ids=[run["id"] for run in parts.runs],
        recalled=[lesson.pk for lesson in recalled],
        tokens=estimate_tokens(prompt),
        template=source,
        trimmed=trimmed,
    )


def brief_data(
    cycle: Cycle,
    round: Round,
    entity: Entity,
    documents: dict[str, str],
    idea: dict[str, Any] | None,
    definition: list[dict[str, str]],
    instructions: dict[str, list[str]],
    loop: dict[str, Any],
    *,
    prompt: str,
) -> dict[str, Any]:
    """Return the ProposerBrief: every document as the value its file serializes, plus who and what it is about."""
    data: dict[str, Any] = {
        "entity": {
            "targetKind": entity.target_kind,
            "id": entity.slug,
            "kind": entity.kind,
            "name": entity.name,
            "path": entity.path,
            "pipelinePath": entity.pipeline_path or None,
        },
        "cycle": {"id": cycle.pk, "origin": cycle.origin, "preset": loop.get("preset"), "brief": prompt},
        "round": {"number": round.number, "refines": round.parent.number if round.parent_id else None},
        "definition": {"path": entity.path, "content": definition[0]["content"], "files": definition},
        "instructions": instructions,
        "maxChangedLines": loop.get("maxChangedLines"),
        "editablePaths": list(loop.get("editablePaths") or []),
        "grade": None,
        "metrics": None,
        "failures": [],
        "refinement": None,
        "idea": idea,
    }
    for name, text in documents.items():
        key = name.rsplit(".", 1)[0]
        if name == "definition.md" or name == "idea.md":
            continue
        data[key] = text if name.endswith(".md") else json.loads(text)
    return data
