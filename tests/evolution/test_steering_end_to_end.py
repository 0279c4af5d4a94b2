"""Issue 6's "done when" on the demo brain, through the same functions the pages call: a person sets the triage to
full autonomy (a widening, so loop_widen with the person as its approval), it improves itself with no card
answered, two regressions in a row pause it (announced once), a re-arm hands the gates back, and an idea is what
the next cycle opens on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from evolution.loop import intake
from evolution.models import ActionLog, Cycle
from evolution.steering import autonomy, supervision
from evolution.steering import settings as settings_writes
from grading.demo import TRIAGE_PATH
from hitl.models import Card, Notice
from tests.evolution.demo_helpers import SABOTEUR, SABOTEUR_SCENARIO, person_commits, run, tickets, triage, wrong

# The watch and the merge gate alone: the pre-merge check has its own tests (test_check_*.py).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_check]


def cycles_now() -> list[Cycle]:
    return list(Cycle.objects.filter(entity=triage(), analysed=True).order_by("started_at", "id"))


def drive_until_new_cycle(known: int) -> Cycle:
    for ticket in tickets():
        run(ticket)
        found = cycles_now()
        if len(found) > known:
            return found[-1]
    raise AssertionError("no new cycle")


def test_full_autonomy_then_the_breaker_then_a_rearm_then_an_idea(embedded, alice, tmp_path):
    start = timezone.now()
    # --- A person widens the triage to full autonomy: loop_set refuses, loop_widen (the person approves) writes.
    with pytest.raises(settings_writes.SettingsRefusal) as refused:
        settings_writes.loop_set(triage(), "loop.autonomy.decide", value="auto", actor="alice")
    assert refused.value.code == "refused" and "loop_widen" in refused.value.detail
    for key in ("loop.autonomy.decide", "loop.autonomy.merge"):
        settings_writes.loop_widen(triage(), key, value="auto", actor="alice", is_agent=False)
    text = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    assert "decide: auto" in text and "# Graded by computed accuracy" in text  # the file's comments are kept
    assert ActionLog.objects.filter(op="loop_widen", actor="alice").count() == 2
    assert autonomy.gates(triage()).decide == "auto"

    # --- It improves itself with no card answered.
    with time_machine.travel(start, tick=True):
        first = drive_until_new_cycle(0)
        failed = [t for t in tickets() if wrong(run(t))][:1] or tickets()[:1]
        first.refresh_from_db()
        for _ in range(5):
            if first.status:
                break
            run(failed[0])
            first.refresh_from_db()
    assert first.status in (Cycle.Status.VALIDATED, Cycle.Status.REGRESSED)
    assert not Card.objects.filter(producer="loop").exists()

    # --- A saboteur's changes regress twice in a row: the breaker pauses the entity, announced once.
    person_commits(
        embedded,
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text().replace("fixer", "saboteur"),
        },
        tmp_path,
        "Saboteur",
    )
    billing = [t for t in tickets() if t["_expected"] == "billing"]
    moment = start
    for _ in range(2):
        moment += timedelta(hours=25)  # past any rest
        with time_machine.travel(moment, tick=True):
            cycle = drive_until_new_cycle(len(cycles_now()))
            for ticket in billing:
                run(ticket)
                cycle.refresh_from_db()
                if cycle.status:
                    break
            assert cycle.status == Cycle.Status.REGRESSED, cycle.reason
    why = autonomy.paused(triage())
    assert why and "regressed settles in a row" in why
    assert Notice.objects.filter(kind="paused").count() == 1

    # --- Paused: the next proposal is a person's card with the reminder; a re-arm hands the gates back.
    moment += timedelta(hours=25)
    with time_machine.travel(moment, tick=True):
        carded = drive_until_new_cycle(len(cycles_now()))
        card = carded.rounds.get(number=1).card
        assert card is not None and "paused by the breaker" in card.text
        supervision.rearm(triage(), actor="alice", reason="the saboteur is gone")
        assert autonomy.paused(triage()) is None and autonomy.gates(triage()).decide == "auto"

        # --- An idea is what the next cycle opens on (after the carded proposal settles).
        posted = intake.post(triage(), "Lead with the billing words", author="alice", reply_to="telegram:42")
        assert not posted.opened and posted.idea.status == "queued"
        from hitl.actions import answer_card

        assert answer_card(card.pk, user=alice, is_agent=False, choice="skip", note="no", via="dashboard").ok
        assert intake.deliver_queued() == 1
    opened_on_idea = cycles_now()[-1]
    assert opened_on_idea.origin == Cycle.Origin.IDEA and opened_on_idea.idea_id == posted.idea.pk
