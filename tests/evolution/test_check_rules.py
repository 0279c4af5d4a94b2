"""The pre-merge check's comparator, rule by rule and in its order (seed 003 "The verdict, as a list of rules";
DESIGN.md's rulings; CONFORMANCE R11.19–R11.36, R3.9, R3.12, R3.24–R3.26)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evolution.presets import pairs as P

SHARE = Decimal("0.34")


def terms(**metrics) -> dict:
    return {"evaluation": {"metrics": metrics, "metricTolerance": {"judged": 0.05, "computedPct": 0.1}}}


def judged(role: str = "objective", **extra) -> dict:
    return {"kind": "judged", "direction": "max", "scope": "run", "role": role, **extra}


def side(state: str, **vector) -> P.Side:
    return P.Side(state, vector=dict(vector) if state in P.GRADED else None, run_id="r")


def pair(slot: int, baseline: P.Side, candidate: P.Side, *, trial: int = 1, label: str = "") -> P.Pair:
    return P.Pair(
        slot=slot,
        trial=trial,
        source=f"run {slot}",
        label=label or f"ticket {slot}",
        held_out=False,
        golden=False,
        input={"text": f"ticket {slot}"},
        baseline=baseline,
        candidate=candidate,
    )


def moved(*changes: tuple[float, float], metric: str = "quality", extra: dict | None = None) -> list[P.Pair]:
    """Pairs where both sides passed, with ``metric`` going from the first value to the second."""
    extra = extra or {}
    return [
        pair(
            i,
            side(P.VIABLE, **{metric: before}, **extra.get("b", {})),
            side(P.VIABLE, **{metric: after}, **extra.get("c", {})),
        )
        for i, (before, after) in enumerate(changes)
    ]


def test_a_metric_reads_the_median_of_its_per_input_movements():
    # R11.25: movements [+0.3, −0.1, +0.1] → median +0.1; the sides' medians are for reading only.
    reading = P.read_metric("quality", judged(), terms(quality=judged()), moved((0.5, 0.8), (0.6, 0.5), (0.4, 0.5)))
    assert reading.moved == pytest.approx(Decimal("0.1"))
    assert reading.pairs == 3


def test_below_three_pairs_the_band_is_the_tolerance_alone():
    # R11.27: movements [+0.3, −0.1] on two pairs → band = tolerance 0.05.
    reading = P.read_metric("quality", judged(), terms(quality=judged()), moved((0.5, 0.8), (0.6, 0.5)))
    assert reading.band == Decimal("0.05")


def test_the_band_is_half_the_range_of_the_movements_never_tighter_than_the_tolerance():
    wide = P.read_metric("quality", judged(), terms(quality=judged()), moved((0.5, 0.8), (0.6, 0.5), (0.4, 0.5)))
    assert wide.band == pytest.approx(Decimal("0.2"))  # range 0.4
    tight = P.read_metric("quality", judged(), terms(quality=judged()), moved((0.5, 0.52), (0.6, 0.61), (0.4, 0.41)))
    assert tight.band == Decimal("0.05")


def test_a_gain_beyond_the_band_validates_and_names_the_held_out_split():
    verdict = P.engine_verdict(
        terms(quality=judged()), moved((0.5, 0.7), (0.5, 0.7), (0.5, 0.7)), held_out="held-out 2 of 3"
    )
    assert (verdict.verdict, verdict.rule) == ("validated", "g′")
    assert verdict.reason.endswith("held-out 2 of 3")


def test_a_gain_inside_the_band_is_unvalidated_within_noise():
    # Rule (g′): a change that gained 0.3 on one input and lost 0.1 on another adopts no good day as progress.
    verdict = P.engine_verdict(terms(quality=judged()), moved((0.5, 0.8), (0.6, 0.5), (0.4, 0.5)))
    assert verdict.verdict == "unvalidated" and verdict.reason.startswith("within noise: gain")


def test_a_fall_beyond_the_band_regresses():
    verdict = P.engine_verdict(terms(quality=judged()), moved((0.8, 0.5), (0.8, 0.5), (0.8, 0.55)))
    assert (verdict.verdict, verdict.rule) == ("regressed", "g′")


def test_a_guard_past_its_tolerance_regresses_whatever_the_objective_gained():
    # R11.24 / R11.36: cost halved, the quality guard down 0.1 > 0.05 → regressed (e before g′).
    spec = terms(
        cost_usd={"kind": "computed", "direction": "min", "scope": "run", "role": "objective"},
        quality=judged("guard"),
    )
    pairs = [
        pair(i, side(P.VIABLE, cost_usd="1.00", quality=0.9), side(P.VIABLE, cost_usd="0.50", quality=0.8))
        for i in range(3)
    ]
    verdict = P.engine_verdict(spec, pairs)
    assert (verdict.verdict, verdict.rule) == ("regressed", "e")
    assert "guard quality" in verdict.reason


def test_too_few_judged_pairs_answer_first_even_with_a_guard_breach():
    # R11.36: 4 of 5 pairs unjudged + guard breach → unvalidated by (a), and the PR is not closed.
    spec = terms(quality=judged("guard"))
    pairs = [pair(0, side(P.VIABLE, quality=0.9), side(P.VIABLE, quality=0.1))]
    pairs += [pair(i, side(P.VIABLE, quality=0.9), P.Side(P.UNFINISHED)) for i in range(1, 5)]
    verdict = P.engine_verdict(spec, pairs)
    assert (verdict.verdict, verdict.rule) == ("unvalidated", "a")
    assert "1 of 5" in verdict.reason


def test_an_input_the_incumbent_also_failed_is_not_a_lost_input():
    # R11.22: incumbent failed A, the candidate fails A and passes the rest → not regressed by (c).
    spec = terms(quality=judged())
    pairs = [pair(0, side(P.FAILED, quality=0.2), side(P.FAILED, quality=0.2))]
    pairs += [pair(i, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.8)) for i in range(1, 4)]
    verdict = P.engine_verdict(spec, pairs)
    assert verdict.verdict != "regressed"
    assert not any(row["lost"] for row in verdict.per_input)


def test_an_input_the_incumbent_held_and_the_candidate_lost_regresses_naming_it():
    spec = terms(quality=judged())
    pairs = [pair(0, side(P.VIABLE, quality=0.8), side(P.FAILED, quality=0.1), label="I was charged twice")]
    pairs += [pair(i, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.9)) for i in range(1, 4)]
    verdict = P.engine_verdict(spec, pairs)
    assert (verdict.verdict, verdict.rule) == ("regressed", "c")
    assert "run 0 (I was charged twice)" in verdict.reason


def test_a_candidate_that_did_not_run_is_judged_and_lost_an_incumbent_that_did_not_run_leaves_its_pair_unjudged():
    # R11.21
    spec = terms(quality=judged())
    lost = [pair(0, side(P.VIABLE, quality=0.8), P.Side(P.NOT_RUN))]
    lost += [pair(i, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.8)) for i in range(1, 3)]
    verdict = P.engine_verdict(spec, lost)
    assert (verdict.verdict, verdict.rule) == ("regressed", "c")
    unjudged = [pair(i, P.Side(P.NOT_RUN), side(P.VIABLE, quality=0.8)) for i in range(2)]
    unjudged += [pair(2, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.8))]
    assert P.engine_verdict(spec, unjudged).rule == "a"


def test_a_critical_metric_past_its_tolerance_on_one_input_regresses_before_any_median():
    # R3.9 / R11.23: worse on 1 of 5 beyond tolerance, better on the rest → regressed naming that input.
    spec = terms(quality=judged(), safety=judged("guard", critical=True))
    pairs = [pair(0, side(P.VIABLE, quality=0.5, safety=0.9), side(P.VIABLE, quality=0.9, safety=0.7), label="refund")]
    pairs += [
        pair(i, side(P.VIABLE, quality=0.5, safety=0.8), side(P.VIABLE, quality=0.9, safety=0.9)) for i in range(1, 5)
    ]
    verdict = P.engine_verdict(spec, pairs)
    assert (verdict.verdict, verdict.rule) == ("regressed", "d")
    assert "run 0 (refund)" in verdict.reason and "safety" in verdict.reason


def test_the_candidates_median_below_a_floor_the_incumbent_held_regresses():
    spec = terms(quality=judged(floor=0.6))
    verdict = P.engine_verdict(spec, moved((0.65, 0.55), (0.65, 0.55), (0.65, 0.55)))
    assert (verdict.verdict, verdict.rule) == ("regressed", "f")
    assert "incumbent" in verdict.reason and "0.65" in verdict.reason


def test_a_candidate_identical_to_an_incumbent_under_its_floor_is_not_regressed():
    # DESIGN.md's amended rule (f) (issue 31): the change is blamed only for a floor the incumbent held; an A/A run
    # of an entity already under its floor must not regress.
    spec = terms(quality=judged(floor=0.5))
    verdict = P.engine_verdict(spec, moved((0.4, 0.4), (0.4, 0.4), (0.4, 0.4)))
    assert verdict.verdict != "regressed"
    assert (verdict.verdict, verdict.rule) == ("unvalidated", "g′")


def test_a_repair_lifting_040_toward_a_050_floor_is_not_regressed():
    spec = terms(quality=judged(floor=0.5))
    verdict = P.engine_verdict(spec, moved((0.4, 0.48), (0.4, 0.48), (0.4, 0.48)))
    assert (verdict.verdict, verdict.rule) == ("validated", "g′")


def test_a_floor_on_an_observe_metric_does_nothing():
    # R3.7
    spec = terms(quality=judged(), tone=judged("observe", floor=0.9))
    pairs = moved((0.5, 0.7), (0.5, 0.7), (0.5, 0.7), extra={"b": {"tone": 0.1}, "c": {"tone": 0.1}})
    assert P.engine_verdict(spec, pairs).verdict == "validated"


def test_must_improve_with_no_movement_is_unvalidated_and_unmeasured_too():
    # R3.24 / R11.26
    spec = terms(quality=judged(mustImprove=True))
    still = P.engine_verdict(spec, moved((0.5, 0.5), (0.6, 0.6), (0.7, 0.7)))
    assert (still.verdict, still.rule) == ("unvalidated", "g") and "no measurable gain" in still.reason
    unmeasured = P.engine_verdict(spec, moved((0.5, 0.5), (0.6, 0.6), metric="other"))
    assert (unmeasured.verdict, unmeasured.rule) == ("unvalidated", "g")


def test_a_metric_no_pair_measured_is_skipped_and_a_period_metric_is_never_read():
    # R11.26 / R3.12: a period-only objective gets a guards-only check; never validated by objective gain.
    spec = terms(
        views={"kind": "computed", "direction": "max", "scope": "period", "role": "objective"},
        quality=judged("guard"),
    )
    verdict = P.engine_verdict(spec, moved((0.5, 0.5), (0.5, 0.52), (0.5, 0.5)))
    assert (verdict.verdict, verdict.rule) == ("validated", "h")
    assert [m["metric"] for m in verdict.per_metric] == ["quality"]


def reported(role: str = "objective") -> dict:
    return {"kind": "reported", "direction": "max", "scope": "run", "role": role, "criterion": "Solved"}


def test_a_reported_objective_makes_every_check_inconclusive_never_validated_guards_only():
    # R4.12 (was WRONG: validated under (h)): nobody rates a replay, so the check cannot measure it.
    spec = terms(helpful=reported(), quality=judged("guard"))
    verdict = P.engine_verdict(spec, moved((0.5, 0.5), (0.5, 0.52), (0.5, 0.5)))
    assert (verdict.verdict, verdict.rule, verdict.inconclusive) == ("unvalidated", "unmeasured", True)
    assert "helpful is rated by people only" in verdict.reason
    # beside a judged objective that did move, it is still inconclusive: the objective people rate is unread
    both = terms(helpful=reported(), quality=judged())
    assert P.engine_verdict(both, moved((0.5, 0.8), (0.5, 0.8), (0.5, 0.8))).inconclusive is True
    # a veto still answers first: a guard past its tolerance regresses
    vetoed = terms(helpful=reported(), quality=judged("guard"))
    assert P.engine_verdict(vetoed, moved((0.5, 0.2), (0.5, 0.2), (0.5, 0.2))).verdict == "regressed"


def test_a_run_scoped_objective_the_replays_left_out_is_inconclusive():
    # R4.12 / issue 29: the objective measured on no pair (measure() of a replay may return fewer) → inconclusive.
    spec = terms(accuracy={"kind": "computed", "direction": "max", "scope": "run", "role": "objective"})
    verdict = P.engine_verdict(spec, moved((0.5, 0.5), (0.6, 0.6), (0.7, 0.7), metric="other"))
    assert (verdict.verdict, verdict.rule, verdict.inconclusive) == ("unvalidated", "unmeasured", True)
    assert verdict.reason == "objective accuracy was measured on no pair: the replays left it out"


def test_aggregate_mean_reads_the_mean_of_the_movements():
    # R3.25: a 0/1 metric over [0, 0, 1] reads 0.333, not 0.
    spec = {"kind": "computed", "direction": "max", "scope": "run", "role": "objective", "aggregate": "mean"}
    reading = P.read_metric("accuracy", spec, terms(accuracy=spec), moved((0, 0), (0, 0), (0, 1), metric="accuracy"))
    assert reading.moved == pytest.approx(Decimal(1) / 3)


def test_movements_are_in_the_metrics_own_direction():
    # R3.26: direction min, the candidate lower → a positive movement.
    spec = {"kind": "computed", "direction": "min", "scope": "run", "role": "objective"}
    reading = P.read_metric("cost_usd", spec, terms(cost_usd=spec), moved(("1.00", "0.40"), metric="cost_usd"))
    assert reading.moved == Decimal("0.60")


def test_with_several_trials_an_input_is_lost_only_when_most_of_its_trials_are():
    one_bad = [
        pair(0, side(P.VIABLE, quality=0.8), side(P.FAILED, quality=0.2), trial=1),
        pair(0, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.8), trial=2),
        pair(0, side(P.VIABLE, quality=0.8), side(P.VIABLE, quality=0.8), trial=3),
    ]
    assert P.lost_inputs(one_bad) == set()
    two_bad = [*one_bad[:1], pair(0, side(P.VIABLE, quality=0.8), side(P.FAILED, quality=0.2), trial=2), one_bad[2]]
    assert P.lost_inputs(two_bad) == {0}


def test_judge_health_counts_only_what_the_judge_saw_and_is_strictly_above_the_share():
    # R11.19 / R24.12: 2 of 5 ungraded (0.4 > 0.34) → inconclusive; exactly 0.34 stays healthy.
    sick = [pair(i, side(P.VIABLE, quality=0.5), P.Side(P.UNGRADED)) for i in range(2)]
    sick += [pair(i, side(P.VIABLE, quality=0.5), side(P.VIABLE, quality=0.5)) for i in range(2, 5)]
    verdict = P.health(sick, max_ungraded_share=SHARE)
    assert verdict is not None and verdict.inconclusive and "judge unhealthy" in verdict.reason
    edge = [pair(i, side(P.VIABLE, quality=0.5), P.Side(P.UNGRADED)) for i in range(34)]
    edge += [pair(i, side(P.VIABLE, quality=0.5), side(P.VIABLE, quality=0.5)) for i in range(34, 100)]
    edge += [pair(100, side(P.VIABLE, quality=0.5), P.Side(P.NOT_RUN))]  # never seen by the judge: in neither term
    assert P.health(edge, max_ungraded_share=SHARE) is None


def test_an_incumbent_with_no_grade_on_any_input_leaves_no_bar():
    pairs = [pair(i, P.Side(P.UNGRADED), side(P.VIABLE, quality=0.5)) for i in range(3)]
    verdict = P.health(pairs, max_ungraded_share=SHARE)
    assert verdict is not None and verdict.rule == "bar" and verdict.inconclusive


def test_a_brain_verdict_must_say_why_it_turns_a_change_down():
    # R11.31: a negative outcome without a reason is refused, a throwing verdict is a fault (inconclusive).
    pairs = moved((0.5, 0.7))
    with pytest.raises(P.VerdictFault, match="without a reason"):
        P.brain_verdict(lambda spec, pairs: {"verdict": "regressed"}, {}, pairs, which="module")
    with pytest.raises(P.VerdictFault, match="raised ZeroDivisionError"):
        P.brain_verdict(lambda spec, pairs: 1 / 0, {}, pairs, which="module")
    with pytest.raises(P.VerdictFault, match="must answer"):
        P.brain_verdict(lambda spec, pairs: "ok", {}, pairs, which="module")
    seen = {}

    def verdict(spec, pairs):
        seen["pairs"] = pairs
        return {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}

    answer = P.brain_verdict(verdict, {"metrics": {}}, pairs, which="module")
    assert answer.verdict == "validated"
    assert set(seen["pairs"][0]) >= {"baseline", "challenger", "input"}
    assert seen["pairs"][0]["challenger"]["state"] == "viable"
