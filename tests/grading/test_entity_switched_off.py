"""An entity's top-level ``enabled: false`` stops its schedule and its scheduled runs (issue 14)."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from grading.models import Entity, Execution
from grading.schedules import sync_schedules
from grading.tasks.runs import run_scheduled_entity
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db


def scheduled() -> list[str]:
    return sorted(PeriodicTask.objects.filter(name__startswith="entity:").values_list("name", flat=True))


def test_a_switched_off_heartbeat_gets_no_schedule_and_loses_the_one_it_had():
    ops = make_entity("ops", kind=Entity.Kind.HEARTBEAT, body="Check.", schedule="*/5 * * * *")
    make_entity(
        "quiet", kind=Entity.Kind.HEARTBEAT, body="Check.", schedule="*/5 * * * *", frontmatter={"enabled": False}
    )
    sync_schedules()
    assert scheduled() == ["entity:heartbeat:ops"]
    Entity.objects.filter(pk=ops.pk).update(frontmatter={"enabled": False})  # a person pauses it in the brain
    report = sync_schedules()
    assert report.removed == ["entity:heartbeat:ops"] and scheduled() == []


def test_a_tick_already_queued_for_a_switched_off_entity_runs_nothing():
    quiet = make_entity(
        "quiet", kind=Entity.Kind.HEARTBEAT, body="Check.", schedule="* * * * *", frontmatter={"enabled": False}
    )
    assert run_scheduled_entity(quiet.pk) is None
    assert not Execution.objects.filter(entity=quiet).exists()
