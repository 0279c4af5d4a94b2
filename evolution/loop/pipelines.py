"""Which proposer pipeline an entity names, and whether the brain serves it (read at the opening and by the proposer).

``loop.proposer.pipeline`` names a pipeline scenario of the brain by its id
(the stem of its ``<id>.pipeline.py``); a name the brain does not serve
refuses the cycle before anything is paid for.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from grading.models import Entity

PIPELINE_SUFFIX = ".pipeline.py"


def pipeline_id(entity: Entity) -> str | None:
    """Return the proposer pipeline the entity names (``loop.proposer.pipeline``, read live); None for the agent."""
    proposer = ((entity.terms or {}).get("loop") or {}).get("proposer") or {}
    value = proposer.get("pipeline")
    return str(value) if value else None


def stem_of(pipeline_path: str) -> str:
    """Return a pipeline's id: the file stem of its ``<id>.pipeline.py``."""
    name = PurePosixPath(pipeline_path).name
    return name[: -len(PIPELINE_SUFFIX)] if name.endswith(PIPELINE_SUFFIX) else name


def served_pipeline(pipeline: str) -> Entity | None:
    """Return the pipeline scenario serving ``<pipeline>.pipeline.py``: present, loading, not switched off; else None."""
    candidates = Entity.objects.filter(
        kind=Entity.Kind.PIPELINE, target_kind=Entity.TargetKind.SCENARIO, present=True, load_error=""
    ).exclude(pipeline_path="")
    for entity in candidates.filter(slug=pipeline).order_by("pk"):
        if stem_of(entity.pipeline_path) == pipeline and (entity.frontmatter or {}).get("enabled") is not False:
            return entity
    return None


def refusal_sentence(pipeline: str) -> str:
    return f"loop.proposer.pipeline: {pipeline} names no pipeline this brain serves"


def refusal(entity: Entity) -> str | None:
    """Return the sentence when ``loop.proposer.pipeline`` names no pipeline the brain serves; None when it does or is null."""
    pipeline = pipeline_id(entity)
    if pipeline is None or served_pipeline(pipeline) is not None:
        return None
    return refusal_sentence(pipeline)
