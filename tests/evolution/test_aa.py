"""A/A calibration (issue 31): the check with the incumbent as its own candidate on freshly frozen sets, and the
watch on two windows of one commit — how often the verdict would speak when nothing changed."""

from __future__ import annotations

import io
import random
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from evolution.loop import aa
from evolution.models import AaReport, Cycle
from grading.models import Execution
from tests.evolution.demo_helpers import embedded, person_commits, run, tickets, triage  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True)]

LOOP_MODULE = "features/support/triage/triage.loop.py"
#: Tickets the demo triage labels right: a history that opens no cycle.
RIGHT = (0, 1, 2, 5, 6, 7, 8, 11, 12, 13)

#: A grader that misreads one run in ten: its reading of a run is drawn from the run's id, so the two sides of a
#: pair (two replays, two ids) are read independently, as two calls of a noisy judge are.
NOISY = """

import hashlib

_measured = measure


def measure(run):
    values = _measured(run)
    draw = int(hashlib.sha256(str(run.runId).encode()).hexdigest()[:8], 16) / 2**32
    if draw < 0.1:
        return [{"id": v["id"], "value": 1.0 - v["value"]} for v in values]
    return values
"""


def history() -> None:
    for index in RIGHT:
        run(tickets()[index])


def test_an_aa_run_on_deterministic_replays_never_validates_nor_regresses(embedded):  # noqa: F811
    history()
    report = aa.request(triage(), trials=20, actor="alice")
    report.refresh_from_db()  # the broker is eager here: the worker ran it when the request committed
    assert report.status == AaReport.Status.DONE, report.error
    check = report.result["check"]
    assert check["possible"] is True and len(check["trials"]) == 20
    assert (check["validated"], check["regressed"], check["inconclusive"]) == (0, 0, 20)
    assert all(t["rule"] == "g′" and "within noise: gain 0" in t["reason"] for t in check["trials"])
    assert check["spend_usd"] == "0" or check["spend_usd"].startswith("0")
    assert "0 validated, 0 regressed, 20 unvalidated or inconclusive" in report.result["words"]
    # Nothing the A/A replayed is history or opened a cycle.
    assert not Cycle.objects.filter(entity=triage()).exists()
    inputs = sum(t["inputs"] for t in check["trials"])  # a set frozen through an old run has less behind it
    assert Execution.objects.filter(entity=triage(), loop_launched=True).count() == 2 * inputs


def test_an_aa_run_on_a_noisy_grader_validates_at_most_one_in_twenty(embedded, tmp_path, monkeypatch):  # noqa: F811
    module = (Path(embedded.BRAIN_CHECKOUT) / LOOP_MODULE).read_text() + NOISY
    person_commits(embedded, {LOOP_MODULE: module}, tmp_path, "A noisy grader")
    history()
    ids = random.Random(31)
    monkeypatch.setattr("grading.replays.uuid.uuid4", lambda: uuid.UUID(int=ids.getrandbits(128), version=4))
    report = aa.request(triage(), trials=20, actor="alice")
    report.refresh_from_db()
    check = report.result["check"]
    assert report.status == AaReport.Status.DONE and len(check["trials"]) == 20
    assert check["validated"] <= 1, check
    # The noise is seen: not every trial reads "gain 0" (the A/A shows what noise the check lives with).
    assert any("within noise: gain 0;" not in t["reason"] for t in check["trials"])


def test_the_watch_is_read_on_windows_of_one_commit(embedded):  # noqa: F811
    for _ in range(3):
        history()  # 30 graded runs at one commit, none bad: windows of ten
    report = aa.run(aa.request(triage(), trials=1, actor="alice", send=False).pk)
    watch = report.result["watch"]
    assert watch["possible"] is True and watch["runsPerWindow"] == 10 and watch["minFailures"] == 7
    # One window stands for the cycle's, the next is read as the watch would read it (one trial: one window).
    assert watch["windows"] == 1 and watch["regressed"] == 0 and watch["bad"] == [0]


def test_a_lost_message_is_sent_again_by_the_sweep_and_a_report_runs_once(embedded):  # noqa: F811
    from datetime import timedelta

    from django.utils import timezone

    history()
    report = aa.request(triage(), trials=1, actor="alice", send=False)
    assert aa.due(timezone.now()) == []  # just recorded: its message may still be on the way
    later = timezone.now() + timedelta(minutes=3)
    assert aa.due(later) == [report.pk]
    assert aa.sweep(later) == 1  # the eager broker runs it
    report.refresh_from_db()
    assert report.status == AaReport.Status.DONE and aa.run(report.pk) is None and aa.due(later) == []


def test_bad_trials_are_refused_naming_them(embedded):  # noqa: F811
    with pytest.raises(aa.AaRefused, match="trials: 0 is not a whole number from 1 to 100"):
        aa.request(triage(), trials=0, actor="alice")


def test_the_command_runs_an_aa_and_prints_it(embedded):  # noqa: F811
    history()
    out = io.StringIO()
    call_command("loop", "aa", "scenario:triage", "--trials", "2", stdout=out)
    text = out.getvalue()
    assert "A/A of scenario:triage" in text and "0 validated, 0 regressed, 2 unvalidated" in text
    assert "trial 2:" in text


def test_the_api_records_an_aa_a_worker_runs_and_reads_it_back(embedded, alice):  # noqa: F811
    from rest_framework.test import APIClient

    from singularity.models import ApiToken

    history()
    _, key = ApiToken.issue(alice, "script", is_agent=False)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    answer = api.post("/api/loop/aa/", {"targetKind": "scenario", "targetId": "triage", "trials": 1}, format="json")
    assert answer.status_code == 202, answer.json()
    read = api.get(f"/api/loop/aa/{answer.json()['id']}/").json()
    assert read["status"] == "done" and read["check"]["regressed"] == 0 and read["check"]["validated"] == 0
    assert isinstance(read["spendUsd"], str) and read["entity"] == "scenario:triage" and read["words"]
    # Bad input is named, never a 500; an agent reads but does not run one.
    bad = api.post("/api/loop/aa/", {"targetKind": "scenario", "targetId": "triage", "trials": 0}, format="json")
    assert bad.status_code == 400 and bad.json() == {
        "error": "invalid",
        "detail": "trials: 0 is not a whole number from 1 to 100",
    }
    nothing = api.post("/api/loop/aa/", {"targetKind": "scenario", "targetId": "ghost"}, format="json")
    assert nothing.status_code == 404 and nothing.json()["error"] == "not_found"
    assert api.get("/api/loop/aa/999999/").json()["error"] == "not_found"
    _, agent_key = ApiToken.issue(alice, "agent", is_agent=True)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_key}")
    refused = agent.post("/api/loop/aa/", {"targetKind": "scenario", "targetId": "triage"}, format="json")
    assert refused.status_code == 403 and refused.json()["error"] == "refused"
    schema = api.get("/api/schema/", {"format": "json"}).json()
    assert schema["paths"]["/api/loop/aa/"]["post"]["operationId"] == "loop_aa"


def test_the_policy_view_shows_the_aa_panel_beside_the_checks_settings(embedded, alice, client):  # noqa: F811
    history()
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    page = client.post("/evolution/entities/scenario/triage/aa/", {"trials": "1"}, HTTP_HX_REQUEST="true")
    text = page.content.decode()
    assert 'id="aa-panel"' in text and "the check replays 3 inputs × 1" in text
    assert "0 validated, 0 regressed, 1 unvalidated or inconclusive" in text
    policy = client.get("/evolution/entities/scenario/triage/policy/").content.decode()
    assert "A/A calibration" in policy and "the watch reads 10 runs and regresses at 7 bad" in policy
    wrong = client.post("/evolution/entities/scenario/triage/aa/", {"trials": "many"}, HTTP_HX_REQUEST="true")
    assert "trials: &#x27;many&#x27; is not a whole number" in wrong.content.decode()
