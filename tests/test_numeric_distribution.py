"""Square Wave + EMS: the distribution estimate, its quantiles, and the binned baseline.

The Adult comparison is seeded (three repetitions each), so it is deterministic; it checks the
issue's claim that Square Wave + EMS has a lower Wasserstein-1 distance to the true distribution
of ``age`` than the binned frequency-oracle baseline (bins + ``auto`` + Norm-Sub) at every bin
count tried.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.errors import NotEnoughReports
from aggregator.numeric import (
    BandChannel,
    DistributionEstimate,
    ems,
    estimate_numeric,
)
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import NumericTally, create, square_wave_b
from simulator.adult import load_adult
from simulator.errors import UnknownAttribute
from simulator.numeric import adult_numeric, binned_baseline, true_quantile, wasserstein1
from simulator.numeric_scenario import baseline_bins

AGE_BOUNDS = (17.0, 90.0)


@pytest.fixture(scope="module")
def age() -> np.ndarray:
    labels, indices = load_adult("train").column("age")
    return np.array([float(v) for v in labels])[indices]


def test_adult_numeric_columns_match_the_loader(age) -> None:
    assert np.array_equal(adult_numeric("age"), age)
    hours = adult_numeric("hours-per-week")
    assert hours.size == age.size and hours.min() == 1 and hours.max() == 99
    with pytest.raises(UnknownAttribute):
        adult_numeric("occupation")


def test_b_follows_the_paper() -> None:
    for eps, expected in [(1.0, 0.2561), (4.0, 0.0304)]:
        e = np.exp(eps)
        assert abs(square_wave_b(eps) - (eps * e - e + 1) / (2 * e * (e - 1 - eps))) < 1e-12
        assert abs(square_wave_b(eps) - expected) < 1e-4
    assert abs(square_wave_b(1e-9) - 0.5) < 1e-6


def test_band_channel_equals_the_dense_matrix() -> None:
    mech = create("square_wave", epsilon=1.0, bounds=(0, 1), grid=32)
    band = BandChannel.of(mech)
    assert np.allclose(band.dense(), mech.channel(), rtol=0, atol=0)
    counts = mech.histogram(mech.tally(mech.perturb_many(np.linspace(0, 1, 3000), rng=1)))
    assert np.allclose(ems(band, counts), ems(mech.channel(), counts), atol=1e-12)


def test_recovers_a_known_distribution() -> None:
    gen = np.random.default_rng(3)
    x = np.concatenate([gen.normal(30, 4, 60_000), gen.normal(70, 6, 40_000)])
    mech = create("square_wave", epsilon=3.0, bounds=(0, 100))
    est = estimate_numeric(mech, mech.tally(mech.perturb_many(x, rng=4)), bootstrap=20, rng=5)
    assert isinstance(est, DistributionEstimate)
    assert np.all(est.frequencies >= 0) and abs(est.frequencies.sum() - 1) < 1e-9
    assert est.edges.size == est.frequencies.size + 1
    assert wasserstein1(est, x) < 1.0  # 1% of the range
    assert abs(est.mean - np.clip(x, 0, 100).mean()) < 1.0
    q = est.quantile(0.5)
    assert q.low <= q.value <= q.high
    assert abs(q.value - true_quantile(x, 0.5, (0, 100))) < 2.0
    low, high = est.frequency_intervals()
    assert np.all(low <= high)


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_square_wave_beats_the_binned_baseline_on_adult_age(age, epsilon: float) -> None:
    """Issue 15's target: W1 below the binned baseline with its bin count fixed before the data
    (``baseline_bins``: 16 and 32 bins here). Over 40 paired seeds the gap was 0.24 (sd 0.39
    per seed) at eps = 1 and 0.22 (sd 0.20) at eps = 2, so 24 seeds put it 3 and 5 standard
    errors clear. At eps = 0.5 the same 40 seeds gave -0.03 +- 0.09: no difference, hence not
    tested (docs/MECHANISMS.md section 19)."""
    bins = baseline_bins(age.size, epsilon)
    mech = create("square_wave", epsilon=epsilon, bounds=AGE_BOUNDS)
    seeds = range(24)
    sw = [
        wasserstein1(
            estimate_numeric(mech, mech.tally(mech.perturb_many(age, rng=s)), bootstrap=0), age
        )
        for s in seeds
    ]
    base = [
        wasserstein1(
            binned_baseline(age, epsilon=epsilon, bounds=AGE_BOUNDS, bins=bins, rng=s), age
        )
        for s in seeds
    ]
    gap = np.asarray(base) - np.asarray(sw)
    se = gap.std(ddof=1) / np.sqrt(gap.size)
    assert gap.mean() > 0, f"eps={epsilon} bins={bins}: W1 gap {gap.mean():.3f} +- {se:.3f}"


def test_quantile_interval_covers_adults_median_at_high_epsilon(age) -> None:
    mech = create("square_wave", epsilon=4.0, bounds=AGE_BOUNDS)
    est = estimate_numeric(mech, mech.tally(mech.perturb_many(age, rng=9)), bootstrap=30, rng=1)
    truth = true_quantile(age, 0.5, AGE_BOUNDS)
    q = est.quantile(0.5, level=0.99)
    assert q.low - 1.0 <= truth <= q.high + 1.0  # within the interval, up to the integer lattice
    assert q.high - q.low < 3.0
    for bad in (-0.1, 1.5, "0.5", True):
        with pytest.raises(InvalidParameter):
            est.quantile(bad)


def test_estimate_numeric_refuses_bad_input() -> None:
    mech = create("square_wave", epsilon=1.0, bounds=(0, 1), grid=8)
    with pytest.raises(NotEnoughReports):
        estimate_numeric(mech, mech.empty_tally())
    with pytest.raises(InvalidParameter):
        estimate_numeric(mech, NumericTally(1, (1, 2)))
    tally = mech.tally([0, 1])
    bad = NumericTally(5, tally.values)  # counts do not sum to n
    with pytest.raises(InvalidParameter):
        estimate_numeric(mech, bad)
    with pytest.raises(InvalidParameter):
        estimate_numeric(mech, tally, bootstrap=-1)
    with pytest.raises(InvalidParameter):
        estimate_numeric(object(), tally)  # type: ignore[arg-type]
