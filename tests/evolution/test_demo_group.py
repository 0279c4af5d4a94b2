"""The demo's lock group on the embedded default (issue 13's "Done when").

Support triage and support urgency are one group (``support``, ``repair: wait``
in the demo manifest): while triage's accepted change is being checked, waits
on its merge or is watched, urgency's failing grades open nothing, the refusal
names the group, triage's change and its PR, and the fleet says urgency is held
by the group. Once triage's change settles, urgency's next failing grades open
its own cycle: the two take turns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle, PullRequest
from grading.demo import URGENCY_PATH
from grading.models import Entity, Execution
from grading.runners import run_entity
from grading.sync import sync_brain
from tests.evolution.demo_helpers import drive_until_card, press, run, tickets, triage, wrong

pytestmark = [pytest.mark.django_db(transaction=True)]


def urgency() -> Entity:
    return Entity.objects.get(path=URGENCY_PATH, present=True)


def urgent_tickets() -> list[dict]:
    path = Path(settings.DEMO_BRAIN_DIR) / "features/support/urgency/tickets.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_urgency(ticket: dict) -> Execution:
    return run_entity(urgency(), input=ticket, source=Execution.Source.DEMO)


def fail_urgency(times: int) -> None:
    """Run urgency on tickets its demo rules get wrong until ``times`` of them have failed."""
    failing = 0
    for ticket in urgent_tickets() * 3:
        if (run_urgency(ticket).output or {}).get("result") != ticket["_expected"]:
            failing += 1
        if failing >= times:
            return
    raise AssertionError("the demo urgency rules never failed")


def fleet_text(user) -> str:
    web = Client()
    web.force_login(user)
    page = web.get("/evolution/")
    assert page.status_code == 200
    return page.content.decode()


def test_the_demo_support_group_takes_turns_and_the_fleet_says_who_holds_it(embedded, alice):
    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    first = Cycle.objects.get(entity=triage(), analysed=True)
    pull = PullRequest.objects.get(number=first.rounds.get(number=1).pr_number)
    assert first.phase in (Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT)

    # Triage's change is past its Accept: urgency's failures open nothing, the refusal names the holder.
    fail_urgency(4)
    assert not Cycle.objects.filter(entity=urgency(), analysed=True).exists()
    refused = Cycle.objects.filter(entity=urgency(), status=Cycle.Status.SKIPPED).latest("pk")
    assert "lock group support" in refused.reason and f"PR #{pull.number}" in refused.reason, refused.reason
    text = fleet_text(alice)
    assert "Support urgency" in text and "support" in text and f"PR #{pull.number}" in text

    # Triage's change lands and its watch settles; then urgency's turn comes.
    first.refresh_from_db()
    if first.phase == Cycle.Phase.CHECKING:
        machine.check_tick()
        first.refresh_from_db()
    assert first.phase == Cycle.Phase.MERGE_WAIT, (first.phase, first.reason)
    LocalForge().merge_pull(pull.number, by="alice")
    machine.on_pull_event(pull.number)
    sync_brain()
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    first.refresh_from_db()
    assert first.phase == Cycle.Phase.SETTLED, (first.phase, first.reason)

    fail_urgency(4)
    second = Cycle.objects.filter(entity=urgency(), analysed=True).first()
    assert second is not None, list(Cycle.objects.filter(entity=urgency()).values_list("status", "reason"))
