"""The LLM judge: one structured chat completion through the gateway, checked against the shape it was asked for.

The system message is the evaluator role's body (the brain's
``constitution/Agents/system/role-evaluator.md``, else the engine's bundled
``grading/evaluator_role.md``) followed by the method file. The user message
carries the entity's definition, its requirements, the declared judged
metrics with their criteria and scales, and the run. The answer must be JSON
of ``ANSWER_SCHEMA``: prose is "judge: no structured output", JSON of another
shape is "judge: unparseable output". There is no fallback model.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from grading.methods import ResolvedMethod, brain_checkout
from grading.metrics import judge_scale, judged_ids, specs
from grading.models import Entity, Execution
from grading.spans import tool_calls
from singularity.brain.git import GitError
from singularity.brain.modules import sha256
from singularity.errors import ConfigError
from singularity.gateway import Gateway, get_gateway
from singularity.money import debit_for

log = logging.getLogger(__name__)

ROLE_PATH = "constitution/Agents/system/role-evaluator.md"
GENERAL_ROLE_PATH = "constitution/Agents/system/role-general.md"
BUNDLED_ROLE = Path(__file__).resolve().parent / "evaluator_role.md"

NO_STRUCTURED_OUTPUT = "judge: no structured output"
UNPARSEABLE_OUTPUT = "judge: unparseable output"

_FENCED = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)


class JudgeError(ConfigError):
    """The judge's answer cannot be used; the message is what the grade records."""


@dataclass(frozen=True)
class ResolvedRole:
    #: The brain path, or "engine:evaluator_role.md".
    path: str
    #: The role's body: the judge's own part of its system prompt.
    body: str
    #: sha256 over the role file's bytes and the capabilities it resolves to (its grant ∪ role-general's).
    sha256: str


@dataclass(frozen=True)
class JudgeCall:
    content: str | None
    model: str
    cost_usd: Decimal


@dataclass
class Answer:
    criteria: list[dict[str, Any]]
    overall_score: float
    passed: bool
    failure_category: str
    feedback: str
    metrics: dict[str, Any] = field(default_factory=dict)
    tasks: list[dict[str, Any]] = field(default_factory=list)


# --- The evaluator role -----------------------------------------------------


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Return a markdown file's YAML frontmatter (empty when it has none) and its body."""
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n") == "---":
            data = yaml.safe_load("".join(lines[1:index])) or {}
            return (data if isinstance(data, dict) else {}), "".join(lines[index + 1 :])
    return {}, text


def _grant(frontmatter: dict[str, Any]) -> set[str]:
    capabilities = frontmatter.get("capabilities") or []
    return {str(capability) for capability in capabilities} if isinstance(capabilities, list) else set()


def resolve_role(entity: Entity, *, checkout: Any | None = None) -> ResolvedRole:
    """Return the evaluator role the entity's judge runs as, with the hash the grade pins.

    The brain's role file wins over the engine's. The hash covers the role
    file's bytes and its resolved capabilities (the role's grant ∪
    role-general.md's), so a new grant in role-general changes the judge.
    """
    data: bytes | None = None
    general: bytes | None = None
    path = f"engine:{BUNDLED_ROLE.name}"
    if entity.commit:
        repo = brain_checkout(checkout)
        try:
            data = repo.read_at(entity.commit, ROLE_PATH)
            path = ROLE_PATH
        except GitError:
            data = None
        try:
            general = repo.read_at(entity.commit, GENERAL_ROLE_PATH)
        except GitError:
            general = None
    if data is None:
        data = BUNDLED_ROLE.read_bytes()
    try:
        frontmatter, body = split_frontmatter(data.decode("utf-8"))
        general_frontmatter = split_frontmatter(general.decode("utf-8"))[0] if general else {}
    except yaml.YAMLError as exc:
        raise JudgeError(f"judge: evaluator role {path}: frontmatter does not parse: {exc}") from exc
    grant = sorted(_grant(frontmatter) | _grant(general_frontmatter))
    digest = sha256(json.dumps({"role": sha256(data), "grant": grant}, sort_keys=True).encode())
    return ResolvedRole(path=path, body=body.strip(), sha256=digest)


def model_for(entity: Entity) -> str:
    """Return the model chain the entity's judge dispatches under: ``evaluation.modelRef`` or the engine's model."""
    return str(entity.evaluation().get("modelRef") or settings.BRAMA_MODEL)


# --- What the judge is asked -------------------------------------------------


def answer_schema(entity: Entity) -> dict[str, Any]:
    """Return the JSON schema of the answer, with one required property per declared judged metric."""
    metric_ids = judged_ids(entity.terms)
    criterion = {
        "type": "object",
        "properties": {
            "criterion": {"type": "string"},
            "scope": {"type": "string", "description": '"run" or "task:<id>"'},
            "passed": {"type": "boolean"},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "reasoning": {"type": "string"},
            "evidence": {"type": "string"},
        },
        "required": ["criterion", "scope", "passed", "score", "reasoning", "evidence"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "criteria": {"type": "array", "items": criterion},
            "overall_score": {"type": "number", "minimum": 0, "maximum": 1},
            "passed": {"type": "boolean"},
            "failure_category": {"type": "string"},
            "feedback": {"type": "string"},
            "metrics": {
                "type": "object",
                "properties": {metric_id: {"type": "number"} for metric_id in metric_ids},
                "required": metric_ids,
                "additionalProperties": False,
            },
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1}},
                    "required": ["id", "score"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["criteria", "overall_score", "passed", "failure_category", "feedback", "metrics", "tasks"],
        "additionalProperties": False,
    }


def response_format(entity: Entity) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "run_evaluation", "strict": True, "schema": answer_schema(entity)},
    }


def _scale_text(spec: dict[str, Any]) -> str:
    scale = judge_scale(spec)
    if scale is None:
        return "a number from 0 to 1"
    text = f"a number from {scale['min']} to {scale['max']}"
    if scale.get("step"):
        text += f" in steps of {scale['step']}"
    labels = scale.get("labels") or {}
    if labels:
        text += "; rubric: " + "; ".join(f"{key} = {value}" for key, value in labels.items())
    return text


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _trace_summary(trace: Any) -> list[str]:
    """One line a tool call the run made (its spans or entries stored before spans): tool, status, error."""
    lines = []
    for call in tool_calls(trace):
        line = f"- {call['tool']}: {call['status']}"
        if call.get("error"):
            line += f" ({call['error']})"
        lines.append(line)
    return lines or ["(no tool calls)"]


def user_message(entity: Entity, execution: Execution) -> str:
    """Return the user message: the entity's definition, what it is graded on, and the run."""
    evaluation = entity.evaluation()
    episode = execution.run_kind == Execution.RunKind.EPISODE
    parts = [
        f"# The entity: {entity.kind} {entity.slug}" + (f" — {entity.name}" if entity.name else ""),
        entity.description or "",
    ]
    if not episode:
        # A chat episode is graded as a dialog against the requirements, never the role's prompt against itself.
        parts += ["## Its definition (the instructions it runs by)", entity.body or "(empty)"]
    requirements = evaluation.get("requirements") or []
    if requirements:
        parts += ["## Requirements", *[f"- {requirement}" for requirement in requirements]]
    tasks = (entity.frontmatter or {}).get("tasks") or []
    if entity.kind == Entity.Kind.WORKFLOW and tasks:
        parts += [
            "## Tasks (score each one in `tasks`, by id, from 0 to 1)",
            *[f"- {task.get('id')}: {task.get('prompt', '')}" for task in tasks if isinstance(task, dict)],
        ]
    metrics = specs(entity.terms)
    metric_ids = judged_ids(entity.terms)
    if metric_ids:
        parts.append("## Metrics (answer each one in `metrics`, by id, on its own scale)")
        for metric_id in metric_ids:
            spec = metrics[metric_id]
            parts.append(f"- {metric_id}: {spec.get('criterion') or '(no criterion)'} — {_scale_text(spec)}")
    if episode:
        from grading.chat.transcript import evidence

        parts += evidence(entity, execution)
    else:
        parts += [
            "## The run",
            f"Run {execution.pk}, {execution.run_kind}, status {execution.status}"
            + (f", error: {execution.error}" if execution.error else ""),
            "### Input",
            _json(execution.input),
            "### Output",
            _json(execution.output),
            "### Tool calls",
            *_trace_summary(execution.trace),
        ]
    parts += [
        "## Your answer",
        'Answer with one JSON object of the requested schema: per-criterion verdicts (scope "run" or '
        '"task:<id>"), overall_score from 0 to 1, passed, failure_category (empty when passed), feedback, '
        "metrics and tasks.",
    ]
    return "\n\n".join(part for part in parts if part is not None)


def messages(entity: Entity, execution: Execution, method: ResolvedMethod, role: ResolvedRole) -> list[dict[str, Any]]:
    """Return the chat messages of one judging: the role and the method as system, the case as user.

    A chat episode's judge also grades under the chat privacy rule, appended as ``## Privacy``.
    """
    system = f"{role.body}\n\n{method.text.strip()}"
    if execution.run_kind == Execution.RunKind.EPISODE:
        from grading.chat.transcript import privacy_rule

        rule = privacy_rule(entity)
        system += f"\n\n## Privacy\n\n{rule}" if rule else ""
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message(entity, execution)},
    ]


# --- Asking and reading ------------------------------------------------------


def call_judge(
    entity: Entity,
    execution: Execution,
    method: ResolvedMethod,
    role: ResolvedRole,
    *,
    model: str,
    gateway: Gateway | None = None,
) -> JudgeCall:
    """Ask the judge once, under ``model`` and nothing else; return its raw answer and what the call cost.

    GatewayError (ours) when the gateway fails: the grade fails with it, no other model is tried.
    """
    own = gateway is None
    client = gateway or get_gateway()
    try:
        completion = client.complete(
            model=model,
            messages=messages(entity, execution, method, role),
            tools=[],
            response_format=response_format(entity),
        )
    finally:
        if own:
            client.close()
    debit = debit_for(
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
        elapsed_ns=completion.elapsed_ns,
        input_price_per_million=settings.BRAMA_INPUT_PRICE_USD_PER_MILLION,
        output_price_per_million=settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION,
        instance_usd_per_hour=settings.SINGULARITY_INSTANCE_USD_PER_HOUR,
    )
    return JudgeCall(content=completion.content, model=completion.model, cost_usd=debit.total)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _unit(value: Any) -> bool:
    return _is_number(value) and 0 <= value <= 1


def _shape_problem(data: Any) -> str | None:
    """Return what is wrong with the answer's shape, or None when it matches ``answer_schema``."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for key in ("criteria", "overall_score", "passed", "failure_category", "feedback", "metrics", "tasks"):
        if key not in data:
            return f"no {key}"
    if not isinstance(data["criteria"], list):
        return "criteria is not a list"
    for item in data["criteria"]:
        if not isinstance(item, dict):
            return "a criterion is not an object"
        if not all(isinstance(item.get(key), str) for key in ("criterion", "scope", "reasoning", "evidence")):
            return "a criterion lacks criterion/scope/reasoning/evidence text"
        if not isinstance(item.get("passed"), bool) or not _unit(item.get("score")):
            return "a criterion lacks passed or a score from 0 to 1"
    if not _unit(data["overall_score"]):
        return "overall_score is not a number from 0 to 1"
    if not isinstance(data["passed"], bool):
        return "passed is not a boolean"
    if data["failure_category"] is not None and not isinstance(data["failure_category"], str):
        return "failure_category is not text"
    if not isinstance(data["feedback"], str):
        return "feedback is not text"
    if not isinstance(data["metrics"], dict):
        return "metrics is not an object"
    if not isinstance(data["tasks"], list):
        return "tasks is not a list"
    for task in data["tasks"]:
        if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not _unit(task.get("score")):
            return "a task lacks an id or a score from 0 to 1"
    return None


def parse_answer(content: str | None) -> Answer:
    """Return the judge's answer, or JudgeError: "judge: no structured output" / "judge: unparseable output"."""
    text = (content or "").strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text or text[0] not in "{[":
        raise JudgeError(NO_STRUCTURED_OUTPUT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        log.warning("judge answer is not valid JSON: %s", exc.msg)
        raise JudgeError(UNPARSEABLE_OUTPUT) from exc
    problem = _shape_problem(data)
    if problem:
        # The grade records the seed's exact reason; the detail is for whoever reads the logs.
        log.warning("judge answer does not match the schema: %s", problem)
        raise JudgeError(UNPARSEABLE_OUTPUT)
    return Answer(
        criteria=[
            {key: item[key] for key in ("criterion", "scope", "passed", "score", "reasoning", "evidence")}
            for item in data["criteria"]
        ],
        overall_score=float(data["overall_score"]),
        passed=data["passed"],
        failure_category=data["failure_category"] or "",
        feedback=data["feedback"],
        metrics=dict(data["metrics"]),
        tasks=list(data["tasks"]),
    )
