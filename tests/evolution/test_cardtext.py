"""The words of the decide and retry cards (R9.10): what a reviewer reads before tapping, and the links."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from evolution.loop.cardtext import decide_card, retry_card
from evolution.models import Cycle, Round
from tests.evolution.page_helpers import graded_run, in_loop, make_cycle, make_round, window_of

pytestmark = pytest.mark.django_db

PUBLIC = "https://singularity.example.org/"


@pytest.fixture
def public(settings):
    settings.SINGULARITY_PUBLIC_URL = PUBLIC
    return settings


def proposal(entity, *, accuracies=(0.5, 0.6, 0.7), passed=(False, False, True), category="", **round_fields):
    """Round 1 of a deciding cycle whose window holds runs with those accuracies."""
    now = timezone.now()
    runs = [
        graded_run(entity, passed=p, metrics={"accuracy": a}, category=category, at=now - timedelta(minutes=10 - i))
        for i, (a, p) in enumerate(zip(accuracies, passed, strict=True))
    ]
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, window=window_of(runs), spent_usd=Decimal("0.0123"))
    round_fields.setdefault(
        "files",
        [{"path": "features/digest/digest.scenario.md", "content": "one\ntwo\n"}, {"path": "old.md", "content": None}],
    )
    return make_round(cycle, summary="Ask for the date first\nthen write.", **round_fields)


def test_the_decide_card_carries_what_a_reviewer_needs(public) -> None:
    rnd = proposal(in_loop())
    card = decide_card(rnd)
    text = card["text"]
    assert card["title"] == "Digest: Ask for the date first"
    assert card["subject"] == f"cycle {rnd.cycle_id} · r1"
    assert "Ask for the date first\nthen write." in text
    assert "Proposed by pipeline:demo-proposer." in text
    assert "Judged by the entity's next 5 graded runs after the merge (2 bad reverts it)." in text
    assert "🎯 Optimizing: accuracy ↑ at 0.60 (target 0.9)" in text
    assert "🛡 Guarding: quality ↑ not measured in its window" in text
    assert "Recent runs: 1 of the last 3 graded passed." in text
    assert "Spend so far: $0.01" in text  # the site's one money format: two decimals at a cent and above
    assert "• features/digest/digest.scenario.md — new, 2 lines" in text and "• old.md — deleted" in text
    assert "The change:\n--- a/features/digest/digest.scenario.md\n+++ b/features/digest/digest.scenario.md" in text
    assert "\n+one\n+two\n" in text
    link = f"{PUBLIC.rstrip('/')}/evolution/go/cycle:{rnd.cycle_id}/?proposal=1"
    assert f"Full proposal: {link}" in text and card["subject_url"] == link
    assert "Shared failure" not in text


def test_a_level_reads_on_the_metrics_own_scale() -> None:
    owner = {"kind": "judged", "direction": "max", "role": "objective", "scale": {"min": 1, "max": 10}, "target": 2 / 3}
    entity = in_loop(evaluation={"metrics": {"owner_score": owner}})
    now = timezone.now()
    run = graded_run(entity, metrics={"owner_score": (2.33 - 1) / 9}, at=now - timedelta(minutes=1))
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, window=window_of([run]))
    assert "🎯 Optimizing: owner_score ↑ at 2.33 (target 7)" in decide_card(make_round(cycle))["text"]


def test_a_period_value_the_window_laid_over_wins() -> None:
    entity = in_loop()
    rnd = proposal(entity)
    Cycle.objects.filter(pk=rnd.cycle_id).update(window={**rnd.cycle.window, "metrics": {"accuracy": 0.8}})
    rnd.cycle.refresh_from_db()
    assert "accuracy ↑ at 0.80 (target 0.9)" in decide_card(rnd)["text"]


def test_method_none_leaves_out_the_pass_count() -> None:
    entity = in_loop(evaluation={"method": "none", "metrics": {"duration_ms": {"role": "objective", "target": 2000}}})
    now = timezone.now()
    runs = [graded_run(entity, passed=False, metrics={"duration_ms": ms}, at=now - timedelta(minutes=ms / 100))
            for ms in (1000, 3000, 2500)]  # fmt: skip
    cycle = make_cycle(entity, phase=Cycle.Phase.DECIDING, window=window_of(runs))
    text = decide_card(make_round(cycle))["text"]
    assert "Recent runs" not in text and "passed" not in text
    assert "🎯 Optimizing: duration_ms ↓ at 2.50 s (target 2 s)" in text
    judged = decide_card(proposal(in_loop("judged")))["text"]
    assert "Recent runs: 1 of the last 3 graded passed." in judged


def test_a_failure_category_other_entities_share_is_named() -> None:
    entity = in_loop()
    for slug in ("alpha", "beta"):
        graded_run(in_loop(slug), passed=False, category="missing date")
    stale = in_loop("stale")
    graded_run(stale, passed=False, category="timeout", at=timezone.now() - timedelta(days=8))
    text = decide_card(proposal(entity, category="missing date"))["text"]
    assert "Shared failure: “missing date” also hit 2 other entities in the last 7 days." in text
    alone = decide_card(proposal(in_loop("gamma"), category="timeout"))["text"]
    assert "Shared failure" not in alone  # the only other "timeout" is older than a week


def test_no_dashboard_no_links(settings) -> None:
    settings.SINGULARITY_PUBLIC_URL = ""
    rnd = proposal(in_loop())
    card = decide_card(rnd)
    assert card["subject_url"] == "" and "Full proposal" not in card["text"] and "http" not in card["text"]
    rnd.status, rnd.error = Round.Status.FAILED, "the proposer broke"
    retry = retry_card(rnd)
    assert retry["subject_url"] == "" and "The cycle:" not in retry["text"]


def test_a_refinement_round_quotes_the_reply() -> None:
    text = decide_card(proposal(in_loop(), refinement="also ask for the place"))["text"]
    assert "It answers a reply: “also ask for the place”" in text


def test_the_retry_card_says_what_failed_and_links_the_cycle(public) -> None:
    rnd = proposal(in_loop(), status=Round.Status.FAILED)
    rnd.error = "the apply failed: the diff gate refused 1 path"
    rnd.gate = {"refused": ["features/digest/digest.loop.py"], "message": rnd.error}
    card = retry_card(rnd)
    assert card["title"] == f"Digest: cycle {rnd.cycle_id} · r1 failed"
    assert "What failed: the apply failed: the diff gate refused 1 path" in card["text"]
    assert "Offending paths:\n• features/digest/digest.loop.py" in card["text"]
    link = f"{PUBLIC.rstrip('/')}/evolution/go/cycle:{rnd.cycle_id}/"
    assert f"The cycle: {link}" in card["text"] and card["subject_url"] == link
    assert "?proposal=" not in card["text"]


def test_a_spend_below_a_cent_keeps_its_digits_on_the_card(public) -> None:
    rnd = proposal(in_loop())
    Cycle.objects.filter(pk=rnd.cycle_id).update(spent_usd=Decimal("0.0049"))
    rnd.cycle.refresh_from_db()
    assert "Spend so far: $0.0049" in decide_card(rnd)["text"]
