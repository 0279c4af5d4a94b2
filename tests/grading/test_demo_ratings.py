"""The demo brain gives people something to rate from the first minutes (issue 15).

Support triage declares people's 👍/👎 on its label (``helpfulness``, reported,
observed: never part of a verdict, so the pre-merge check that replays it is
unmoved); Rate runs lists its runs and a rating lands. Its runs are not carded:
a carded run waits out of every observed window until it is rated, and the
triage runs every 20 seconds, so cards there would hold its loop. The Pulse
heartbeat (not in the loop, every five minutes) is judged on ``useful`` and
people rate it too (``human: true``): the demo judge gives each tick a number,
so a person's rating is a calibration pair from the first tick; it asks under
until-calibrated, each tick is carded until the judge agrees, and the card
expires within the hour.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings

from grading.booking import on_terminal
from grading.calibration import calibration
from grading.cards import decide
from grading.demo import DEMO_EVERY_SECS, TRIAGE_PATH, drive_demo
from grading.grade import grade_now
from grading.models import Entity, Execution, Rating
from grading.people import human_metrics
from grading.ratings import rate
from grading.sync import sync_brain

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings: Settings, tmp_path: Path) -> Settings:
    settings.VAR_DIR = tmp_path
    settings.BRAIN_REPO = ""
    settings.BRAIN_CHECKOUT = tmp_path / "brain"
    settings.BRAMA_BASE_URL = ""
    settings.DEMO_DRIVER = True
    sync_brain()
    return settings


def graded_triage_runs(count: int) -> list[Execution]:
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(count):
            drive_demo()
            clock.shift(timedelta(seconds=DEMO_EVERY_SECS))
    runs = list(Execution.objects.filter(entity__path=TRIAGE_PATH).order_by("started_at"))
    for run in runs:
        grade_now(on_terminal(run))
    return runs


def test_the_demo_triage_declares_helpfulness_for_people_observed_and_never_in_a_verdict(demo) -> None:
    triage = Entity.objects.get(path=TRIAGE_PATH)
    spec = human_metrics(triage)["helpfulness"]
    assert spec["kind"] == "reported" and spec["role"] == "observe"
    assert spec["scale"]["min"] == 0 and spec["scale"]["max"] == 1
    assert triage.terms["evaluation"]["metrics"]["accuracy"]["role"] == "objective"


def test_demo_triage_runs_are_not_carded_so_its_loop_windows_still_fill(demo) -> None:
    [run] = graded_triage_runs(1)
    run.refresh_from_db()
    carded, why = decide(run)
    assert not carded and "never" in why
    assert run.awaiting_rating_until is None


def test_rate_runs_lists_the_demo_triage_and_a_rating_lands(demo, alice, client: Client) -> None:
    [run] = graded_triage_runs(1)
    client.force_login(alice)
    html = client.get("/evolution/rate/").content.decode()
    assert "Support triage" in html and "helpfulness" in html.lower()
    answer = rate(
        actor_user=alice,
        is_agent=False,
        run_kind=run.run_kind,
        run_id=str(run.pk),
        idempotency_key="k1",
        ratings=[{"metric_id": "helpfulness", "value": 1, "note": ""}],
    )
    assert answer.ok, answer
    assert Rating.objects.get(execution=run, metric_id="helpfulness").normalized == 1


def test_the_demo_pulse_asks_people_under_until_calibrated_and_its_cards_expire_within_the_hour(demo) -> None:
    pulse = Entity.objects.get(slug="pulse")
    spec = human_metrics(pulse)["useful"]
    assert spec["kind"] == "judged" and spec["human"] is True
    human = pulse.terms["evaluation"]["human"]
    assert human["ask"] == "until-calibrated" and float(human["expiresHours"]) <= 1
    assert not pulse.loop_enabled  # its runs waiting for a rating hold no loop
    run = Execution.objects.create(
        entity=pulse, status=Execution.Status.SUCCEEDED, source=Execution.Source.SCHEDULE, completed_at=timezone.now()
    )
    carded, why = decide(run)
    assert carded and "useful" in why and "not calibrated" in why


def test_a_person_rating_a_demo_pulse_tick_moves_its_calibration(demo, alice, client: Client) -> None:
    pulse = Entity.objects.get(slug="pulse")
    run = Execution.objects.create(
        entity=pulse,
        run_kind=Execution.RunKind.HEARTBEAT,
        status=Execution.Status.SUCCEEDED,
        source=Execution.Source.SCHEDULE,
        output={"result": "ok 3 checks"},
        completed_at=timezone.now(),
    )
    grade = grade_now(on_terminal(run))
    assert grade.status == grade.Status.GRADED, grade.error
    assert grade.metrics["useful"] == 1.0  # the demo judge read a tick that succeeded with no failed tool
    assert "demo-note" not in str(grade.criteria) + grade.feedback
    [before] = calibration(pulse)
    assert before.pairs == 0
    client.force_login(alice)
    assert "0 of 5 pairs" in client.get("/evolution/rate/?entity=heartbeat:pulse").content.decode()
    answer = rate(
        actor_user=alice,
        is_agent=False,
        run_kind=run.run_kind,
        run_id=str(run.pk),
        idempotency_key="p1",
        ratings=[{"metric_id": "useful", "value": 1, "note": ""}],
    )
    assert answer.ok, answer
    [after] = calibration(pulse)
    assert after.pairs == 1 and after.agreement == 1.0
    assert "1 of 5 pairs" in client.get("/evolution/rate/?entity=heartbeat:pulse").content.decode()


def test_the_demo_judge_scores_a_failed_tick_low(demo) -> None:
    pulse = Entity.objects.get(slug="pulse")
    run = Execution.objects.create(
        entity=pulse,
        run_kind=Execution.RunKind.HEARTBEAT,
        status=Execution.Status.FAILED,
        source=Execution.Source.SCHEDULE,
        error="the workspace is unreachable",
        completed_at=timezone.now(),
    )
    grade = grade_now(on_terminal(run))
    assert grade.status == grade.Status.GRADED, grade.error
    assert grade.metrics["useful"] == 0.0 and grade.passed is False and grade.score <= 0.4
    assert grade.failure_category and "demo-note" not in grade.failure_category + grade.feedback
