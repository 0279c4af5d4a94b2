"""Entities, runs and grades made directly with the ORM for the ratings, calibration and grading-page tests."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from grading.models import Entity, Execution, Grade
from singularity.brain.defaults import CATALOG_METRICS, CHAT, EVALUATION, LOOP

METRIC_FIELDS = (
    "kind", "direction", "unit", "role", "scope", "target", "floor", "tolerance", "tolerancePct",
    "mustImprove", "critical", "aggregate", "optional", "scale", "human", "criterion", "catalog",
)  # fmt: skip

#: The judge of most grades: model chain, method and hashes (see grading.pin).
JUDGE = {"model": "openai:gpt-5.2", "method": "default", "method_hash": "m1", "loop_hash": "l1", "role_hash": "r1"}

THUMBS = {"min": 0, "max": 1, "step": 1, "labels": {"0": "👎", "1": "👍"}}


def metric(**fields: Any) -> dict[str, Any]:
    """A fully specified metric: every field present, None where unset."""
    spec: dict[str, Any] = dict.fromkeys(METRIC_FIELDS)
    spec.update(scope="run", aggregate="median", mustImprove=False, critical=False, optional=False)
    spec.update(human=False, catalog=False)
    spec.update(fields)
    return spec


def catalog_metrics() -> dict[str, dict[str, Any]]:
    return {metric_id: metric(**fields, catalog=True) for metric_id, fields in CATALOG_METRICS.items()}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def make_terms(evaluation: dict[str, Any] | None = None, loop: dict[str, Any] | None = None) -> dict[str, Any]:
    """Engine defaults deep-merged with what a test needs; the catalog metrics always present."""
    terms = {
        "evaluation": deep_merge(EVALUATION, {"enabled": True, "metrics": catalog_metrics()}),
        "loop": copy.deepcopy(LOOP),
        "chat": copy.deepcopy(CHAT),
    }
    terms["evaluation"] = deep_merge(terms["evaluation"], evaluation or {})
    terms["loop"] = deep_merge(terms["loop"], loop or {})
    return terms


#: A judged metric people rate over, on the engine's 1–5 (declared without a scale, so resolved with none).
LAYOUT_FIT = metric(kind="judged", human=True, direction="max", unit="score", role="guard", target=0.5,
                    criterion="The scenes follow the strategy")  # fmt: skip
#: A metric only people rate: 👍/👎, read as a share.
HELPFUL = metric(kind="reported", direction="max", unit="share", role="objective", aggregate="mean",
                 criterion="The dialog solved the client's problem", scale=THUMBS)  # fmt: skip
#: A judge-only metric (people may not rate it).
RELEVANCE = metric(kind="judged", direction="max", unit="score", role="guard", criterion="Ties to an event")
#: A continuous 0–100 reported metric (a number input on the page).
SCORE100 = metric(kind="reported", direction="max", unit="score", role="observe", criterion="Overall",
                  scale={"min": 0, "max": 100, "step": None, "labels": None})  # fmt: skip


def make_entity(
    slug: str = "digest",
    *,
    kind: str = "workflow",
    metrics: dict[str, dict[str, Any]] | None = None,
    evaluation: dict[str, Any] | None = None,
    enabled: bool = True,
    **fields: Any,
) -> Entity:
    """An entity with resolved terms: by default a workflow with layout_fit (judged, human) and helpful (reported)."""
    declared = {"layout_fit": LAYOUT_FIT, "helpful": HELPFUL} if metrics is None else metrics
    terms = make_terms({"enabled": enabled, "metrics": declared, **(evaluation or {})})
    target_kind = {"workflow": "scenario", "pipeline": "scenario"}.get(kind, kind)
    defaults = {
        "kind": kind,
        "path": f"features/{slug}/{slug}.{target_kind}.md",
        "name": slug.replace("-", " ").title(),
        "terms": terms,
        "provenance": {"evaluation.enabled": "entity", "evaluation.sample.rate": "engine"},
        "evaluation_enabled": enabled,
        "definition_hash": "d" * 64,
        "commit": "c" * 40,
    }
    defaults.update(fields)
    return Entity.objects.create(slug=slug, target_kind=target_kind, **defaults)


def make_run(
    entity: Entity,
    *,
    status: str = Execution.Status.SUCCEEDED,
    loop_launched: bool = False,
    sampling: str = Execution.Sampling.SAMPLED,
    completed_at: datetime | None = None,
    **fields: Any,
) -> Execution:
    """A terminal run of ``entity`` (unless ``status`` says running)."""
    run_kind = {"role": "episode"}.get(entity.kind, entity.kind)
    completed = completed_at or timezone.now()
    terminal = status != Execution.Status.RUNNING
    return Execution.objects.create(
        entity=entity,
        run_kind=run_kind,
        status=status,
        loop_launched=loop_launched,
        sampling=sampling if terminal else "",
        started_at=completed - timedelta(seconds=3),
        completed_at=completed if terminal else None,
        duration_ms=3000 if terminal else None,
        input={"topic": "weekly"},
        output={"summary": "done"} if terminal else None,
        cost_usd=fields.pop("cost_usd", Decimal("0.0123")),
        commit=entity.commit,
        definition_hash=entity.definition_hash,
        **fields,
    )


def make_grade(
    execution: Execution,
    *,
    metrics: dict[str, Any] | None = None,
    judge: dict[str, Any] | None = None,
    status: str = Grade.Status.GRADED,
    graded_at: datetime | None = None,
    passed: bool | None = True,
    **fields: Any,
) -> Grade:
    """A grade of ``execution``: graded by ``JUDGE`` unless told otherwise."""
    when = graded_at or execution.completed_at or timezone.now()
    graded = status == Grade.Status.GRADED
    return Grade.objects.create(
        execution=execution,
        entity=execution.entity,
        status=status,
        day=when.date(),
        booked_at=when,
        due_at=when,
        graded_at=when if graded else None,
        score=fields.pop("score", 0.8 if graded else None),
        passed=passed if graded else None,
        metrics=metrics if metrics is not None else {},
        judge=JUDGE if judge is None else judge,
        **fields,
    )
