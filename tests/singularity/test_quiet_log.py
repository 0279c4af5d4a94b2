"""A quiet log at INFO: one line per thing that happened, none for a tick that did nothing."""

from __future__ import annotations

import logging

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS

from singularity import tasks
from singularity.being.actions import create_being, start_on_workers
from tests.fakes.gateway import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def gateway_settings(settings, fake_gateway, tmp_path):
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_API_KEY = "test-key"
    settings.BRAMA_MAX_RETRIES = 0
    settings.SINGULARITY_WORKSPACE = tmp_path / "ws"
    settings.SINGULARITY_MCP_CONFIG = ""
    return settings


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.INFO]


def test_a_wake_that_woke_nothing_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert tasks.wake_beings() == 0
    assert info_lines(caplog) == []


def test_a_wake_that_woke_a_being_leaves_the_line_to_its_cycle(caplog, monkeypatch) -> None:
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.run_being_cycle, "delay", enqueued.append)
    being = start_on_workers(create_being("ada"), by="alice")
    caplog.set_level(logging.INFO)
    assert tasks.wake_beings() == 1
    assert enqueued == [being.pk]
    assert info_lines(caplog) == []


def test_a_cycle_is_one_line(caplog, gateway_settings, fake_gateway) -> None:
    fake_gateway.script(Reply(content="alive"))
    being = start_on_workers(create_being("ada", starting="10"), by="alice")
    caplog.set_level(logging.INFO)
    assert tasks.run_being_cycle(being.pk) is True
    lines = [line for line in info_lines(caplog) if not line.startswith("django")]
    assert lines == ["singularity.tasks: being ada: cycle 1 completed, spent $0.00, earned $0.00, balance $10.00"]


def celery_says(logger: str, level: int, message: str, args: object) -> None:
    logging.getLogger(logger).log(level, message, args)


def test_celerys_lines_for_routine_ticks_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tick = {"name": "singularity.tasks.wake_beings", "id": "1", "runtime": 0.01, "return_value": "0"}
    celery_says("celery.worker.strategy", logging.INFO, LOG_RECEIVED, tick)
    celery_says("celery.app.trace", logging.INFO, LOG_SUCCESS, tick)
    cycle = {**tick, "name": "singularity.tasks.run_being_cycle"}
    celery_says("celery.app.trace", logging.INFO, LOG_SUCCESS, cycle)
    logging.getLogger("celery.beat").info(
        "Scheduler: Sending due task %s (%s)", "wake-beings", "singularity.tasks.wake_beings"
    )
    assert info_lines(caplog) == []


def test_other_tasks_get_one_line_and_every_failure_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    once = {"name": "evolution.tasks.apply_round", "id": "2", "runtime": 1.5, "return_value": "None"}
    celery_says("celery.worker.strategy", logging.INFO, LOG_RECEIVED, once)  # one line a task: "succeeded" says it
    celery_says("celery.app.trace", logging.INFO, LOG_SUCCESS, once)
    failed = {"name": "singularity.tasks.wake_beings", "id": "3", "description": "raised", "exc": "boom"}
    celery_says("celery.app.trace", logging.ERROR, "Task %(name)s[%(id)s] %(description)s: %(exc)s", failed)
    assert info_lines(caplog) == [
        "celery.app.trace: Task evolution.tasks.apply_round[2] succeeded in 1.5s: None",
        "celery.app.trace: Task singularity.tasks.wake_beings[3] raised: boom",
    ]
