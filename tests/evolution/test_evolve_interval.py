"""The evolve watch's bootstrap interval of the median difference (seed 003, "The watch compares"; R14.9; DESIGN:
2,000 resamples seeded from the cycle id), checked against scipy.stats.bootstrap's percentile interval."""

from __future__ import annotations

import numpy as np
import pytest

from evolution.presets import readings as R

MAX = {"direction": "max"}


def sample(seed: int, n: int, *, scale: float = 1.0, shift: float = 0.0) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(0, 0.8, n) * scale + shift)


def test_a_higher_confidence_reads_a_wider_interval_on_the_same_data():
    before, after = sample(1, 30), sample(2, 30, shift=0.3)
    narrow = R.interval(before, after, spec=MAX, confidence=0.9, seed=R.seed_for(7, "views"))
    wide = R.interval(before, after, spec=MAX, confidence=0.99, seed=R.seed_for(7, "views"))
    assert narrow is not None and wide is not None
    assert wide[0] < narrow[0] and wide[1] > narrow[1]


def test_the_same_cycle_id_reproduces_the_interval_and_another_draws_its_own():
    before, after = sample(3, 25), sample(4, 25)
    first = R.interval(before, after, spec=MAX, confidence=0.9, seed=R.seed_for(41, "views"))
    again = R.interval(before, after, spec=MAX, confidence=0.9, seed=R.seed_for(41, "views"))
    other = R.interval(before, after, spec=MAX, confidence=0.9, seed=R.seed_for(42, "views"))
    assert first == again
    assert other != first


def test_fewer_than_three_runs_on_a_side_give_no_interval():
    assert R.interval([1, 2], [1, 2, 3], spec=MAX, confidence=0.9, seed=R.seed_for(1, "m")) is None
    assert R.interval([1, 2, None, 3], [1, 2, 3], spec=MAX, confidence=0.9, seed=R.seed_for(1, "m")) is not None


def test_a_metric_driven_down_reads_its_gain_in_its_own_direction():
    before, after = [10.0] * 5 + [11.0] * 5, [7.0] * 5 + [8.0] * 5  # latency fell by 3: a gain
    low, high = R.interval(before, after, spec={"direction": "min"}, confidence=0.9, seed=R.seed_for(1, "latency"))
    assert 2 <= low <= high <= 4


def test_the_resampled_medians_follow_the_direct_resampling_distribution():
    values = np.array(sample(5, 12))
    rng = np.random.default_rng(0)
    fast = R._resampled_medians(values, rng, 20000)
    direct = np.median(values[np.random.default_rng(1).integers(0, len(values), (20000, len(values)))], axis=1)
    for q in (5, 25, 50, 75, 95):
        assert np.percentile(fast, q) == pytest.approx(np.percentile(direct, q), rel=0.06)


@pytest.mark.parametrize(
    ("n_before", "n_after", "seed"),
    [(10, 10, 11), (30, 25, 12), (101, 80, 13), (400, 400, 14)],
)
def test_the_interval_agrees_with_scipy_bootstrap_percentile_within_resampling_noise(n_before, n_after, seed):
    from scipy import stats

    before, after = sample(seed, n_before, scale=100), sample(seed + 100, n_after, scale=100, shift=20)
    ours = R.interval(before, after, spec=MAX, confidence=0.9, seed=R.seed_for(seed, "views"))
    assert ours is not None

    def difference(a, b, axis=-1):
        return np.median(b, axis=axis) - np.median(a, axis=axis)

    theirs = stats.bootstrap(
        (np.array(before), np.array(after)),
        difference,
        n_resamples=20000,
        confidence_level=0.9,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    spread = theirs.high - theirs.low
    # 2,000 resamples against 20,000: the endpoints agree to a tenth of the interval's width.
    assert float(ours[0]) == pytest.approx(theirs.low, abs=0.1 * spread)
    assert float(ours[1]) == pytest.approx(theirs.high, abs=0.1 * spread)


def test_the_mean_interval_agrees_with_scipy_bootstrap_too():
    from scipy import stats

    before, after = sample(21, 40), sample(22, 40, shift=0.2)
    ours = R.interval(before, after, spec={"aggregate": "mean"}, confidence=0.9, seed=R.seed_for(3, "m"))

    def difference(a, b, axis=-1):
        return np.mean(b, axis=axis) - np.mean(a, axis=axis)

    theirs = stats.bootstrap(
        (np.array(before), np.array(after)),
        difference,
        n_resamples=20000,
        confidence_level=0.9,
        method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval
    spread = theirs.high - theirs.low
    assert float(ours[0]) == pytest.approx(theirs.low, abs=0.1 * spread)
    assert float(ours[1]) == pytest.approx(theirs.high, abs=0.1 * spread)
