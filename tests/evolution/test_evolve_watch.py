"""The evolve watch: two windows compared by the six rules in order, the objective through a bootstrap interval
(seed 003, "The watch compares"; CONFORMANCE R14.1–R14.13, R4.15, R3.25)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evolution.models import Cycle
from evolution.presets import evolve
from evolution.presets import readings as R
from grading.models import Rating
from tests.evolution.evolve_helpers import METRICS, MINUTE, T0, runs, settle_with, shipped_on, shop, window_of

pytestmark = pytest.mark.django_db

STEADY = [1000, 1040, 980, 1010, 1020, 990, 1005, 1015, 995, 1030]
BEFORE_START = T0 - 120 * MINUTE
AFTER_START = T0 + 5 * MINUTE


def watched(values=None, **entity_kwargs):
    entity = shop(**entity_kwargs)
    before = window_of(entity, values if values is not None else runs(STEADY), start=BEFORE_START)
    return shipped_on(entity, before, merged_at=T0)


def by_metric(cycle: Cycle) -> dict[str, dict]:
    return {m["metric"]: m for m in cycle.watch_verdict["perMetric"]}


def test_the_watch_answers_nothing_until_its_window_is_full():
    cycle = watched()
    cycle = settle_with(cycle, runs([2000] * 9), start=AFTER_START)
    assert cycle.phase == Cycle.Phase.WATCHING and cycle.status == ""
    assert cycle.watch_window["progress"] == {"have": 9, "need": 10, "unit": "graded runs"}
    cycle = settle_with(cycle, runs([2000]), start=AFTER_START + 20 * MINUTE)
    assert cycle.status == Cycle.Status.VALIDATED


def test_a_clear_gain_validates_with_the_interval_on_the_record():
    cycle = settle_with(watched(), runs([v + 300 for v in STEADY]), start=AFTER_START)
    assert cycle.status == Cycle.Status.VALIDATED
    revenue = by_metric(cycle)["revenue"]
    low, high = (Decimal(x) for x in revenue["spread"])
    assert Decimal(revenue["allowed"]) == Decimal("100.75")  # 10% of the before median 1007.5
    assert low > Decimal(revenue["allowed"]) * -1 and low <= Decimal(revenue["gain"]) <= high
    assert revenue["before"] == {"value": 1007.5, "n": 10} and revenue["after"]["n"] == 10
    assert revenue["source"] == "judge" and revenue["confidence"] == 0.9
    assert cycle.watch_verdict["comparator"] == "evolve" and cycle.watch_verdict["rule"] == 6
    assert cycle.watch_verdict["reason"] is None


def test_a_guard_under_its_floor_regresses_even_when_the_objective_soared():
    cycle = settle_with(watched(), runs([v * 3 for v in STEADY], conversion=0.2), start=AFTER_START)
    assert cycle.status == Cycle.Status.REGRESSED
    assert cycle.watch_verdict["rule"] == 1
    assert "conversion stands at 0.2 after the change, under its floor 0.25" in cycle.reason


def test_a_floor_breach_regresses_before_a_missing_guard_is_called_inconclusive():
    metrics = {
        **shop_metrics(),
        "latency": {"kind": "computed", "direction": "min", "role": "guard"},
    }
    entity = shop(metrics=metrics)
    before = window_of(entity, [{**v, "latency": 5} for v in runs(STEADY)], start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0)
    cycle = settle_with(cycle, runs([1500] * 10, conversion=0.1), start=AFTER_START)  # no latency after
    assert cycle.status == Cycle.Status.REGRESSED and cycle.watch_verdict["rule"] == 1


def test_a_guard_past_its_tolerance_regresses():
    # conversion 0.4 → 0.34: 15% down, past the engine's 10% band (and above its floor).
    cycle = settle_with(watched(), runs([v + 300 for v in STEADY], conversion=0.34), start=AFTER_START)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.watch_verdict["rule"] == 2
    assert cycle.reason.startswith("guard conversion moved -0.06 (0.4 → 0.34), past its tolerance ±0.04")


def test_the_objective_regresses_only_when_the_whole_interval_is_past_its_band():
    cycle = settle_with(watched(), runs([v - 400 for v in STEADY]), start=AFTER_START)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.watch_verdict["rule"] == 3
    revenue = by_metric(cycle)["revenue"]
    assert Decimal(revenue["spread"][1]) < -Decimal(revenue["allowed"])
    assert "wholly past −100.75" in cycle.reason


def test_an_interval_straddling_minus_allowed_is_unvalidated_with_the_gain_in_the_reason():
    # A noisy window after: its median ~100 below, the interval reaching well inside the band.
    noisy = [700, 1300, 800, 1250, 850, 1200, 900, 1150, 880, 860]
    cycle = settle_with(watched(), runs(noisy), start=AFTER_START)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.watch_verdict["rule"] == 6
    revenue = by_metric(cycle)["revenue"]
    low, high = (Decimal(x) for x in revenue["spread"])
    assert low < -Decimal("100.75") < high
    assert cycle.reason == (
        f"inconclusive: revenue gain {R.shown(revenue['gain'])} in [{R.shown(low)}, {R.shown(high)}] against ±100.75"
    )


def test_a_guard_nobody_measured_after_the_change_is_inconclusive_naming_it_and_the_side():
    cycle = settle_with(watched(), runs([v + 300 for v in STEADY], conversion=None), start=AFTER_START)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.watch_verdict["rule"] == 4
    assert cycle.reason == "inconclusive: conversion was not measured after the change (the window the watch observed)"


def test_an_objective_measured_on_two_runs_has_no_interval_and_is_inconclusive():
    values = runs([1200, 1300]) + [{"conversion": 0.4}] * 8
    cycle = settle_with(watched(), values, start=AFTER_START)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.watch_verdict["rule"] == 4
    assert "an interval needs 3 on each side" in cycle.reason
    assert by_metric(cycle)["revenue"]["spread"] is None


def test_must_improve_with_no_gain_to_show_is_unvalidated():
    metrics = shop_metrics()
    metrics["revenue"] = {**metrics["revenue"], "mustImprove": True}
    cycle = watched(metrics=metrics)
    cycle = settle_with(cycle, runs(STEADY), start=AFTER_START)  # an inert change
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.watch_verdict["rule"] == 5
    assert cycle.reason.startswith("shipped, no measurable gain: revenue gain 0 in [")


def test_must_improve_validates_only_when_the_whole_interval_clears_plus_allowed():
    metrics = shop_metrics()
    metrics["revenue"] = {**metrics["revenue"], "mustImprove": True}
    cycle = settle_with(watched(metrics=metrics), runs([v + 500 for v in STEADY]), start=AFTER_START)
    assert cycle.status == Cycle.Status.VALIDATED
    assert Decimal(by_metric(cycle)["revenue"]["spread"][0]) > Decimal("100.75")


def test_a_period_objective_keeps_the_point_rule_over_the_windows_own_values():
    metrics = {
        "followers": {"kind": "computed", "scope": "period", "direction": "max", "role": "objective"},
        "conversion": METRICS_GUARD,
    }
    entity = shop(metrics=metrics)
    before = window_of(entity, [{"conversion": 0.4}] * 10, start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0, metrics=[{"id": "followers", "value": 500}])
    window_of(entity, [{"conversion": 0.4}] * 10, start=AFTER_START)
    from evolution.loop import watch

    seen = watch.observe(cycle, T0 + 60 * MINUTE)
    fell = evolve.compare(cycle, seen, {"ready": True, "metrics": [{"id": "followers", "value": 400}]})
    assert fell.verdict == "regressed" and fell.record["rule"] == 3
    held = evolve.compare(cycle, seen, {"ready": True, "metrics": [{"id": "followers", "value": 480}]})
    assert held.verdict == "validated"
    followers = next(m for m in held.record["perMetric"] if m["metric"] == "followers")
    assert followers["scope"] == "period" and followers["spread"] is None and followers["gain"] == "-20"
    unmeasured = evolve.compare(cycle, seen, {"ready": True, "metrics": [{"id": "followers", "value": None}]})
    assert unmeasured.verdict == "unvalidated" and "followers was not measured after the change" in unmeasured.reason
    from evolution.presets.base import ComparatorFault

    with pytest.raises(ComparatorFault, match="a ready window left out period metric followers"):
        evolve.compare(cycle, seen, {"ready": True, "metrics": []})  # a load error (R5.15), settled unvalidated


def test_aggregate_mean_is_read_as_a_mean_on_both_sides():
    metrics = shop_metrics()
    metrics["conversion"] = {**metrics["conversion"], "aggregate": "mean", "floor": None}
    cycle = watched(values=runs(STEADY, conversion=[0, 0, 1] * 3 + [0]), metrics=metrics)
    cycle = settle_with(cycle, runs(STEADY, conversion=[0, 0, 1] * 3 + [1]), start=AFTER_START)
    conversion = by_metric(cycle)["conversion"]
    assert conversion["aggregate"] == "mean"
    assert conversion["before"]["value"] == pytest.approx(0.3) and conversion["after"]["value"] == pytest.approx(0.4)


def rated_shop():
    metrics = {
        "fit": {"kind": "judged", "human": True, "direction": "max", "role": "objective", "criterion": "fits"},
        "quality": {"role": "observe"},
    }
    return shop(metrics=metrics, evaluation={"method": "default", "human": {"agreement": {"minPairs": 3}}})


def rate(grades, values, user):
    for grade, value in zip(grades, values, strict=False):
        Rating.objects.create(
            execution=grade.execution,
            metric_id="fit",
            user=user,
            value=Decimal(str(1 + 4 * value)),
            normalized=value,
        )


def test_people_stand_over_the_judge_on_both_sides_when_both_hold_min_pairs(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    entity = rated_shop()
    before = window_of(entity, [{"fit": 0.5}] * 10, start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0)
    after = window_of(entity, [{"fit": 0.5}] * 10, start=AFTER_START)
    rate(before, [0.25] * 10, alice)
    rate(after, [1.0] * 10, alice)
    from evolution.loop import watch

    answer = evolve.compare(cycle, watch.observe(cycle, T0 + 60 * MINUTE), None)
    fit = answer.record["perMetric"][0]
    assert fit["source"] == "people" and fit["before"]["value"] == 0.25 and fit["after"]["value"] == 1.0
    assert answer.verdict == "validated"


def test_one_source_per_metric_the_judge_on_both_sides_when_one_window_lacks_ratings(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    entity = rated_shop()
    before = window_of(entity, [{"fit": 0.5}] * 10, start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0)
    after = window_of(entity, [{"fit": 0.5}] * 10, start=AFTER_START)
    rate(before, [0.25] * 10, alice)
    rate(after[:2], [1.0, 1.0], alice)  # two rated runs after: fewer than minPairs 3
    from evolution.loop import watch

    answer = evolve.compare(cycle, watch.observe(cycle, T0 + 60 * MINUTE), None)
    fit = answer.record["perMetric"][0]
    assert fit["source"] == "judge" and fit["before"]["value"] == 0.5 and fit["after"]["value"] == 0.5


def shop_metrics():
    return {key: dict(value) for key, value in METRICS.items()}


METRICS_GUARD = {"kind": "computed", "direction": "max", "role": "guard", "floor": 0.25}


def test_the_cycle_story_draws_both_windows_and_the_interval_against_the_band(client, django_user_model):
    from django.urls import reverse

    alice = django_user_model.objects.create_superuser("alice", "alice@example.org", "pw")
    client.force_login(alice)
    cycle = settle_with(watched(), runs([v + 300 for v in STEADY]), start=AFTER_START)
    page = client.get(reverse("evolution:cycle", args=[cycle.pk])).content.decode()
    assert 'id="watch-evolve"' in page and 'id="watch-metric-revenue"' in page
    assert "against ±100.75" in page and '<svg class="interval"' in page
    assert "Answered by rule 6 of 6: the whole interval against the bar" in page


def test_the_watch_chapter_draws_both_windows_distributions_side_by_side_per_metric(client, django_user_model):
    import re

    from django.urls import reverse

    alice = django_user_model.objects.create_superuser("alice", "alice@example.org", "pw")
    client.force_login(alice)
    cycle = settle_with(watched(), runs([v + 300 for v in STEADY], 0.1), start=AFTER_START)  # conversion broke
    assert cycle.status == Cycle.Status.REGRESSED
    page = client.get(reverse("evolution:cycle", args=[cycle.pk])).content.decode()
    for metric in ("revenue", "conversion"):
        figure = re.search(rf'id="watch-windows-{metric}">(.*?)</figure>', page, re.S)
        assert figure is not None, metric
        drawn = figure.group(1)
        assert f'aria-label="{metric}: 10 runs before the change, 10 after"' in drawn
        assert drawn.count("<circle") == 20  # each run of both windows a dot
        assert "before: median" in drawn and "after: median" in drawn
    revenue = re.search(r'id="watch-windows-revenue">(.*?)</figure>', page, re.S).group(1)
    assert "before: median 1007.5 of 10 runs" in revenue and "after: median 1307.5 of 10 runs" in revenue
    assert "after: median 0.1 of 10 runs" in page
    assert "Answered by rule 1 of 6: a floor" in page
    assert '"perMetric"' not in page and "&#x27;perMetric&#x27;" not in page  # the record is shown, not dumped
    chapter = page[page.index('id="watch-evolve"') : page.index('id="watch-evolve-rule"')]
    assert "00000000" not in chapter  # an interval's endpoints as people read them, not the record's twelve places


def test_the_decide_card_promises_the_comparison_the_watch_will_make():
    from evolution.loop.cardtext import watched_by

    cycle = watched()
    assert watched_by(cycle) == (
        "the next 10 graded runs after the merge compared with this window: revenue through a 90% interval of its "
        "median gain, validated only when the whole interval clears −its tolerance; conversion held to its floor "
        "and tolerance — a regression opens its revert"
    )
    strict = watched(
        slug="strict",
        metrics={
            "revenue": {**METRICS["revenue"], "mustImprove": True, "aggregate": "mean"},
            "conversion": METRICS["conversion"],
            "margin": {"kind": "computed", "direction": "max", "role": "guard"},
        },
        watch={"confidence": 0.99, "windowRuns": 20, "onInconclusive": "revert"},
    )
    said = watched_by(strict)
    assert said.startswith("the next 20 graded runs after the merge compared with this window: revenue through a 99%")
    assert "(its mean: aggregate mean)" in said and "clears +its tolerance (it must improve)" in said
    assert "conversion and margin held to their floors and tolerances" in said
    assert said.endswith("and so does a change the watch cannot show worked (watch.onInconclusive: revert)")
    quiet = watched(slug="quiet", watch={"mode": "none"})
    assert watched_by(quiet) == "nothing after the merge (watch.mode: none): it ships unvalidated, by design"


def test_a_cycle_opened_on_a_window_not_yet_ready_settles_inconclusive_after_a_clear_gain():
    entity = shop()
    before = window_of(entity, runs([1000, 1010, 990]), start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0)
    thin = {**cycle.window, "ready": False, "progress": {"have": 3, "need": 10, "unit": "graded runs"}}
    Cycle.objects.filter(pk=cycle.pk).update(window=thin)
    cycle.refresh_from_db()
    cycle = settle_with(cycle, runs([v + 400 for v in STEADY]), start=AFTER_START)
    assert cycle.status == Cycle.Status.UNVALIDATED and cycle.watch_verdict["rule"] == 4
    assert cycle.reason.startswith("inconclusive: the cycle opened on 3 of 10 graded runs (before its window was ready")
    by = by_metric(cycle)
    assert by["revenue"]["spread"] is not None  # measured, on the record: only not shown to have worked


def test_a_thin_baseline_still_regresses_on_a_floor():
    entity = shop()
    before = window_of(entity, runs([1000, 1010, 990]), start=BEFORE_START)
    cycle = shipped_on(entity, before, merged_at=T0)
    Cycle.objects.filter(pk=cycle.pk).update(window={**cycle.window, "ready": False})
    cycle.refresh_from_db()
    cycle = settle_with(cycle, runs(STEADY, 0.1), start=AFTER_START)
    assert cycle.status == Cycle.Status.REGRESSED and cycle.watch_verdict["rule"] == 1


def test_the_window_read_from_the_cycles_row_names_the_same_runs_as_its_ids_sent_back():
    """The before window is read from the ids stored on the cycle inside the statement; it is the same pairs as the
    ids bound one by one, and a stored id that is not a run id's text names no run (never an error)."""
    cycle = watched()
    assert evolve.well_formed(cycle.window["runIds"])
    stored = evolve.before_runs(cycle)
    assert stored == evolve.pinned_runs(cycle, cycle.window["runIds"]) and len(stored) == len(STEADY)
    assert [vector["revenue"] for _, vector in stored] == STEADY
    window = dict(cycle.window)
    window["runIds"] = [*window["runIds"], "not-a-run", 7, "0" * 36]
    Cycle.objects.filter(pk=cycle.pk).update(window=window)
    cycle.refresh_from_db()
    assert not evolve.well_formed(cycle.window["runIds"])
    assert evolve.before_runs(cycle) == stored


def test_runs_graded_under_another_judge_are_left_out_and_the_same_judge_in_any_key_order_is_kept():
    """The window's judges are read as 'the pinned one' without their text where stored as it; any other is read
    and compared: another model is not comparable, the same snapshot written in another key order is."""
    from tests.evolution.evolve_helpers import JUDGE, graded_at

    entity = shop()
    before = window_of(entity, runs(STEADY), start=BEFORE_START)
    reordered = dict(reversed(list(JUDGE.items())))
    other = {**JUDGE, "model": "another"}
    kept = graded_at(entity, BEFORE_START + 30 * MINUTE, {"revenue": 5000, "conversion": 0.4}, judge=reordered)
    dropped = graded_at(entity, BEFORE_START + 31 * MINUTE, {"revenue": 9000, "conversion": 0.4}, judge=other)
    cycle = shipped_on(entity, [*before, kept, dropped], merged_at=T0)
    assert [vector["revenue"] for _, vector in evolve.before_runs(cycle)] == [*STEADY, 5000]


def _tick_statements(size: int) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evolution.loop import machine
    from tests.evolution.evolve_helpers import window_of

    values = runs([1000 + (i % 7) * 10 for i in range(size)])
    cycle = watched(values, slug=f"shop-{size}", watch={"windowRuns": size}, trigger={"windowRuns": size})
    window_of(cycle.entity, runs([v["revenue"] + 300 for v in values]), start=AFTER_START)
    with CaptureQueriesContext(connection) as seen:
        machine.evaluate(cycle, AFTER_START + (size + 5) * MINUTE)
    assert cycle.status == Cycle.Status.VALIDATED, cycle.reason
    return [q["sql"] for q in seen.captured_queries if "SAVEPOINT" not in q["sql"]]


def test_a_watch_tick_sends_the_same_statements_whatever_its_windows_hold():
    """The tick that settles an evolve watch reads each window in one statement: its statements do not grow with
    the windows (10 runs or 60 a side), and stay few."""
    small, large = _tick_statements(10), _tick_statements(60)
    assert len(small) == len(large), "\n".join(large)
    assert len(large) <= 12, "\n".join(s[:90] for s in large)
