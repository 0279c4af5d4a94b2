"""An entity's top-level ``enabled: false`` stops its schedule and its scheduled runs (issue 14)."""

from __future__ import annotations

import pytest
from django.urls import reverse
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


# --- A run someone asks for is refused, naming the entity and the key, on every path ---------------

WORDS = "scenario:quiet is switched off: the top-level `enabled: false` in features/quiet/quiet.scenario.md"


def quiet_workflow() -> Entity:
    return make_entity("quiet", body="Answer.", frontmatter={"enabled": False})


def test_a_run_asked_of_a_switched_off_entity_is_refused_before_it_starts():
    from grading.runners import run_entity
    from singularity.errors import ConfigError

    quiet = quiet_workflow()
    with pytest.raises(ConfigError) as refused:
        run_entity(quiet, input={}, source=Execution.Source.MANUAL)
    assert str(refused.value).startswith(WORDS) and "set `enabled: true`" in str(refused.value)
    assert not Execution.objects.filter(entity=quiet).exists()


def test_a_run_already_queued_for_a_switched_off_entity_runs_nothing():
    from grading.tasks.runs import run_entity_task

    quiet = quiet_workflow()
    assert run_entity_task(quiet.pk, input={}, source=Execution.Source.MANUAL.value, user_id=None) is None
    assert not Execution.objects.filter(entity=quiet).exists()


def test_the_run_button_is_disabled_saying_why_and_a_post_is_refused(alice, client, django_capture_on_commit_callbacks):
    quiet = quiet_workflow()
    client.force_login(alice)
    page = client.get(quiet.get_absolute_url()).content.decode()
    assert '<button type="submit" disabled aria-describedby="run-refusal">Run now</button>' in page
    assert WORDS.replace("`", "&#x60;") in page or WORDS in page
    with django_capture_on_commit_callbacks() as started:
        answer = client.post(reverse("grading:entity-run", args=["scenario", "quiet"]), {"input": "{}"}, follow=True)
    assert started == []  # nothing handed to a worker
    assert answer.status_code == 200
    assert [str(m) for m in answer.context["messages"]][0].startswith(WORDS)


def test_a_reported_run_of_a_switched_off_entity_is_refused_with_the_error_shape(alice):
    from rest_framework.test import APIClient

    from singularity.models import ApiToken

    quiet_workflow()
    _, key = ApiToken.issue(alice, "script", is_agent=False)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = {
        "entity": "scenario:quiet",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05Z",
    }
    for url in ("/api/runs/report/", "/api/runs/"):
        answer = api.post(url, body, format="json")
        assert answer.status_code == 400, answer.content
        assert answer.json()["error"] == "invalid"
        assert answer.json()["detail"].startswith(f"entity: {WORDS}")
    assert not Execution.objects.exists()
