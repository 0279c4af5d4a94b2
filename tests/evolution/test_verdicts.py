"""Verdict strength, the cycle's grade and its status label, derived at read (seed 003; R25.7–R25.11, R13.14).

The rows are written as the watch, the check and the settle leave them; the
derivation reads only those rows (nothing is stored: the models have no
strength or grade column).
"""

from __future__ import annotations

from typing import Any

import pytest

from evolution.core import outcomes as verdicts
from evolution.models import Cycle, Round
from tests.evolution.watch_helpers import T0, cycle_in, pulse

pytestmark = pytest.mark.django_db

COUNT_VALIDATED = {
    "verdict": "validated",
    "perMetric": [],
    "perInput": [],
    "reason": "5 of 5 graded runs since the merge, 1 bad",
    "tally": "5 of 5 graded runs, 1 bad",
    "comparator": "count",
    "n": 5,
    "bad": 1,
}
COUNT_REGRESSED = {**COUNT_VALIDATED, "verdict": "regressed", "n": 2, "bad": 2}
SHORT_EMPTY = {**COUNT_VALIDATED, "verdict": "unvalidated", "n": 0, "bad": 0}
SHORT_SOME = {**COUNT_VALIDATED, "verdict": "unvalidated", "n": 3, "bad": 1}
CHECK_PAIRED = {
    "verdict": "validated",
    "perMetric": [{"id": "quality", "role": "objective", "gain": 0.1, "band": 0.05}],
    "perInput": [],
    "pairs": [{"baseline": "b1", "candidate": "c1"}, {"baseline": "b2", "candidate": "c2"}],
}


def settled(
    status: str,
    *,
    merged: bool = True,
    watch_verdict: dict[str, Any] | None = None,
    check_verdict: dict[str, Any] | None = None,
    phase: str = Cycle.Phase.SETTLED,
    **round_fields: Any,
) -> Cycle:
    """A cycle of a fresh entity settled at ``status``, its round 1 merged (or not) with the check's record."""
    entity = pulse(f"e{Cycle.objects.count()}")
    cycle = cycle_in(entity, phase, at=T0)
    Cycle.objects.filter(pk=cycle.pk).update(status=status, watch_verdict=watch_verdict, claim=None)
    Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.MERGED if merged else Round.Status.CLOSED,
        merge_sha="c" * 40 if merged else "",
        pr_number=3,
        check_verdict=check_verdict,
        **round_fields,
    )
    cycle.refresh_from_db()
    return cycle


def test_nothing_is_stored_strength_and_grade_are_no_columns():
    names = {f.name for f in Cycle._meta.get_fields()} | {f.name for f in Round._meta.get_fields()}
    assert not {"strength", "grade", "verdict_strength"} & names


# --- Strength -------------------------------------------------------------------------


def test_a_change_that_never_shipped_has_no_strength():
    assert verdicts.strength(settled(Cycle.Status.UNVALIDATED, merged=False)) is None
    assert verdicts.strength(settled(Cycle.Status.SKIPPED, merged=False)) is None


def test_a_live_cycle_has_no_strength_yet():
    assert verdicts.strength(settled("", phase=Cycle.Phase.WATCHING)) is None


def test_a_check_that_compared_pairs_and_a_watch_that_counted_is_paired():
    cycle = settled(Cycle.Status.VALIDATED, watch_verdict=COUNT_VALIDATED, check_verdict=CHECK_PAIRED)
    assert verdicts.strength(cycle) == "paired"


def test_the_count_alone_is_measured():
    assert verdicts.strength(settled(Cycle.Status.VALIDATED, watch_verdict=COUNT_VALIDATED)) == "measured"
    assert verdicts.strength(settled(Cycle.Status.REGRESSED, watch_verdict=COUNT_REGRESSED)) == "measured"


def test_a_check_that_measured_with_a_watch_that_did_not_is_measured():
    cycle = settled(Cycle.Status.UNVALIDATED, watch_verdict=None, check_verdict=CHECK_PAIRED)
    assert verdicts.strength(cycle) == "measured"


def test_a_window_closed_short_is_measured_only_if_it_counted_something():
    assert verdicts.strength(settled(Cycle.Status.UNVALIDATED, watch_verdict=SHORT_SOME)) == "measured"
    assert verdicts.strength(settled(Cycle.Status.UNVALIDATED, watch_verdict=SHORT_EMPTY)) == "blind"


def test_no_watch_record_is_blind():
    # judge unhealthy, a comparator that failed, watch.mode none: the watch never reached a verdict
    assert verdicts.strength(settled(Cycle.Status.UNVALIDATED, watch_verdict=None)) == "blind"


def test_a_compare_record_is_measured_only_with_a_per_metric():
    empty = {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}
    full = {**empty, "perMetric": [{"id": "views", "before": 10, "after": 12}]}
    assert verdicts.strength(settled(Cycle.Status.VALIDATED, watch_verdict=empty)) == "blind"
    assert verdicts.strength(settled(Cycle.Status.VALIDATED, watch_verdict=full)) == "measured"
    cycle = settled(Cycle.Status.VALIDATED, watch_verdict=full, check_verdict=CHECK_PAIRED)
    assert verdicts.strength(cycle) == "paired"


def test_a_check_record_that_compared_nothing_does_not_measure():
    nothing = {"verdict": "unvalidated", "perMetric": [], "perInput": [], "reason": "too few judged pairs"}
    assert verdicts.strength(settled(Cycle.Status.UNVALIDATED, check_verdict=nothing)) == "blind"


# --- Grade ----------------------------------------------------------------------------


def test_the_count_grades_by_its_verdict_alone_beside_its_n():
    assert verdicts.grade(settled(Cycle.Status.VALIDATED, watch_verdict=COUNT_VALIDATED)) == ("Improvement", 5)
    assert verdicts.grade(settled(Cycle.Status.REGRESSED, watch_verdict=COUNT_REGRESSED)) == ("Regression", 2)
    assert verdicts.grade(settled(Cycle.Status.UNVALIDATED, watch_verdict=SHORT_SOME)) == ("Inconclusive", 3)


def test_a_compare_record_with_no_n_rests_on_the_window_it_judged():
    cycle = settled(Cycle.Status.VALIDATED, watch_verdict={"verdict": "validated", "perMetric": [], "perInput": []})
    Cycle.objects.filter(pk=cycle.pk).update(watch_window={"runIds": ["r1", "r2", "r3", "r4"]})
    cycle.refresh_from_db()
    assert verdicts.grade(cycle) == ("Improvement", 4)


def test_no_verdict_no_grade():
    assert verdicts.grade(settled("", phase=Cycle.Phase.WATCHING)) is None  # live
    assert verdicts.grade(settled(Cycle.Status.SKIPPED, merged=False)) is None
    assert verdicts.grade(settled(Cycle.Status.FAILED, merged=False)) is None
    assert verdicts.grade(settled(Cycle.Status.UNVALIDATED, merged=False)) is None  # a PR nobody merged
    assert verdicts.grade(settled(Cycle.Status.UNVALIDATED, watch_verdict=None)) is None  # judge unhealthy


def test_a_candidate_the_check_regressed_is_graded_off_the_checks_record():
    regressed = {
        **CHECK_PAIRED,
        "verdict": "regressed",
        "perMetric": [{"id": "quality", "role": "objective", "gain": -0.2, "band": 0.05}],
    }
    cycle = settled(Cycle.Status.UNVALIDATED, merged=False, check_verdict=regressed)
    assert verdicts.grade(cycle) == ("Regression", 2)
    assert verdicts.strength(cycle) is None  # it never shipped


def test_a_check_regressed_candidate_whose_objective_cleared_its_bar_is_a_tradeoff():
    vetoed = {
        **CHECK_PAIRED,
        "verdict": "regressed",
        "perMetric": [
            {"id": "quality", "role": "objective", "gain": 0.2, "band": 0.05},
            {"id": "cost_usd", "role": "guard", "gain": -0.5, "allowed": 0.1},
        ],
    }
    assert verdicts.grade(settled(Cycle.Status.UNVALIDATED, merged=False, check_verdict=vetoed)) == ("Tradeoff", 2)
    flagged = {**vetoed, "perMetric": [{"id": "quality", "role": "objective", "cleared": True}]}
    assert verdicts.grade(settled(Cycle.Status.UNVALIDATED, merged=False, check_verdict=flagged))[0] == "Tradeoff"


# --- Status label ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "merged", "outcome", "label"),
    [
        (Cycle.Status.VALIDATED, True, "", "Kept"),
        (Cycle.Status.REGRESSED, True, "merged", "Reverted"),
        (Cycle.Status.REGRESSED, True, "expired", "Regressed, revert expired"),
        (Cycle.Status.UNVALIDATED, True, "", "Unverified"),
        # R13.19: reverted by policy (watch.onInconclusive: revert) says unproven, never a regression
        (Cycle.Status.UNVALIDATED, True, "merged", "Reverted by policy (unproven)"),
        (Cycle.Status.UNVALIDATED, True, "expired", "Unverified, policy revert expired"),
        (Cycle.Status.UNVALIDATED, False, "", "Not merged"),
        (Cycle.Status.SKIPPED, False, "", "Skipped"),
        (Cycle.Status.FAILED, False, "", "Failed"),
    ],
)
def test_where_a_settled_cycle_ended(status, merged, outcome, label):
    assert verdicts.status_label(settled(status, merged=merged, revert_outcome=outcome)) == label


@pytest.mark.parametrize(
    ("phase", "words"),
    [
        (Cycle.Phase.ANALYSING, "Analysing"),
        (Cycle.Phase.DECIDING, "Waiting on a decision"),
        (Cycle.Phase.MERGE_WAIT, "PR open"),
        (Cycle.Phase.WATCHING, "Watching"),
    ],
)
def test_a_live_cycle_says_its_phase(phase, words):
    assert verdicts.status_label(settled("", phase=phase, merged=False)) == words


def test_a_regressed_cycle_following_its_revert_says_reverting():
    assert verdicts.status_label(settled(Cycle.Status.REGRESSED, phase=Cycle.Phase.REVERTING)) == "Reverting"
