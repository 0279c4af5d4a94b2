"""The pre-merge check on the demo brain and the local forge, end to end (seed 003 "What the check does";
CONFORMANCE R11.14–R11.18, R11.28–R11.33, R12.4, R12.9, R12.13, R15.2, R25.2, R25.4).

The demo triage is a workflow, so its cycles freeze the tickets they were
opened on and replay the candidate (the PR's head) and the incumbent (the
frozen base) on them before anyone may merge.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.forges.local import LocalForge
from evolution.loop import check, machine
from evolution.models import Cycle, PullRequest, Replay, Round
from grading.demo import TRIAGE_PATH
from grading.models import Execution, Grade
from hitl.models import Card, Notice
from singularity.brain.git import clone, git
from tests.evolution.demo_helpers import (
    SABOTEUR,
    SABOTEUR_SCENARIO,
    drive_until_card,
    person_commits,
    press,
    tickets,
    triage,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

LOOP_MODULE = "features/support/triage/triage.loop.py"


def triage_text(embedded, extra: str = "", *, proposer: str = "fixer") -> str:
    """The triage scenario with ``extra`` lines under its ``loop:`` block (and the proposer pipeline named)."""
    text = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    text = text.replace("loop:\n  enabled: true\n", f"loop:\n  enabled: true\n{extra}", 1)
    return text.replace("pipeline: fixer", f"pipeline: {proposer}")


def with_verdict(embedded, body: str) -> str:
    """The triage's loop module with a verdict(spec, pairs) of the brain's own appended."""
    module = (Path(embedded.BRAIN_CHECKOUT) / LOOP_MODULE).read_text()
    return module + "\n\n" + body.strip() + "\n"


def held_steps(monkeypatch) -> list[int]:
    """Replays are recorded instead of started (a broker that never delivers them)."""
    started: list[int] = []
    monkeypatch.setitem(machine.STEPS, "replay", started.append)
    return started


def accept_first_card(alice) -> tuple[Cycle, Round]:
    card, _ = drive_until_card(tickets())
    assert card.kind == Card.Kind.DECIDE
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    return cycle, cycle.rounds.get(number=1)


def states(sha: str) -> dict[str, str]:
    return {s.context: s.state for s in LocalForge().statuses(sha)}


def test_a_proposal_is_checked_on_the_frozen_tickets_before_anyone_may_merge(embedded, alice, monkeypatch):
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION]
    started = held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    assert cycle.phase == Cycle.Phase.CHECKING and rnd.status == Round.Status.APPLIED
    # R11.15: the head is pinned and the status pending on it.
    assert rnd.checked_sha == rnd.head_sha and states(rnd.head_sha)[VALIDATION] == "pending"
    # R11.16: one candidate replay per frozen input (trials 1), the incumbent re-run where no score is kept
    # (the anchor always); every id on the round before any replay ran or was graded.
    slots = cycle.frozen["slots"]
    assert len(rnd.check_run_ids) == len(slots) == 3  # the demo triage freezes three tickets (check.inputs)
    assert len(rnd.baseline_run_ids) == sum(s["score"] is None for s in slots) >= 1
    assert slots[0]["anchor"] and slots[0]["score"] is None
    assert sorted(started) == sorted(Replay.objects.filter(round=rnd).values_list("pk", flat=True))
    assert not Grade.objects.filter(execution_id__in=rnd.check_run_ids + rnd.baseline_run_ids).exists()
    candidates = Execution.objects.filter(pk__in=rnd.check_run_ids)
    assert {e.commit for e in candidates} == {rnd.head_sha} and all(e.loop_launched for e in candidates)
    incumbents = Execution.objects.filter(pk__in=rnd.baseline_run_ids)
    assert {e.commit for e in incumbents} == {cycle.frozen["baseSha"]}
    # Branch protection on the local forge holds the PR until the check has spoken.
    pull = PullRequest.objects.get(number=rnd.pr_number)
    assert any("singularity/validation is pending" in b for b in LocalForge().merge_blockers(pull))

    for replay_id in started:
        machine.replay(replay_id)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT
    record = rnd.check_verdict
    # The demo's good fix repairs two of the three frozen tickets (the anchor and the other bad run it was shown):
    # a gain of 2/3 beyond the band ±0.5. The proposer was shown the newest four runs (evidence.runs 4), so the
    # oldest ticket is held out, and the check says what it could see and what the held-out ticket alone says.
    assert record["verdict"] == "validated" and record["rule"] == "g′", record["reason"]
    assert "held-out 1 of 3" in record["reason"] and "seen inputs only" not in record["reason"]
    power = record["power"]
    assert power["pairs"] == 3 and power["heldOut"] == {"k": 1, "n": 3} and power["band"] == "0.5"
    assert power["twoValued"] is True and power["smallestGain"] == "0.666667" and power["seenOnly"] is False
    assert power["heldOutAnswer"]["verdict"] == "unvalidated" and power["heldOutAnswer"]["inputs"] == 1
    assert (
        "3 pairs of a 0/1 metric: a gain of 0.5 or less cannot validate (the smallest that can is 0.667)"
        in (power["words"])
    )
    assert "on the 1 held-out inputs alone: unvalidated" in power["words"]
    assert len(record["pairs"]) == 3 and {p["challenger"]["state"] for p in record["pairs"]} <= {"viable", "failed"}
    assert states(rnd.head_sha)[VALIDATION] == ("success" if record["verdict"] == "validated" else "error")
    # R11.17 / R23.12: the replays' grades open no cycle and are never carded for a rating.
    assert Cycle.objects.filter(entity=triage(), analysed=True).count() == 1
    replays = set(rnd.check_run_ids + rnd.baseline_run_ids)
    rated = Card.objects.filter(kind=Card.Kind.RATING).values_list("subject", "subject_url")
    assert not [card for card in rated if any(run_id in " ".join(card) for run_id in replays)]


def test_a_harmful_change_is_closed_by_the_check(embedded, alice, tmp_path):
    person_commits(
        embedded,
        {
            "features/loop/saboteur/saboteur.scenario.md": SABOTEUR_SCENARIO,
            "features/loop/saboteur/saboteur.pipeline.py": SABOTEUR,
            TRIAGE_PATH: triage_text(embedded, proposer="saboteur"),
        },
        tmp_path,
        "Try the saboteur",
    )
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    # R11.28 / R15.2: regressed closes the PR; nothing ships, so nothing is reverted.
    assert cycle.status == Cycle.Status.REGRESSED and cycle.phase == Cycle.Phase.SETTLED
    assert PullRequest.objects.get(number=rnd.pr_number).state == "closed"
    assert rnd.status == Round.Status.CLOSED and rnd.revert_pr_number is None and not rnd.merge_sha
    assert states(rnd.checked_sha)[VALIDATION] == "failure"
    # Only the fallback left: the held-out billing ticket the incumbent labelled right is lost (rule c). Rule (f)
    # no longer answers: the incumbent's own accuracy on these tickets stands under the floor 0.5 too.
    assert rnd.check_verdict["rule"] == "c", rnd.check_verdict["reason"]
    assert "lost 1 input(s) the incumbent held" in rnd.check_verdict["reason"]
    assert "charged twice" in rnd.check_verdict["reason"]
    assert rnd.check_verdict["reason"] in cycle.reason
    # R25.4: the closed PR carries the check's record as a comment, input by input.
    (comment,) = PullRequest.objects.get(number=rnd.pr_number).comments
    assert comment["body"].startswith("**The pre-merge check regressed**") and "| frozen input |" in comment["body"]
    assert comment["by"] == cycle.actor
    assert "What this check could see: 3 pairs of a 0/1 metric" in comment["body"]
    assert cycle.claim is None


@pytest.mark.parametrize(
    ("policy", "phase", "status", "gate"),
    [
        ("human", "merge_wait", "error", "human"),
        ("ship", "merge_wait", "success", "human"),
        ("close", "settled", "error", ""),
    ],
)
def test_an_unvalidated_check_follows_autonomy_on_inconclusive(embedded, alice, tmp_path, policy, phase, status, gate):
    # R11.33 / R12.9: only regressed closes on its own; human demotes, ship posts success by policy, close closes.
    verdict = """
def verdict(spec, pairs):
    return {"verdict": "unvalidated", "perMetric": [], "perInput": [], "reason": "the brain cannot tell"}
"""
    person_commits(
        embedded,
        {
            LOOP_MODULE: with_verdict(embedded, verdict),
            TRIAGE_PATH: triage_text(embedded, f"  autonomy: {{onInconclusive: {policy}}}\n"),
        },
        tmp_path,
        f"onInconclusive {policy}",
    )
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase == phase
    assert rnd.check_verdict["verdict"] == "unvalidated" and rnd.check_verdict["rule"] == "module"
    assert "the brain cannot tell" in rnd.check_verdict["reason"]
    description = LocalForge().statuses(rnd.checked_sha)
    validation = next(s for s in description if s.context == VALIDATION)
    assert validation.state == status
    if policy == "ship":
        assert "by policy" in validation.description and rnd.check_verdict["shippedByPolicy"]
    if policy == "human":
        assert rnd.merge_gate == "human" and "a person decides" in rnd.gate_note
    if policy == "close":
        assert cycle.status == Cycle.Status.UNVALIDATED
        assert PullRequest.objects.get(number=rnd.pr_number).state == "closed"
    else:
        assert PullRequest.objects.get(number=rnd.pr_number).state == "open"


def test_a_verdict_function_that_throws_makes_the_check_inconclusive_not_fatal(embedded, alice, tmp_path):
    # R11.29: the status says why and the proposal waits for a person, its PR open.
    person_commits(
        embedded,
        {LOOP_MODULE: with_verdict(embedded, "def verdict(spec, pairs):\n    raise KeyError('accuracy')\n")},
        tmp_path,
        "A broken verdict",
    )
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and rnd.check_verdict["inconclusive"]
    assert "verdict() raised KeyError" in rnd.check_verdict["reason"]
    validation = next(s for s in LocalForge().statuses(rnd.checked_sha) if s.context == VALIDATION)
    assert validation.state == "error" and "KeyError" in validation.description
    assert PullRequest.objects.get(number=rnd.pr_number).state == "open" and rnd.merge_gate == "human"


def test_under_merge_auto_the_arm_waits_for_the_check_and_is_taken_out_when_the_head_moves(
    embedded, alice, tmp_path, monkeypatch
):
    # R12.4: check pending → no arm; validated → armed on the checked commit; a push afterwards demotes.
    embedded.LOCAL_FORGE_REQUIRED_STATUSES = [DIFF_GATE, VALIDATION, "ci/tests"]
    verdict = """
def verdict(spec, pairs):
    return {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}
"""
    person_commits(
        embedded,
        {
            LOOP_MODULE: with_verdict(embedded, verdict),
            TRIAGE_PATH: triage_text(embedded, "  autonomy: {decide: human, merge: auto}\n"),
        },
        tmp_path,
        "Merge on its own",
    )
    started = held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    pull = PullRequest.objects.get(number=rnd.pr_number)
    assert cycle.phase == Cycle.Phase.CHECKING and not pull.auto_merge  # nothing armed while the check waits
    for replay_id in started:
        machine.replay(replay_id)
    pull.refresh_from_db()
    rnd.refresh_from_db()
    assert rnd.merge_gate == "auto" and pull.auto_merge["sha"] == rnd.checked_sha
    work = clone(LocalForge().remote_url(), tmp_path / "pusher", branch=rnd.branch)
    (work.path / "NOTE.md").write_text("pushed after the check\n")
    git("add", "NOTE.md", cwd=work.path)
    git("commit", "--quiet", "-m", "push", cwd=work.path)
    git("push", "--quiet", "origin", rnd.branch, cwd=work.path)
    machine.on_pull_event(pull.number)
    rnd.refresh_from_db()
    assert rnd.merge_gate == "human" and "no longer stands" in rnd.gate_note
    assert VALIDATION not in states(LocalForge().get_pull(pull.number).head_sha)  # the status is on the checked commit


def test_the_checks_deadline_answers_with_what_landed_and_leaves_the_watch_its_own(embedded, alice, monkeypatch):
    # R11.30: a check whose replays never ran answers at check.deadlineHours, unvalidated; the PR stays open.
    held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    assert cycle.check_deadline is not None
    assert cycle.check_deadline - cycle.moved_at == timedelta(hours=24)
    monkeypatch.setitem(machine.STEPS, "replay", lambda replay_id: None)  # the broker stays lost
    later = cycle.check_deadline + timedelta(minutes=1)
    machine.check_tick(later)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and not cycle.status
    assert "deadline passed" in rnd.check_verdict["reason"] and rnd.check_verdict["rule"] == "a"
    # The merge wait's own deadline counts from the check's answer (watch.deadlineHours, 336 h by default).
    assert cycle.merge_deadline == later + timedelta(hours=336)


def test_a_replay_whose_message_was_lost_is_started_by_the_sweep(embedded, alice, monkeypatch):
    started = held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    assert started
    swept: list[int] = []
    monkeypatch.setitem(machine.STEPS, "replay", swept.append)
    machine.check_tick(timezone.now())
    assert swept == []  # a replay just handed out is not due yet
    machine.check_tick(timezone.now() + check.UNTAKEN_AFTER + timedelta(seconds=1))
    assert sorted(swept) == sorted(started)
    for replay_id in swept:
        machine.replay(replay_id)
        machine.replay(replay_id)  # a message delivered twice runs once
    assert Replay.objects.filter(round=rnd, finished_at=None).count() == 0
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.MERGE_WAIT


def test_a_replay_that_cannot_start_at_its_commit_is_the_change_failing_that_run(embedded, alice, monkeypatch):
    # R11.18: a candidate whose plan will not load at the head is read at once, not waited out.
    started = held_steps(monkeypatch)
    cycle, rnd = accept_first_card(alice)
    first = Replay.objects.filter(round=rnd, side=Replay.Side.CANDIDATE).order_by("slot").first()
    Replay.objects.filter(pk=first.pk).update(commit="0" * 40)
    Execution.objects.filter(pk=first.execution_id).update(commit="0" * 40)
    machine.replay(first.pk)
    first.execution.refresh_from_db()
    assert first.execution.status == Execution.Status.FAILED and "could not start" in first.execution.error
    pairs = check.read_pairs(cycle, rnd)
    assert pairs[0].candidate.state == "notRun"
    for replay_id in started:
        machine.replay(replay_id)
    rnd.refresh_from_db()
    assert rnd.check_verdict["perInput"][0]["candidate"] == ["notRun"]


def test_a_notice_says_the_pr_is_checked_first(embedded, alice):
    cycle, rnd = accept_first_card(alice)
    notice = Notice.objects.filter(kind="pr-opened").latest("created_at")
    assert "pre-merge check" in notice.text


def test_the_cycle_story_and_the_cycle_read_show_the_frozen_inputs_and_each_pair(embedded, alice, client):
    cycle, rnd = accept_first_card(alice)
    rnd.refresh_from_db()
    client.force_login(alice)
    page = client.get(f"/evolution/cycles/{cycle.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="chapter-check"' in html and "held-out" in html and "side by side" in html
    for slot in cycle.frozen["slots"]:
        assert slot["label"].replace("$", "")[:20] in html.replace("&#x27;", "'").replace("$", "")
    for raw in ("notRun", "unfinished", "g′)", "challenger"):
        assert raw not in html
    read = client.get(f"/api/loop/cycles/{cycle.pk}/").json()
    assert [s["slot"] for s in read["frozenSet"]] == list(range(len(cycle.frozen["slots"])))
    assert {"heldOut", "runId", "caseId", "incumbentScore", "input"} <= set(read["frozenSet"][0])
    first = read["rounds"][0]
    assert first["checkedSha"] == rnd.checked_sha and first["checkVerdict"]["verdict"] == rnd.check_verdict["verdict"]
    # R25.12: the pairs input by input; a baseline is the incumbent's run (a replay, or the frozen grade's run).
    assert len(first["pairs"]) == len(cycle.frozen["slots"])
    assert all(p["candidate"] in rnd.check_run_ids for p in first["pairs"])
    assert {s["context"] for s in first["statuses"]} == {DIFF_GATE, VALIDATION}
    compare = client.get(f"/evolution/runs/{first['pairs'][0]['candidate']}/?compare={first['pairs'][0]['baseline']}")
    assert compare.status_code == 200 and 'id="compare"' in compare.content.decode()
    assert "Incumbent" in compare.content.decode() and "acted on nothing" in compare.content.decode()
    wrong = client.get(f"/evolution/runs/{first['pairs'][0]['candidate']}/?compare=nope")
    assert wrong.status_code == 200 and "is not a run of" in wrong.content.decode()


def test_the_decide_card_and_the_pr_body_say_a_check_will_run_and_on_how_many_inputs(embedded, alice):
    card, _ = drive_until_card(tickets())
    assert "pre-merge check first replays the candidate and the incumbent on 3 frozen inputs" in card.text
    press(card, alice, "accept")
    rnd = Cycle.objects.get(entity=triage(), analysed=True).rounds.get(number=1)
    body = PullRequest.objects.get(number=rnd.pr_number).body
    assert "Pre-merge check:" in body and "3 frozen input(s)" in body and "held-out" in body


def test_a_person_merges_an_unproven_change_on_their_word(embedded, alice, client):
    # DESIGN: under onInconclusive human a person's "merge anyway" posts success on the checked commit first.
    alice.is_staff = True
    alice.save()
    verdict = """
def verdict(spec, pairs):
    return {"verdict": "unvalidated", "perMetric": [], "perInput": [], "reason": "the brain cannot tell"}
"""
    import tests.evolution.demo_helpers as helpers

    helpers.person_commits(embedded, {LOOP_MODULE: with_verdict(embedded, verdict)}, Path(embedded.VAR_DIR), "unsure")
    cycle, rnd = accept_first_card(alice)
    client.force_login(alice)
    page = client.get(f"/evolution/pulls/{rnd.pr_number}/").content.decode()
    assert 'id="merge-anyway-button"' in page and "the brain cannot tell" in page
    refused = LocalForge().merge_blockers(PullRequest.objects.get(number=rnd.pr_number))
    assert any("singularity/validation is error" in b for b in refused)  # a plain merge is held
    client.post(f"/evolution/pulls/{rnd.pr_number}/merge/", {"anyway": "1"})
    rnd.refresh_from_db()
    cycle.refresh_from_db()
    assert PullRequest.objects.get(number=rnd.pr_number).state == "merged"
    assert cycle.phase == Cycle.Phase.WATCHING and rnd.check_verdict["mergedOnWordOf"] == "alice"
    validation = next(s for s in LocalForge().statuses(rnd.checked_sha) if s.context == VALIDATION)
    assert validation.state == "success" and "merged on alice's word" in validation.description
    assert rnd.check_verdict["verdict"] == "unvalidated"  # the check's own answer is kept as it was


def test_the_demos_hasty_proposal_is_closed_by_the_check_on_real_runs(embedded, alice, tmp_path):
    # The demo's own proposer, while the demo driver runs, is sometimes hasty: the check closes what it proposes.
    embedded.DEMO_DRIVER = True
    fixer = Path(embedded.BRAIN_CHECKOUT) / "features/loop/fixer/fixer.scenario.md"
    person_commits(
        embedded,
        {"features/loop/fixer/fixer.scenario.md": fixer.read_text().replace("hastyEvery: 3", "hastyEvery: 1")},
        tmp_path,
        "Every proposal hasty",
    )
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert "in haste" in rnd.summary, rnd.summary
    # The hasty change points the fallback at billing: it repairs one frozen ticket and breaks none of the three
    # (the held-out one is a billing ticket a rule names). The check cannot close it, and cannot validate it
    # either: a gain of 1/3 sits inside the band, and a person decides (onInconclusive: human).
    record = rnd.check_verdict
    assert record["verdict"] == "unvalidated" and record["rule"] == "g′", record["reason"]
    assert "within noise: gain 0.333 against ±0.5" in record["reason"]
    assert "the smallest that can is 0.667" in record["power"]["words"]
    assert cycle.phase == Cycle.Phase.MERGE_WAIT and PullRequest.objects.get(number=rnd.pr_number).state == "open"


def test_a_validated_check_and_a_measured_watch_make_a_paired_improvement(embedded, alice, client):
    # R25.7 / DESIGN: paired when the pre-merge check compared pairs and the watch measured — from real runs.
    from evolution.core import outcomes
    from tests.evolution.demo_helpers import run, wrong

    card, failed = drive_until_card(tickets())
    press(card, alice, "accept")
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    rnd = cycle.rounds.get(number=1)
    assert rnd.check_verdict["verdict"] == "validated"
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    client.post(f"/evolution/pulls/{rnd.pr_number}/merge/")
    for ticket in (failed * 10)[:10]:  # the demo triage's watch reads ten runs (watch.windowRuns)
        assert not wrong(run(ticket))
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason
    # The watch's power, fixed when it opened: its window, its count, and the chance at the triage's own rate.
    power = cycle.watch_verdict["power"]
    assert (
        power["runsPerWindow"] == 10
        and power["minFailures"] == 7
        and "10 runs per window, 7 bad regress" in (power["words"])
    )
    assert outcomes.strength(cycle) == "paired" and outcomes.grade(cycle)[0] == "Improvement"


GUARDED_MODULE = """

def not_technical(run):
    output = run.output if isinstance(run.output, dict) else {}
    answered = output.get("result")
    return 0.0 if isinstance(answered, str) and answered.strip().lower() == "technical" else 1.0


_accuracy = measure


def measure(run):
    return [*_accuracy(run), {"id": "not_technical", "value": not_technical(run)}]
"""


def test_a_fix_whose_guard_regresses_while_its_objective_clears_is_a_tradeoff(embedded, alice, tmp_path):
    # R25.9: a candidate the check regressed by a guard's veto while its objective cleared its bar → Tradeoff.
    from evolution.core import outcomes

    text = (Path(embedded.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    guard = "    not_technical: {kind: computed, direction: max, role: guard, aggregate: mean, tolerance: 0.05}\n"
    text = text.replace("  metrics:\n", "  metrics:\n" + guard, 1)
    module = (Path(embedded.BRAIN_CHECKOUT) / LOOP_MODULE).read_text() + GUARDED_MODULE
    person_commits(embedded, {TRIAGE_PATH: text, LOOP_MODULE: module}, tmp_path, "Guard the technical queue")
    cycle, rnd = accept_first_card(alice)
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.status == Cycle.Status.REGRESSED and rnd.check_verdict["rule"] == "e", rnd.check_verdict["reason"]
    objective = next(m for m in rnd.check_verdict["perMetric"] if m["metric"] == "accuracy")
    assert objective["cleared"] is True
    assert outcomes.grade(cycle) == ("Tradeoff", len(rnd.check_verdict["pairs"]))


def test_a_refinement_reuses_the_frozen_set_and_runs_made_meanwhile_never_slide_in(embedded, alice):
    # R11.5: the set is written once; a refinement round reuses it; runs produced while the card waits stay out.
    from tests.evolution.demo_helpers import run

    card, _ = drive_until_card(tickets())
    cycle = Cycle.objects.get(entity=triage(), analysed=True)
    frozen = dict(cycle.frozen)
    for ticket in tickets()[-3:]:
        run(ticket)  # the entity keeps running while the card waits
    press(card, alice, Card.REFINE, refinement="also teach 'upload' -> technical")
    cycle.refresh_from_db()
    assert cycle.rounds.count() == 2
    assert cycle.frozen == frozen


def test_golden_cases_the_brain_will_not_yield_set_the_proposal_aside_with_a_notice(embedded, alice, tmp_path):
    # "What a cycle freezes": a cases export that is not {id, input} skips the proposal, naming the file.
    module = (Path(embedded.BRAIN_CHECKOUT) / LOOP_MODULE).read_text() + '\nCASES = [{"id": "x", "text": "hello"}]\n'
    person_commits(embedded, {LOOP_MODULE: module}, tmp_path, "Golden cases, badly written")
    from tests.evolution.demo_helpers import run

    for ticket in tickets():
        run(ticket)
        skipped = Cycle.objects.filter(entity=triage(), status=Cycle.Status.SKIPPED, reason__contains="CASES").first()
        if skipped is not None:
            break
    assert skipped is not None and LOOP_MODULE in skipped.reason and not skipped.analysed
    notice = Notice.objects.filter(kind="freeze-refused").latest("created_at")
    assert LOOP_MODULE in notice.text and "cannot be frozen" in notice.title
    assert not Cycle.objects.filter(entity=triage(), analysed=True).exists()


def test_golden_cases_are_frozen_after_the_history_and_replayed_on_both_sides(embedded, alice, tmp_path):
    cases = (
        '\nCASES = [{"id": "gold-1", "input": {"text": "My invoice shows a double charge.", "_expected": "billing"}}]\n'
    )
    module = (Path(embedded.BRAIN_CHECKOUT) / LOOP_MODULE).read_text() + cases
    person_commits(embedded, {LOOP_MODULE: module}, tmp_path, "A golden case")
    cycle, rnd = accept_first_card(alice)
    slots = cycle.frozen["slots"]
    assert slots[-1]["kind"] == "case" and slots[-1]["caseId"] == "gold-1" and slots[-1]["score"] is None
    golden = Replay.objects.filter(round=rnd, slot=len(slots) - 1)
    assert {r.side for r in golden} == {Replay.Side.CANDIDATE, Replay.Side.INCUMBENT}


def test_a_pr_whose_next_step_never_ran_is_handed_over_by_the_clock(embedded, alice, monkeypatch):
    # Nothing waits forever: the worker died between opening the PR and starting its check.
    real = machine.after_apply
    monkeypatch.setattr(machine, "after_apply", lambda cycle, rnd, now: None)
    cycle, rnd = accept_first_card(alice)
    rnd.refresh_from_db()
    cycle.refresh_from_db()
    assert rnd.status == Round.Status.APPLIED and rnd.pr_number and cycle.phase == Cycle.Phase.APPLYING
    monkeypatch.setattr(machine, "after_apply", real)
    machine.check_tick(timezone.now())
    cycle.refresh_from_db()
    assert cycle.phase == Cycle.Phase.APPLYING  # just opened: not yet stranded
    machine.check_tick(timezone.now() + check.UNTAKEN_AFTER + timedelta(seconds=1))
    cycle.refresh_from_db()
    rnd.refresh_from_db()
    assert cycle.phase in (Cycle.Phase.CHECKING, Cycle.Phase.MERGE_WAIT) and rnd.checked_sha


def test_the_decide_card_and_the_pr_say_what_the_check_can_see_before_it_runs(embedded, alice, monkeypatch):
    # Issue 31: before Accept the card states the check's power; the PR body states it before the check answers.
    held_steps(monkeypatch)
    card, _ = drive_until_card(tickets())
    assert "held-out 1 of 3" in card.text and "3 pairs of a 0/1 metric: a gain of 0.5 or less cannot validate" in (
        card.text
    ), card.text
    press(card, alice, "accept")
    rnd = Cycle.objects.get(entity=triage(), analysed=True).rounds.get(number=1)
    body = PullRequest.objects.get(number=rnd.pr_number).body
    assert "What the check can see: 3 pairs of a 0/1 metric" in body and "the smallest that can is 0.667" in body
