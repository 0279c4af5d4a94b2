"""The notices of a loop PR say what happened (issue 28): who merges it, and who did — auto-merge or a person."""

from __future__ import annotations

import pytest

from evolution.models import Cycle
from grading.demo import TRIAGE_PATH
from hitl.models import Notice
from tests.evolution.demo_helpers import person_commits
from tests.evolution.test_check_end_to_end import accept_first_card, triage_text

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_pr_that_auto_merges_is_announced_as_merged_by_auto_merge_not_left_to_a_person(embedded, alice, tmp_path):
    person_commits(
        embedded,
        {TRIAGE_PATH: triage_text(embedded, "  autonomy: {decide: human, merge: auto}\n")},
        tmp_path,
        "Merge on its own",
    )
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert rnd.merge_gate == "auto" and cycle.merged_at is not None, (cycle.phase, rnd.gate_note)
    opened = Notice.objects.get(kind="pr-opened")
    assert "A person merges it" not in opened.text
    merged = Notice.objects.get(kind="pr-merged")
    assert merged.title == f"Support triage: PR #{rnd.pr_number} merged (cycle {cycle.pk})"
    assert merged.text.startswith(f"PR #{rnd.pr_number} was merged by auto-merge, armed by the loop (cycle {cycle.pk})")
    assert "A person" not in merged.text


def test_a_pr_a_person_merges_is_announced_with_their_name(embedded, alice, client):
    cycle, rnd = accept_first_card(alice)
    rnd.refresh_from_db()
    assert rnd.merge_gate == "human"
    opened = Notice.objects.get(kind="pr-opened")
    assert "pre-merge check" in opened.text
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    client.post(f"/evolution/pulls/{rnd.pr_number}/merge/")
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    merged = Notice.objects.get(kind="pr-merged")
    assert merged.text.startswith(f"PR #{rnd.pr_number} was merged by alice")
