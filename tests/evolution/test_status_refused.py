"""No silent status failure (issue 32, R12.15, R10.24), on the fake GitHub: a credential that may no longer post
commit statuses is found before the apply pushes anything, and a status GitHub refuses during the check is a
notice, a needs-you item and the round's note — the check never answers validated while GitHub shows pending.
"""

from __future__ import annotations

import pytest

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.models import Cycle, Round
from evolution.steering import needs_you
from grading.sync import sync_brain
from hitl.models import Card, Notice
from tests.evolution.demo_helpers import drive_until_card, press, tickets, triage
from tests.evolution.github_helpers import push
from tests.evolution.test_autonomy_lands import _files, _replay
from tests.evolution.test_check_end_to_end import held_steps
from tests.fakes.github import TOKEN

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_status_refused_during_the_check_is_a_notice_a_needs_you_item_and_the_rounds_note(
    on_github, settings, alice, tmp_path, monkeypatch
):
    on_github.protection = [DIFF_GATE, VALIDATION]
    push(on_github, tmp_path, "main", _files(settings), message="Merge on its own")
    sync_brain()
    started = held_steps(monkeypatch)
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert on_github.statuses(rnd.head_sha) == {DIFF_GATE: "success", VALIDATION: "pending"}
    on_github.tokens[TOKEN] = False  # the permission revoked mid-cycle
    _replay(started)
    rnd.refresh_from_db()
    cycle.refresh_from_db()
    assert rnd.check_verdict["verdict"] == "validated"  # what the check measured stays on record
    assert on_github.statuses(rnd.head_sha)[VALIDATION] == "pending"  # GitHub never heard it
    assert rnd.merge_gate == "human" and "singularity/validation could not be set to success" in rnd.gate_note
    assert on_github.pull(rnd.pr_number).state == "open" and not on_github.pull(rnd.pr_number).auto_merge
    assert Notice.objects.filter(kind="status-refused", text__contains="Commit statuses: Read and write").exists()
    items = [i for i in needs_you.items() if i["cycleId"] == cycle.pk]
    assert [i["gate"] for i in items] == ["merge"]
    assert cycle.phase == Cycle.Phase.MERGE_WAIT


@pytest.mark.no_check
def test_an_apply_whose_credential_may_not_post_statuses_pushes_nothing_and_says_how_to_fix_it(on_github, alice):
    on_github.tokens[TOKEN] = False
    card, _ = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert rnd.status == Round.Status.FAILED and rnd.pr_number is None
    retry = Card.objects.get(producer="loop", kind=Card.Kind.RETRY, status=Card.Status.PENDING)
    assert "GITHUB_TOKEN may not post commit statuses on acme/brain" in retry.text
    assert "nothing was pushed" in retry.text and "Commit statuses: Read and write" in retry.text
    assert not [r for r in on_github.requests if "receive-pack" in r.path]  # no orphan branch
    assert [i["gate"] for i in needs_you.items() if i["cycleId"] == cycle.pk] == ["retry"]
