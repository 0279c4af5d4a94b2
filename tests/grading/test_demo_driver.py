"""The demo driver: the next labelled ticket and a new pricing seed every interval, through the real runners."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.conf import settings as django_settings
from django.utils import timezone
from pytest_django.fixtures import Settings

from grading.demo import DEMO_EVERY_SECS, PRICING_PATH, TRIAGE_PATH, DemoError, drive_demo
from grading.demo_tasks import drive_demo_task
from grading.models import Entity, Execution
from grading.sync import sync_brain
from singularity.management.commands.up import Command as UpCommand
from singularity.schedule import BEAT_SCHEDULE

pytestmark = pytest.mark.django_db

TICKETS = [
    json.loads(line)
    for line in (django_settings.DEMO_BRAIN_DIR / "features/support/triage/tickets.jsonl").read_text().splitlines()
]


@pytest.fixture
def demo_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The embedded default: the bundled demo brain cloned under a fresh var/, the demo model, the driver on."""
    settings.VAR_DIR = tmp_path
    settings.BRAIN_REPO = ""
    settings.BRAIN_CHECKOUT = tmp_path / "brain"
    settings.BRAMA_BASE_URL = ""
    settings.DEMO_DRIVER = True
    return settings


def demo_runs(path: str) -> list[Execution]:
    return list(Execution.objects.filter(entity__path=path, source="demo").order_by("started_at"))


def test_it_starts_a_triage_run_on_the_first_ticket_and_a_pricing_run_on_seed_zero(demo_settings) -> None:
    sync_brain()
    assert drive_demo() == 3
    [triage] = demo_runs(TRIAGE_PATH)
    assert triage.input == TICKETS[0]
    assert triage.status == Execution.Status.SUCCEEDED
    # The demo model applies the scenario's rules to the ticket it was shown.
    assert triage.output["result"] == "billing"
    [pricing] = demo_runs(PRICING_PATH)
    assert pricing.input == {"seed": 0}
    assert pricing.status == Execution.Status.SUCCEEDED
    assert pricing.output["price"] == "22.00"


def test_each_interval_takes_the_next_ticket_and_the_next_seed(demo_settings) -> None:
    sync_brain()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(4):
            assert drive_demo() == 3
            clock.shift(timedelta(seconds=DEMO_EVERY_SECS))
    assert [run.input for run in demo_runs(TRIAGE_PATH)] == TICKETS[:4]
    assert [run.input for run in demo_runs(PRICING_PATH)] == [{"seed": n} for n in range(4)]
    assert [run.output["result"] for run in demo_runs(TRIAGE_PATH)] == ["billing", "technical", "general", "general"]


def test_a_second_call_within_the_interval_starts_nothing(demo_settings) -> None:
    sync_brain()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        assert drive_demo() == 3
        clock.shift(timedelta(seconds=DEMO_EVERY_SECS / 2 - 1))
        assert drive_demo() == 0
    assert len(demo_runs(TRIAGE_PATH)) == len(demo_runs(PRICING_PATH)) == 1


def test_the_round_robin_wraps_after_the_last_ticket(demo_settings) -> None:
    sync_brain()
    triage = Entity.objects.get(path=TRIAGE_PATH)
    long_ago = timezone.now() - timedelta(days=1)
    Execution.objects.bulk_create(
        Execution(entity=triage, run_kind="workflow", status="succeeded", source="demo", started_at=long_ago)
        for _ in TICKETS
    )
    drive_demo()
    assert demo_runs(TRIAGE_PATH)[-1].input == TICKETS[0]


def test_it_does_nothing_when_the_driver_is_off(demo_settings) -> None:
    sync_brain()
    demo_settings.DEMO_DRIVER = False
    assert drive_demo() == 0
    assert Execution.objects.count() == 0


def test_it_does_nothing_for_a_brain_without_the_demo_entities(demo_settings) -> None:
    assert drive_demo() == 0
    assert Execution.objects.count() == 0


def test_missing_tickets_are_refused_by_name_after_pricing_ran(demo_settings, tmp_path: Path) -> None:
    brain = tmp_path / "source"
    shutil.copytree(django_settings.DEMO_BRAIN_DIR, brain)
    (brain / "features/support/triage/tickets.jsonl").unlink()
    demo_settings.DEMO_BRAIN_DIR = brain
    sync_brain()
    with pytest.raises(DemoError, match="features/support/triage/tickets.jsonl"):
        drive_demo()
    assert demo_runs(TRIAGE_PATH) == []
    assert len(demo_runs(PRICING_PATH)) == 1


def test_the_task_drives_the_demo_and_is_scheduled_every_twenty_seconds_with_an_expiry(demo_settings) -> None:
    sync_brain()
    assert drive_demo_task() == 3
    entry = BEAT_SCHEDULE["drive-demo"]
    assert (entry["task"], entry["schedule"]) == ("grading.tasks.drive_demo", DEMO_EVERY_SECS)
    assert 0 < entry["options"]["expires"] <= DEMO_EVERY_SECS


def test_make_run_syncs_the_brain_first_and_says_how_many_entities_loaded(demo_settings) -> None:
    out = StringIO()
    UpCommand(stdout=out)._sync_brain()
    assert "7 entities loaded" in out.getvalue()
    assert set(Entity.objects.values_list("slug", flat=True)) == {
        "triage",
        "urgency",
        "pricing",
        "pulse",
        "helpdesk",
        "fixer",
        "pricer",
    }
