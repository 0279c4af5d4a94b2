"""Entity schedules synced into django-celery-beat, and the Celery tasks that run entities."""

from __future__ import annotations

import json

import pytest
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from grading.models import Entity, Execution
from grading.schedules import EXPIRE_SECONDS, TASK, sync_schedules
from grading.tasks.runs import run_entity_task, run_scheduled_entity
from tests.fakes.gateway import Reply
from tests.grading.runs_helpers import make_entity

pytestmark = pytest.mark.django_db


def tasks() -> dict[str, PeriodicTask]:
    return {t.name: t for t in PeriodicTask.objects.select_related("crontab").filter(name__startswith="entity:")}


def cron(task: PeriodicTask) -> str:
    c = task.crontab
    return f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"


@pytest.fixture
def entities() -> dict[str, Entity]:
    return {
        "ops": make_entity("ops", kind=Entity.Kind.HEARTBEAT, body="Check.", schedule="*/5 * * * *"),
        "digest": make_entity("digest", schedule="0 9 * * 1-5"),
        "manual": make_entity("manual"),
    }


def test_scheduled_entities_get_a_periodic_task_each_on_their_cron(entities, settings):
    report = sync_schedules()
    assert sorted(report.created) == ["entity:heartbeat:ops", "entity:scenario:digest"]
    synced = tasks()
    ops = synced["entity:heartbeat:ops"]
    assert (ops.task, json.loads(ops.args), cron(ops)) == (TASK, [entities["ops"].pk], "*/5 * * * *")
    assert str(ops.crontab.timezone) == settings.TIME_ZONE
    assert ops.expire_seconds == EXPIRE_SECONDS
    assert cron(synced["entity:scenario:digest"]) == "0 9 * * 1-5"


def test_a_second_sync_with_nothing_changed_writes_nothing(entities):
    sync_schedules()
    before = {name: task.date_changed for name, task in tasks().items()}
    report = sync_schedules()
    assert (report.created, report.updated, report.removed) == ([], [], [])
    assert {name: task.date_changed for name, task in tasks().items()} == before


def test_a_changed_schedule_moves_the_task_to_the_new_cron(entities):
    sync_schedules()
    Entity.objects.filter(slug="ops").update(schedule="0 * * * *")
    report = sync_schedules()
    assert report.updated == ["entity:heartbeat:ops"]
    assert cron(tasks()["entity:heartbeat:ops"]) == "0 * * * *"


def test_tasks_of_entities_that_lost_their_schedule_failed_to_load_or_left_are_removed(entities):
    sync_schedules()
    Entity.objects.filter(slug="digest").update(schedule="")
    sync_schedules()
    assert list(tasks()) == ["entity:heartbeat:ops"]
    Entity.objects.filter(slug="ops").update(present=False)
    assert sync_schedules().removed == ["entity:heartbeat:ops"]
    assert tasks() == {}
    make_entity("pulse", kind=Entity.Kind.HEARTBEAT, schedule="* * * * *")
    sync_schedules()
    Entity.objects.filter(slug="pulse").update(load_error="frontmatter: not YAML")
    sync_schedules()
    Entity.objects.filter(slug="digest").update(schedule="0 9 * * *")
    sync_schedules()
    Entity.objects.filter(slug="digest").delete()
    assert sync_schedules().removed == ["entity:scenario:digest"]
    assert tasks() == {}


def test_an_invalid_cron_is_skipped_and_the_others_still_sync(entities, caplog):
    Entity.objects.filter(slug="digest").update(schedule="61 * * * *")
    make_entity("short", schedule="* * *")
    report = sync_schedules()
    assert list(tasks()) == ["entity:heartbeat:ops"]
    assert set(report.skipped) == {"entity:scenario:digest", "entity:scenario:short"}
    assert "expected 5 fields" in report.skipped["entity:scenario:short"]
    assert "scenario:digest: not scheduled" in caplog.text


def test_other_periodic_tasks_are_left_alone(entities):
    every = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="wake-beings", task="singularity.tasks.wake_beings", interval=every)
    sync_schedules()
    Entity.objects.all().delete()
    sync_schedules()
    assert list(PeriodicTask.objects.values_list("name", flat=True)) == ["wake-beings"]


def test_entities_sharing_a_cron_share_one_crontab_row(entities):
    make_entity("other-ops", kind=Entity.Kind.HEARTBEAT, schedule="*/5 * * * *")
    sync_schedules()
    assert CrontabSchedule.objects.filter(minute="*/5").count() == 1


# --- the tasks -------------------------------------------------------------------------


@pytest.fixture
def gateway_settings(settings, fake_gateway):
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_API_KEY = "test-key"
    settings.BRAMA_MAX_RETRIES = 0
    settings.SINGULARITY_MCP_CONFIG = ""
    return fake_gateway


def test_the_scheduled_task_runs_a_tick_of_the_heartbeat(entities, gateway_settings):
    gateway_settings.script(Reply(content="quiet"))
    execution_id = run_scheduled_entity(entities["ops"].pk)
    execution = Execution.objects.get(pk=execution_id)
    assert (execution.status, execution.source, execution.output) == ("succeeded", "schedule", {"result": "quiet"})


def test_the_scheduled_task_skips_an_entity_that_is_gone_or_unscheduled_or_broken(entities, gateway_settings):
    assert run_scheduled_entity(10_000) is None
    assert run_scheduled_entity(entities["manual"].pk) is None
    Entity.objects.filter(slug="ops").update(load_error="broken")
    assert run_scheduled_entity(entities["ops"].pk) is None
    assert Execution.objects.count() == 0
    assert gateway_settings.requests == []


def test_the_run_task_runs_for_the_user_who_asked(entities, gateway_settings, alice):
    gateway_settings.script(Reply(content="done"))
    execution_id = run_entity_task(entities["manual"].pk, {"q": 1}, "manual", alice.pk)
    execution = Execution.objects.get(pk=execution_id)
    assert (execution.started_by, execution.input, execution.source) == (alice, {"q": 1}, "manual")
