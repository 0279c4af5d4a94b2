"""The loop's doctor sections: ceilings, the watch's time against a schedule, prompt paths."""

from __future__ import annotations

import pytest

from evolution.doctor import cadence
from grading.doctor import run_doctor
from tests.evolution.loop_helpers import looped

pytestmark = pytest.mark.django_db


def lines(only: str) -> list[str]:
    return [f.line() for f in run_doctor(only=[only]) if f.level != "pass"]


def test_an_unattended_entity_with_no_daily_analysis_ceiling_is_named():
    looped("pulse", kind="heartbeat", schedule="*/5 * * * *", loop={"maxAnalysesPerDay": None})
    looped("digest", loop={"maxAnalysesPerDay": None})  # attended: a person launches it
    found = lines("Loop ceilings")
    assert len(found) == 1 and "heartbeat:pulse" in found[0] and "maxAnalysesPerDay: null" in found[0]


def test_a_watch_the_schedule_cannot_fill_before_its_deadline_is_named():
    looped("weekly", schedule="0 9 * * 1", loop={"watch": {"deadlineHours": 336}})
    looped("often", schedule="*/5 * * * *")
    found = lines("Loop watch")
    assert len(found) == 1 and "scenario:weekly" in found[0] and "every 168 h" in found[0]


def test_cadence_reads_cron_gaps():
    assert cadence("0 */2 * * *").total_seconds() == 7200
    assert cadence("not a cron") is None
