"""Every kind the engine runs is booked for grading at its terminal (R2.2), once the transaction commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from grading.models import Entity, Execution, Grade
from grading.runners import run_entity
from tests.fakes.gateway import Reply
from tests.grading.rating_helpers import make_terms
from tests.grading.runs_helpers import Brain, make_entity

pytest.importorskip("grading.booking")

pytestmark = pytest.mark.django_db(transaction=True)

#: Graded three days after the run: the booking is made at the terminal, nothing is enqueued now.
TERMS = make_terms(evaluation={"sample": {"rate": 1, "maxPerDay": 10}, "gradeAfterHours": 72})


def graded(slug: str, kind: str, **fields) -> Entity:
    return make_entity(slug, kind=kind, terms=TERMS, evaluation_enabled=True, **fields)


def test_workflow_pipeline_and_heartbeat_runs_are_each_booked_at_their_terminal(fake_gateway, settings, tmp_path: Path):
    settings.SINGULARITY_MCP_CONFIG = ""
    fake_gateway.handler = lambda request, headers: Reply(content="ok")
    brain = Brain(tmp_path, {"features/p/p.pipeline.py": "def run(ctx, input):\n    return {'ok': True}\n"})
    workflow = graded("w", Entity.Kind.WORKFLOW, body="Answer.")
    pipeline = graded("p", Entity.Kind.PIPELINE, pipeline_path="features/p/p.pipeline.py", commit=brain.first)
    heartbeat = graded("h", Entity.Kind.HEARTBEAT, body="Tick.", schedule="* * * * *")
    for entity in (workflow, pipeline, heartbeat):
        execution = run_entity(entity, source="manual", gateway=fake_gateway.gateway(), checkout=brain.checkout)
        assert execution.status == "succeeded", execution.error
    assert sorted(Grade.objects.values_list("entity__slug", "status")) == [
        ("h", "booked"),
        ("p", "booked"),
        ("w", "booked"),
    ]
    assert set(Execution.objects.values_list("sampling", flat=True)) == {"sampled"}


def test_a_loop_launched_run_is_not_booked_by_the_sampler(fake_gateway, settings):
    settings.SINGULARITY_MCP_CONFIG = ""
    fake_gateway.script(Reply(content="ok"))
    entity = graded("w", Entity.Kind.WORKFLOW, body="Answer.")
    execution = run_entity(entity, source="loop", loop_launched=True, gateway=fake_gateway.gateway())
    execution.refresh_from_db()
    assert execution.sampling == "loop_launched"
    assert Grade.objects.count() == 0
