"""Runs that came in as OpenTelemetry traces feed the loop like any others: bad ones open a repair cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from evolution.loop import trigger
from evolution.models import Cycle
from grading import otlp_assemble
from grading.models import Grade
from singularity.models import ApiToken
from tests.evolution.loop_helpers import cycles_of, looped
from tests.grading.grading_helpers import brain_repo
from tests.grading.otlp_helpers import agent_spans, encoded

pytestmark = pytest.mark.django_db

LOOP_PATH = "features/triage/triage.loop.py"
MEASURE = """
def measure(run):
    return [{"id": "accuracy", "value": (run.output or {}).get("accuracy")}]
"""
ACCURACY = {"kind": "computed", "direction": "max", "unit": "share", "role": "objective", "floor": 0.5}


def test_bad_runs_sent_as_otlp_traces_open_a_cycle(
    tmp_path, settings, django_user_model, django_capture_on_commit_callbacks
):
    checkout, commit = brain_repo(
        tmp_path / "brain", {LOOP_PATH: MEASURE, "features/triage/triage.scenario.md": "---\n---\n"}
    )
    settings.BRAIN_CHECKOUT = checkout.path
    evaluation = {"method": "none", "sample": {"rate": 1.0, "maxPerDay": 100}, "metrics": {"accuracy": ACCURACY}}
    entity = looped("triage", evaluation=evaluation, commit=commit, loop_module_path=LOOP_PATH)
    _, key = ApiToken.issue(django_user_model.objects.create_user("agent"), "agent", is_agent=True)
    client = Client()
    for accuracy in (0.9, 0.1, 0.9, 0.1):
        response = client.post(
            "/v1/traces",
            data=encoded(agent_spans(entity="scenario:triage", accuracy=accuracy)),
            content_type="application/x-protobuf",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        assert otlp_assemble.sweep(now=timezone.now() + timedelta(minutes=1)) == 4
    grades = list(Grade.objects.filter(entity=entity))
    assert sorted(grade.passed for grade in grades) == [False, False, True, True]

    assert trigger.on_landed([grade.pk for grade in grades]) == 1  # what the landed listener hands the worker
    [cycle] = cycles_of(entity)
    assert cycle.origin == Cycle.Origin.GRADE
    assert cycle.anchor_id in {grade.execution_id for grade in grades if grade.passed is False}
