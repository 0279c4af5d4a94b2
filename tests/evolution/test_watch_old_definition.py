"""Runs on the old definition are nobody's evidence about a merged change (the watch's span, issue 10's note).

A forge's merge time is to the second and a merge made outside the dashboard reaches the engine at its next
sync, so a run started "since the merge" may still have run the definition before it. The watch counts only
runs at a commit that contains the merge.
"""

from __future__ import annotations

import pytest

from evolution.forges.local import LocalForge
from evolution.loop import machine
from evolution.models import Cycle
from grading.models import Execution
from grading.replays import entity_at
from grading.runners import run_entity
from grading.sync import current_checkout, sync_brain
from tests.evolution.demo_helpers import drive_until_card, press, run, tickets, triage, wrong

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_check]


def merged_and_watched(alice):
    """Triage's accepted change merged on the local forge, its watch open: (the cycle, its round, failing tickets)."""
    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    LocalForge().merge_pull(rnd.pr_number, by="alice")
    machine.on_pull_event(rnd.pr_number)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    return cycle, rnd, failed


def test_a_run_on_the_old_definition_after_the_merge_does_not_count_toward_the_watch(embedded, alice):
    cycle, rnd, failed = merged_and_watched(alice)
    assert cycle.phase == Cycle.Phase.WATCHING and rnd.merge_sha
    # Two failing tickets that a worker started on the definition before the merge (its commit is the base).
    old = entity_at(triage(), rnd.base_sha, current_checkout())
    for ticket in (failed * 2)[:2]:
        execution = run_entity(old, input=ticket, source=Execution.Source.DEMO)
        assert execution.commit == rnd.base_sha and wrong(execution)
    machine.evaluate(cycle)
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING, cycle.reason  # the old definition's failures regress nothing
    # The brain syncs; the same tickets on the merged definition are the watch's evidence.
    sync_brain()
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason


def test_the_commits_since_the_merge_are_read_once_each_not_once_per_run(embedded, alice):
    """The old-definition check reads the span's distinct commits: the run's default ordering (its start) must not
    join the DISTINCT, which made it read a row per run (a thousand at a full window)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evolution.loop import watch

    cycle, _, failed = merged_and_watched(alice)
    for ticket in (failed * 3)[:3]:
        run(ticket)
    with CaptureQueriesContext(connection) as seen:
        watch.span(cycle, cycle.watch_opened_at + (cycle.watch_deadline - cycle.watch_opened_at) / 2)
    distinct = [q["sql"] for q in seen.captured_queries if "DISTINCT" in q["sql"]]
    assert distinct, [q["sql"] for q in seen.captured_queries]
    select = distinct[0].split(" FROM ")[0]
    assert "started_at" not in select, select
