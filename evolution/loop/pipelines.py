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


#: The path and frontmatter of each present, loading pipeline scenario of one slug, by id (``served_pipeline``'s).
CANDIDATES = """
SELECT pipeline_path, frontmatter FROM grading_entity
WHERE kind = %s AND target_kind = %s AND present AND load_error = '' AND pipeline_path <> '' AND slug = %s
ORDER BY id
"""


def serves(pipeline: str) -> bool:
    """Whether ``served_pipeline(pipeline)`` finds a pipeline, without building its entity (the gates ask it every
    batch of landings): one written-out statement of the candidates' path and frontmatter."""
    from django.db import connection

    decode = Entity._meta.get_field("frontmatter").from_db_value
    with connection.cursor() as cursor:
        cursor.execute(CANDIDATES, [Entity.Kind.PIPELINE.value, Entity.TargetKind.SCENARIO.value, pipeline])
        rows = cursor.fetchall()
    return any(
        stem_of(path) == pipeline and (decode(frontmatter, None, None) or {}).get("enabled") is not False
        for path, frontmatter in rows
    )


def refusal_sentence(pipeline: str) -> str:
    return f"loop.proposer.pipeline: {pipeline} names no pipeline this brain serves"


def refusal(entity: Entity) -> str | None:
    """Return the sentence when ``loop.proposer.pipeline`` names no pipeline the brain serves; None when it does or is null."""
    pipeline = pipeline_id(entity)
    if pipeline is None or serves(pipeline):
        return None
    return refusal_sentence(pipeline)
