"""Every verdict states its power (issue 31): the figures against hand-computed cases."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evolution.presets import pairs as P
from evolution.presets import power

TOL = Decimal("0.1")


def accuracy(**extra) -> dict:
    return {"kind": "computed", "direction": "max", "scope": "run", "role": "objective", "aggregate": "mean", **extra}


def terms() -> dict:
    return {
        "evaluation": {"metrics": {"accuracy": accuracy()}, "metricTolerance": {"judged": 0.05, "computedPct": 0.1}}
    }


def pair(slot: int, before: float, after: float, *, held_out: bool = False) -> P.Pair:
    state = lambda v: P.VIABLE if v else P.FAILED  # noqa: E731
    return P.Pair(
        slot=slot,
        trial=1,
        source=f"run {slot}",
        label=f"ticket {slot}",
        held_out=held_out,
        golden=False,
        input={"text": f"ticket {slot}"},
        baseline=P.Side(state(before), vector={"accuracy": before}, run_id="b"),
        candidate=P.Side(state(after), vector={"accuracy": after}, run_id="c"),
    )


@pytest.mark.parametrize(
    ("n", "how", "expected"),
    [
        # 3 pairs, mean: moves {1,1,0} → 2/3 against band 0.5 (range 1 / 2); {1,0,0} → 1/3 cannot.
        (3, "mean", Decimal(2) / 3),
        # 4 pairs: 2 of 4 → 0.5, not above 0.5; 3 of 4 → 0.75.
        (4, "mean", Decimal("0.75")),
        # 5 pairs: 3 of 5 → 0.6.
        (5, "mean", Decimal("0.6")),
        # 10 pairs: 6 of 10.
        (10, "mean", Decimal("0.6")),
        # median of {1,1,0} is 1; of {1,1,0,0} 0.5 (not above); {1,1,1,0} → 1.
        (3, "median", Decimal(1)),
        (4, "median", Decimal(1)),
        # Below three pairs the band is the tolerance alone: 1 of 2 moved → 0.5 > 0.1.
        (2, "mean", Decimal("0.5")),
        (1, "mean", Decimal(1)),
    ],
)
def test_the_smallest_gain_a_two_valued_metric_can_validate(n, how, expected):
    assert power.smallest_gain(n, TOL, two_valued=True, how=how) == expected


def test_a_tolerance_wider_than_the_range_leaves_no_gain_that_can_validate():
    assert power.smallest_gain(2, Decimal("1.5"), two_valued=True, how="mean") is None


def test_a_continuous_metric_can_show_any_gain_past_its_band():
    assert power.smallest_gain(3, Decimal("0.05"), two_valued=False, how="median", band=Decimal("0.2")) == Decimal(
        "0.2"
    )


def test_the_check_states_its_power_in_words_three_pairs_of_a_zero_one_metric():
    pairs = [pair(0, 0, 1), pair(1, 0, 1), pair(2, 1, 1)]
    verdict = P.engine_verdict(terms(), pairs, held_out="held-out 0 of 3")
    stated = power.check_power(terms(), pairs, verdict, {"heldOut": {"k": 0, "n": 3}, "terms": {"trials": 1}})
    assert stated["pairs"] == 3 and stated["heldOut"] == {"k": 0, "n": 3}
    assert stated["band"] == "0.5" and stated["twoValued"] is True
    assert Decimal(stated["smallestGain"]) == pytest.approx(Decimal(2) / 3)
    assert stated["seenOnly"] is True and stated["heldOutAnswer"] is None
    assert "3 pairs of a 0/1 metric: a gain of 0.5 or less cannot validate" in stated["words"]
    assert "validated on seen inputs only" in stated["words"]


def test_the_held_out_inputs_alone_have_their_own_answer():
    # Seen inputs fixed (2 of 2), the held-out ones unmoved: the whole set validates, the held-out answer does not.
    pairs = [pair(0, 0, 1), pair(1, 0, 1), pair(2, 1, 1, held_out=True), pair(3, 0, 0, held_out=True)]
    verdict = P.engine_verdict(terms(), pairs)
    stated = power.check_power(terms(), pairs, verdict, {"heldOut": {"k": 2, "n": 4}, "terms": {"trials": 1}})
    assert stated["seenOnly"] is False
    assert stated["heldOutAnswer"]["verdict"] == "unvalidated" and stated["heldOutAnswer"]["pairs"] == 2
    assert "on the 2 held-out inputs alone: unvalidated" in stated["words"]


@pytest.mark.parametrize(
    ("n", "m", "p", "expected"),
    [
        # P(X ≥ 2 | 5, 0.4) = 1 − 0.6^5 − 5·0.4·0.6^4 = 1 − 0.07776 − 0.2592 = 0.66304
        (5, 2, Decimal("0.4"), Decimal("0.66304")),
        # P(X ≥ 5 | 5, 0.5) = 1/32
        (5, 5, Decimal("0.5"), Decimal("0.03125")),
        (10, 0, Decimal("0.3"), Decimal(1)),
        (4, 1, Decimal(0), Decimal(0)),
        # A failure rate of 0 or 1 (every run good, every run bad) is exact, not 0 ** 0.
        (5, 2, Decimal(1), Decimal(1)),
    ],
)
def test_the_chance_a_watch_fires_on_an_unchanged_entity(n, m, p, expected):
    assert power.chance_of_firing(n, m, p) == pytest.approx(expected)


def test_the_watch_states_its_power():
    stated = power.watch_power(5, 2, Decimal("0.4"))
    assert stated["runsPerWindow"] == 5 and stated["minFailures"] == 2
    assert Decimal(stated["chance"]) == pytest.approx(Decimal("0.66304"))
    assert "5 runs per window, 2 bad regress" in stated["words"] and "66%" in stated["words"]


@pytest.mark.django_db
def test_a_check_validated_on_seen_inputs_only_says_so_in_its_reason_and_its_strength():
    from django.utils import timezone

    from evolution.core import outcomes
    from evolution.loop import check
    from evolution.models import Cycle, Round
    from tests.evolution.loop_helpers import looped, proposed_round, settled_cycle

    entity = looped(evaluation={"method": "none", "metrics": {"accuracy": accuracy()}})
    unsaved = Cycle(entity=entity, frozen={"heldOut": {"k": 0, "n": 3}, "terms": {"trials": 1}})
    pairs = [pair(0, 0, 1), pair(1, 0, 1), pair(2, 1, 1)]
    verdict = P.engine_verdict(entity.terms, pairs, held_out="held-out 0 of 3")
    assert verdict.verdict == "validated"
    stated = check.power_of(unsaved, pairs, verdict)
    assert stated["seenOnly"] is True and verdict.reason.endswith("held-out 0 of 3; validated on seen inputs only")

    cycle = settled_cycle(entity, Cycle.Status.VALIDATED, at=timezone.now())
    Cycle.objects.filter(pk=cycle.pk).update(watch_verdict={"comparator": "count", "n": 5, "verdict": "validated"})
    cycle.refresh_from_db()
    proposed_round(
        cycle,
        status=Round.Status.MERGED,
        merge_sha="a" * 40,
        check_verdict={"verdict": "validated", "judged": 3, "power": stated, "reason": verdict.reason},
    )
    assert outcomes.strength(cycle) == "paired"  # the breaker and the lessons read it as before
    assert outcomes.strength_words(cycle) == "paired — validated on seen inputs only"
    held = dict(stated, seenOnly=False)
    Round.objects.filter(cycle=cycle).update(check_verdict={"verdict": "validated", "judged": 3, "power": held})
    assert outcomes.strength_words(Cycle.objects.get(pk=cycle.pk)) == "paired"
