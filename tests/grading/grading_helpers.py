"""Entities and runs for the grading-engine tests, made with the ORM; terms resolved by the real resolver.

``brain_repo`` makes a real git repository for tests that read the brain at
a commit (loop modules, method files, the evaluator role).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.utils import timezone

from grading.models import Entity, Execution
from singularity.brain.git import Checkout, git
from singularity.brain.terms import resolve_terms
from tests.fakes.gateway import Reply

TARGET_KIND = {"workflow": "scenario", "pipeline": "scenario", "heartbeat": "heartbeat", "role": "role"}
SUFFIX = {"workflow": "scenario", "pipeline": "scenario", "heartbeat": "heartbeat", "role": "agent"}
RUN_KIND = {"workflow": "workflow", "pipeline": "pipeline", "heartbeat": "heartbeat", "role": "episode"}


def make_entity(
    slug: str = "digest",
    *,
    kind: str = "workflow",
    evaluation: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    schedule: str = "",
    tasks: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> Entity:
    """An entity whose terms are resolved from ``manifest`` and its own blocks (evaluation enabled unless said)."""
    frontmatter: dict[str, Any] = {"name": slug}
    if schedule:
        frontmatter["schedule"] = schedule
    if tasks is not None:
        frontmatter["tasks"] = tasks
    frontmatter["evaluation"] = {"enabled": True, **(evaluation or {})}
    if loop is not None:
        frontmatter["loop"] = loop
    label = f"features/{slug}/{slug}.{SUFFIX[kind]}.md"
    terms, provenance = resolve_terms(kind, manifest or {}, frontmatter, entity_label=label)
    return Entity.objects.create(
        slug=slug,
        kind=kind,
        target_kind=TARGET_KIND[kind],
        path=label,
        name=fields.pop("name", slug.replace("-", " ").title()),
        body=fields.pop("body", f"Write the {slug}."),
        frontmatter=frontmatter,
        terms=terms,
        provenance=provenance,
        schedule=schedule,
        evaluation_enabled=terms["evaluation"]["enabled"],
        loop_enabled=terms["loop"]["enabled"],
        **fields,
    )


def make_run(
    entity: Entity,
    *,
    status: str = Execution.Status.SUCCEEDED,
    cost_usd: str = "0.0123",
    duration_ms: int | None = 1200,
    tool_failures: int = 0,
    completed_at: datetime | None = None,
    loop_launched: bool = False,
    input: Any = None,
    output: Any = None,
    trace: list[dict[str, Any]] | None = None,
) -> Execution:
    """A finished execution of ``entity`` (ended now unless ``completed_at`` says otherwise)."""
    ended = completed_at or timezone.now()
    return Execution.objects.create(
        entity=entity,
        run_kind=RUN_KIND[entity.kind],
        status=status,
        source=Execution.Source.LOOP if loop_launched else Execution.Source.MANUAL,
        input={"topic": "weather"} if input is None else input,
        output={"text": "Sunny all week."} if output is None else output,
        trace=trace or [],
        cost_usd=Decimal(cost_usd),
        duration_ms=duration_ms,
        tool_failures=tool_failures,
        loop_launched=loop_launched,
        commit=entity.commit,
        started_at=ended - timedelta(milliseconds=duration_ms or 0),
        completed_at=ended,
    )


def answer(
    *,
    score: float = 0.8,
    passed: bool = True,
    category: str = "",
    metrics: dict[str, Any] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    criteria: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A judge answer of the schema the grading asks for."""
    return {
        "criteria": criteria
        if criteria is not None
        else [
            {
                "criterion": "The report names every blocked task",
                "scope": "run",
                "passed": passed,
                "score": score,
                "reasoning": "It lists them." if passed else "It misses two.",
                "evidence": "Blocked: #12, #14",
            }
        ],
        "overall_score": score,
        "passed": passed,
        "failure_category": category,
        "feedback": "Keep the list at the top.",
        "metrics": metrics or {},
        "tasks": tasks or [],
    }


def judge_reply(**kwargs: Any) -> Reply:
    """The fake gateway's reply carrying ``answer(**kwargs)`` as JSON text."""
    return Reply(
        content=json.dumps(answer(**kwargs)),
        usage={"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    )


def brain_repo(path: Path, files: dict[str, str]) -> tuple[Checkout, str]:
    """A git repository at ``path`` holding ``files``; return its checkout and the commit."""
    path.mkdir(parents=True, exist_ok=True)
    git("init", "--quiet", "--initial-branch", "main", str(path))
    checkout = Checkout(path=path)
    return checkout, commit_files(checkout, files)


def commit_files(checkout: Checkout, files: dict[str, str | None]) -> str:
    """Write (or, for None, delete) ``files`` in the checkout and commit them; return the new commit."""
    for relative, text in files.items():
        target = checkout.path / relative
        if text is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("add", "--all", ".", cwd=checkout.path)
    git("commit", "--quiet", "--allow-empty", "-m", "test brain", cwd=checkout.path)
    return checkout.head()
