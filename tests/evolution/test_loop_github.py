"""The loop end to end with LOOP_FORGE=github: the demo brain on the fake GitHub, real PyGithub, real git, eager Celery.

Seed 003 "How the engine notices the PR landed", "Choosing who answers the
gates" and "Revert" (R12.3–R12.7, R12.11–R12.13, R15.3–R15.5, R15.8):

- merge: human — the loop pushes its branch, sets singularity/diff-gate,
  opens the PR; a person merges it on GitHub; the webhook wakes the wait
  within one request, and with the webhook dropped the poll notices it;
- merge: auto — the arm waits for every required check and GitHub merges; a
  head pushed past the vouched commit has the arm taken out and the round
  demoted; a PR already clean, whose arm GitHub refuses ("Pull request is
  in clean status"), is merged by the loop at the vouched head (issue 32);
  a base branch requiring nothing or a forbidden method demotes the round
  with GitHub's reason; a regressed change's revert PR
  carries both statuses and is auto-merged once CI is green;
- a webhook delivered over real HTTP to a live server moves the cycle within seconds.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.conf import settings as django_settings
from django.test import Client

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.loop import machine
from evolution.models import Cycle, Round
from grading.demo import TRIAGE_PATH
from grading.sync import sync_brain
from hitl.models import Card, Notice
from tests.evolution.demo_helpers import (
    SABOTEUR,
    SABOTEUR_SCENARIO,
    drive_until_card,
    press,
    run,
    tickets,
    triage,
    wrong,
)
from tests.evolution.github_helpers import push

# The merge gate and the watch on GitHub; the pre-merge check on GitHub is tests/evolution/test_check_github.py.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_check]

CI = "ci/tests"


def person_pushes(fake, tmp_path, files: dict[str, str], message: str) -> None:
    push(fake, tmp_path, "main", files, message=message)
    sync_brain()


def autonomy(block: str) -> str:
    text = (Path(django_settings.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    edited = text.replace("loop:\n  enabled: true\n", f"loop:\n  enabled: true\n  autonomy: {block}\n", 1)
    assert edited != text
    return edited


def go_autonomous(fake, tmp_path, block: str = "{decide: auto, merge: auto}", extra: dict | None = None) -> None:
    person_pushes(fake, tmp_path, {TRIAGE_PATH: autonomy(block), **(extra or {})}, "Full autonomy")


def until_cycle(pool) -> tuple[Cycle, list[dict]]:
    failed = []
    for ticket in pool:
        if wrong(run(ticket)):
            failed.append(ticket)
        cycle = Cycle.objects.filter(entity=triage(), analysed=True).first()
        if cycle is not None:
            cycle.refresh_from_db()
            return cycle, failed
    raise AssertionError("no cycle opened")


def accepted_pr(alice) -> tuple[Cycle, Round, list[dict]]:
    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    return cycle, cycle.rounds.get(number=1), failed


def settled_valid(cycle: Cycle, failed: list[dict]) -> None:
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason


# --- merge: human --------------------------------------------------------------------------------


def test_a_person_merging_on_github_is_noticed_by_the_webhook_and_the_change_validated(on_github, alice):
    cycle, rnd, failed = accepted_pr(alice)
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and rnd.status == Round.Status.APPLIED
    pull = on_github.pull(rnd.pr_number)
    assert pull.head == rnd.branch and pull.head_sha == rnd.head_sha == on_github.tip(rnd.branch)
    # No pre-merge check here (no_check): singularity/validation says so, so a brain may require it on every PR.
    assert on_github.statuses(rnd.head_sha) == {DIFF_GATE: "success", VALIDATION: "success"}
    assert rnd.pr_url == f"{on_github.origin}/acme/brain/pull/{rnd.pr_number}"
    assert "## Hypothesis" in pull.body and f"Cycle {cycle.pk}, round 1" in pull.body
    assert Notice.objects.filter(kind="pr-opened", url=rnd.pr_url).exists()
    client = Client()
    client.force_login(alice)
    for page in ("/evolution/", f"/evolution/cycles/{cycle.pk}/", "/evolution/pulls/"):
        assert rnd.pr_url in client.get(page).content.decode(), page  # the cards, the story and the fleet link GitHub
    assert client.get(f"/evolution/pulls/{rnd.pr_number}/").url == rnd.pr_url

    merge_sha = on_github.merge(rnd.pr_number, by="alice")
    assert on_github.deliver(client) == [200, 200]  # opened (ignored), closed (wakes the wait)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING and rnd.merge_sha == merge_sha
    assert triage().commit == merge_sha  # the brain was synced as the merge was noticed
    settled_valid(cycle, failed)
    assert rnd.pr_url in client.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    listed = client.get("/evolution/pulls/").content.decode()
    assert rnd.pr_url in listed and "merged" in listed


def test_with_the_webhook_dropped_the_poll_notices_the_merge(on_github, alice):
    on_github.dropping = True
    cycle, rnd, failed = accepted_pr(alice)
    on_github.merge(rnd.pr_number, by="alice")
    assert on_github.deliver(Client()) == []
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    with time_machine.travel(cycle.next_poll_at + timedelta(seconds=1), tick=True):
        assert machine.poll_due() == 1
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING, cycle.reason
    settled_valid(cycle, failed)


def test_a_webhook_over_http_moves_the_cycle_within_seconds(on_github, alice, live_server):
    cycle, rnd, _ = accepted_pr(alice)
    on_github.webhook_url = f"{live_server.url}/github/webhook/"
    merged_at = time.monotonic()
    on_github.merge(rnd.pr_number, by="alice")
    while time.monotonic() - merged_at < 20:
        cycle.refresh_from_db()
        if cycle.phase == Cycle.Phase.WATCHING:
            break
        time.sleep(0.1)
    noticed = time.monotonic() - merged_at
    assert cycle.phase == Cycle.Phase.WATCHING, [d.answered for d in on_github.outbox]
    assert noticed < 10
    sent = [d for d in on_github.outbox if d.sent]
    while any(d.answered is None for d in sent) and time.monotonic() - merged_at < 30:
        time.sleep(0.05)  # the cycle moved inside the delivery's request; its answer is on its way back
    assert [d.answered for d in sent] == [200]


# --- merge: auto ---------------------------------------------------------------------------------


def test_an_arm_is_held_until_ci_is_green_and_github_merges_it(on_github, tmp_path):
    on_github.protection = [DIFF_GATE, CI]
    go_autonomous(on_github, tmp_path)
    cycle, failed = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    assert rnd.acceptance == "auto" and rnd.merge_gate == "auto" and cycle.phase == Cycle.Phase.MERGE_WAIT
    pull = on_github.pull(rnd.pr_number)
    assert pull.state == "open" and pull.auto_merge == {"method": "merge", "by": "singularity-bot"}
    on_github.post_status(rnd.head_sha, CI, "success")  # the CI answers: GitHub merges the armed PR
    assert on_github.pull(rnd.pr_number).merged
    on_github.deliver(Client())
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    settled_valid(cycle, failed)
    assert not Card.objects.filter(producer="loop").exists()


def test_a_head_pushed_past_the_vouched_commit_drops_the_arm_and_the_round_waits_on_a_person(on_github, tmp_path):
    on_github.protection = [DIFF_GATE, CI]
    go_autonomous(on_github, tmp_path)
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    moved = push(on_github, tmp_path, rnd.branch, {"NOTE.md": "pushed after the loop vouched\n"}, message="push")
    assert on_github.pull(rnd.pr_number).auto_merge is not None  # GitHub keeps a writer's push armed
    on_github.deliver(Client())  # synchronize wakes the wait; its read takes the arm out
    rnd.refresh_from_db()
    assert rnd.merge_gate == "human" and "no longer stands" in rnd.gate_note
    assert on_github.pull(rnd.pr_number).auto_merge is None
    on_github.post_status(moved, CI, "success")
    assert on_github.pull(rnd.pr_number).state == "open"  # green CI alone merges nothing: no arm, no diff gate
    assert Notice.objects.filter(kind="merge-demoted", text__contains="no longer stands").exists()


def test_a_pr_already_clean_is_merged_by_the_loop_at_the_vouched_head_never_handed_to_a_person(on_github, tmp_path):
    on_github.protection = [DIFF_GATE]  # set before the PR opens: the PR is clean at once, GitHub refuses the arm
    go_autonomous(on_github, tmp_path)
    cycle, failed = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    cycle.refresh_from_db()
    assert rnd.merge_gate == "auto" and rnd.gate_note == "" and cycle.phase == Cycle.Phase.WATCHING
    pull = on_github.pull(rnd.pr_number)
    assert pull.merged and pull.merged_by == "api" and pull.auto_merge is None
    graphql = [r for r in on_github.requests if r.path == "/api/graphql"]
    merges = [r for r in on_github.requests if r.method == "PUT" and r.path.endswith(f"/pulls/{rnd.pr_number}/merge")]
    assert len(graphql) == 1 and [m.status for m in merges] == [200]  # the arm refused, then one merge
    assert not Notice.objects.filter(kind="merge-demoted").exists()
    assert not Card.objects.filter(producer="loop").exists()
    settled_valid(cycle, failed)


def test_a_base_branch_requiring_nothing_still_demotes_the_round_with_githubs_reason(on_github, tmp_path):
    on_github.protection = None
    go_autonomous(on_github, tmp_path)
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and rnd.merge_gate == "human"
    assert "Protected branch rules not configured for this branch" in rnd.gate_note
    assert on_github.pull(rnd.pr_number).state == "open"  # the PR waits for a person
    assert not [r for r in on_github.requests if r.method == "PUT" and "/merge" in r.path]


def test_a_clean_pr_with_a_forbidden_method_is_not_merged_with_a_method_nobody_chose(on_github, tmp_path):
    on_github.protection = [DIFF_GATE]
    on_github.allow_merge_commit = False
    go_autonomous(on_github, tmp_path)
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and rnd.merge_gate == "human"
    assert "Merge commits are not allowed on this repository." in rnd.gate_note
    assert on_github.pull(rnd.pr_number).state == "open"
    assert Notice.objects.filter(kind="merge-demoted", text__contains="not allowed").exists()


def test_a_regressed_change_under_merge_auto_is_reverted_by_an_auto_merged_revert(on_github, tmp_path):
    on_github.protection = [DIFF_GATE, VALIDATION, CI]
    text = autonomy("{decide: auto, merge: auto}").replace("pipeline: fixer", "pipeline: saboteur")
    person_pushes(
        on_github,
        tmp_path,
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: text,
        },
        "Autonomous saboteur",
    )
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    # With no check the loop posts singularity/validation as success itself ("no pre-merge check"); the arm holds
    # on the CI alone, and GitHub merges the armed PR once it is green.
    assert on_github.statuses(rnd.head_sha) == {DIFF_GATE: "success", VALIDATION: "success"}
    assert on_github.pull(rnd.pr_number).auto_merge is not None
    on_github.post_status(rnd.head_sha, CI, "success")
    on_github.deliver(Client())
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.WATCHING
    for ticket in [t for t in tickets() if t["_expected"] == "billing"][:7]:  # the watch regresses at 7 bad
        assert wrong(run(ticket))
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.status == Cycle.Status.REGRESSED and cycle.phase == Cycle.Phase.REVERTING
    revert = on_github.pull(rnd.revert_pr_number)
    assert on_github.statuses(revert.head_sha) == {DIFF_GATE: "success", VALIDATION: "success"}
    assert rnd.revert_merge_gate == "auto" and revert.auto_merge is not None and revert.state == "open"
    on_github.post_status(revert.head_sha, CI, "success")
    assert on_github.pull(rnd.revert_pr_number).merged
    on_github.deliver(Client())
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert rnd.revert_outcome == "merged" and rnd.revert_merged_at is not None
    assert cycle.phase == Cycle.Phase.SETTLED and cycle.claim is None
    assert on_github.show("main", TRIAGE_PATH) == on_github.show(rnd.base_sha, TRIAGE_PATH)


def test_a_person_disabling_the_auto_merge_on_github_hands_the_round_to_a_person(on_github, tmp_path):
    on_github.protection = [DIFF_GATE, CI]
    go_autonomous(on_github, tmp_path)
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    assert rnd.merge_gate == "auto"
    on_github.disable_auto_merge(rnd.pr_number, by="bob")
    on_github.deliver(Client())  # auto_merge_disabled wakes the wait; the read finds no arm
    rnd.refresh_from_db()
    cycle.refresh_from_db()
    assert rnd.merge_gate == "human" and "no longer stands" in rnd.gate_note
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    on_github.post_status(rnd.head_sha, CI, "success")
    assert on_github.pull(rnd.pr_number).state == "open"  # nobody re-armed it: a person merges


def test_an_armed_pr_past_its_deadline_is_disarmed_before_it_is_closed(on_github, tmp_path):
    on_github.protection = [DIFF_GATE, CI]
    go_autonomous(on_github, tmp_path)
    cycle, _ = until_cycle(tickets())
    rnd = cycle.rounds.get(number=1)
    with time_machine.travel(cycle.merge_deadline + timedelta(seconds=1), tick=True):
        machine.poll_due()
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.UNVALIDATED and "the loop closed it" in cycle.reason
    pull = on_github.pull(rnd.pr_number)
    assert pull.state == "closed" and not pull.merged and pull.auto_merge is None
    actions = [d.action for d in on_github.outbox]
    assert actions.index("auto_merge_disabled") < actions.index("closed")
    on_github.post_status(rnd.head_sha, CI, "success")  # a check that greens later merges nothing
    assert not on_github.pull(rnd.pr_number).merged
