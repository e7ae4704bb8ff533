"""Square Wave + EMS: the distribution estimate, its quantiles, and the binned baseline.

The Adult comparison is seeded (24 paired seeds per cell), so it is deterministic; it checks
issue 15's claim that Square Wave + EMS has a lower Wasserstein-1 distance to the true
distribution of ``age`` and ``hours-per-week`` than the binned frequency-oracle baseline (bins +
``auto`` + Norm-Sub), by a margin of two standard errors of the paired gap, in the cells where
40 seeds showed a difference (docs/MECHANISMS.md section 19.7 lists the others).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from aggregator.errors import NotEnoughReports
from aggregator.numeric import (
    BandChannel,
    DistributionEstimate,
    IntegerChannel,
    choose_refinement,
    em_steps,
    ems,
    estimate_numeric,
    log_likelihood,
)
from aggregator.numeric_answers import atom_rows
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import NumericTally, create, from_config, square_wave_b
from simulator.adult import load_adult
from simulator.errors import UnknownAttribute
from simulator.numeric import adult_numeric, binned_baseline, true_quantile, wasserstein1
from simulator.numeric_scenario import NUMERIC_BOUNDS, baseline_bins

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


#: (column, epsilon) cells of the W1 comparison: those where 40 paired seeds put Square Wave's
#: gap at least 3 standard errors clear (docs/MECHANISMS.md section 19.7). Not tested: age at
#: eps = 0.5, where two runs of 40 seeds gave -0.08 +- 0.09 and +0.19 +- 0.11 years (a tie).
W1_CELLS = [("age", 1.0), ("age", 2.0), ("age", 4.0)] + [
    ("hours-per-week", e) for e in (0.5, 1.0, 2.0, 4.0)
]
PAIRED_SEEDS = 24


@functools.cache
def paired_errors(column: str, epsilon: float) -> dict[str, np.ndarray]:
    """Per seed (rows) W1, |median error| and |p90 error| (columns) of the binned baseline
    (``"binned"``), of Square Wave (``"sw"``) and of the same reports declared integer-valued
    (``"int"``), on the same seed numbers; cached, so the tests share the estimates."""
    x = adult_numeric(column)
    bounds = NUMERIC_BOUNDS[column]
    bins = baseline_bins(x.size, epsilon)
    mech = create("square_wave", epsilon=epsilon, bounds=bounds)
    declared = create("square_wave", epsilon=epsilon, bounds=bounds, integer=True)
    median, p90 = true_quantile(x, 0.5, bounds), true_quantile(x, 0.9, bounds)

    def errors(est: object) -> tuple[float, float, float]:
        assert isinstance(est, DistributionEstimate)
        return (
            wasserstein1(est, x),
            abs(est.quantile(0.5).value - median),
            abs(est.quantile(0.9).value - p90),
        )

    rows: dict[str, list[tuple[float, float, float]]] = {"binned": [], "sw": [], "int": []}
    for s in range(PAIRED_SEEDS):
        tally = mech.tally(mech.perturb_many(x, rng=s))
        rows["sw"].append(errors(estimate_numeric(mech, tally, bootstrap=0)))
        if column == "age":
            rows["int"].append(errors(estimate_numeric(declared, tally, bootstrap=0)))
        base = binned_baseline(x, epsilon=epsilon, bounds=bounds, bins=bins, rng=s)
        rows["binned"].append(errors(base))
    return {k: np.asarray(v) for k, v in rows.items()}


def paired_gap(column: str, epsilon: float, metric: int, sw: str = "sw") -> tuple[float, float]:
    """Mean of (baseline - Square Wave) per seed and its standard error (positive: SW wins)."""
    errors = paired_errors(column, epsilon)
    gap = errors["binned"][:, metric] - errors[sw][:, metric]
    return float(gap.mean()), float(gap.std(ddof=1) / np.sqrt(gap.size))


@pytest.mark.slow
@pytest.mark.parametrize("column, epsilon", W1_CELLS)
def test_square_wave_beats_the_binned_baseline_w1(column: str, epsilon: float) -> None:
    """Issue 15's target: W1 below the binned baseline (its bin count fixed before the data by
    ``baseline_bins``), by more than 2 standard errors of the paired gap over 24 seeds. The
    seeds make it deterministic; the margin comes from the gaps' own spread, so a change that
    only ties the baseline fails."""
    gap, se = paired_gap(column, epsilon, 0)
    assert gap > 2 * se, f"{column} eps={epsilon}: W1 gap {gap:.3f} +- {se:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [0.5, 4.0])
def test_square_wave_beats_the_binned_baseline_median_on_hours(epsilon: float) -> None:
    """The median of spiky ``hours-per-week`` (47% at exactly 40): the same paired rule (the
    estimates are the W1 test's, cached)."""
    gap, se = paired_gap("hours-per-week", epsilon, 1)
    assert gap > 2 * se, f"eps={epsilon}: median gap {gap:.3f} +- {se:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1.0, 2.0, 4.0])
def test_integer_valued_square_wave_beats_the_baseline_on_age_quantiles(epsilon: float) -> None:
    """Declared integer-valued (``integer=True``, the same reports), Square Wave's median and
    p90 of ``age`` beat the baseline by 2 standard errors of the paired gap (40 seeds: at least
    3.4 standard errors clear at these epsilons; docs/MECHANISMS.md section 19.7)."""
    for metric, label in ((1, "median"), (2, "p90")):
        gap, se = paired_gap("age", epsilon, metric, sw="int")
        assert gap > 2 * se, f"eps={epsilon}: {label} gap {gap:.3f} +- {se:.3f}"


def spikes(n: int, seed: int) -> np.ndarray:
    """Integer-valued data with one dominant value, like Adult hours-per-week."""
    gen = np.random.default_rng(seed)
    return np.where(gen.random(n) < 0.5, 40.0, gen.integers(1, 100, n).astype(float))


def test_refinement_is_chosen_from_the_reports_and_sharpens_spikes() -> None:
    """On spiky data at a high epsilon the held-out likelihood asks for plain EM steps after
    EMS, and they lower W1 (smoothing alone smears the spike over grid neighbours); the choice
    is a function of the tally (same tally, same estimate)."""
    x = spikes(20_000, 1)
    mech = create("square_wave", epsilon=4.0, bounds=(1, 99), grid=128)
    tally = mech.tally(mech.perturb_many(x, rng=2))
    est = estimate_numeric(mech, tally, bootstrap=0)
    assert est.refinement_steps > 0
    assert choose_refinement(BandChannel.of(mech), mech.histogram(tally)) == est.refinement_steps
    again = estimate_numeric(mech, tally, bootstrap=0)
    assert np.array_equal(again.frequencies, est.frequencies)
    smoothed = ems(BandChannel.of(mech), mech.histogram(tally))
    plain = DistributionEstimate("ems", tally.n, est.edges, smoothed, est.centers)
    assert wasserstein1(est, x) < wasserstein1(plain, x)


def test_em_steps_never_lower_the_likelihood() -> None:
    x = spikes(5000, 3)
    mech = create("square_wave", epsilon=2.0, bounds=(1, 99), grid=64)
    counts = mech.histogram(mech.tally(mech.perturb_many(x, rng=4)))
    channel = BandChannel.of(mech)
    f = ems(channel, counts)
    previous = log_likelihood(channel, counts, f)
    for _ in range(5):
        f = em_steps(channel, counts, f, 3)
        assert abs(f.sum() - 1) < 1e-12 and (f >= 0).all()
        now = log_likelihood(channel, counts, f)
        assert now >= previous - 1e-9
        previous = now


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


def test_an_integer_valued_campaign_is_declared_and_checked() -> None:
    plain = create("square_wave", epsilon=1.0, bounds=(1, 99))
    declared = create("square_wave", epsilon=1.0, bounds=(1, 99), integer=True)
    assert "integer" not in plain.config()["params"]  # existing configs and digests unchanged
    assert declared.config()["params"]["integer"] is True
    assert from_config(declared.config()).integer and declared != plain
    # the device is the same: same outputs, same exact weights
    assert declared.output_size == plain.output_size
    assert declared.output_weights(7) == plain.output_weights(7)
    for bad in ({"bounds": (1.5, 99)}, {"bounds": (0, 1000)}, {"integer": 1}):
        with pytest.raises(InvalidParameter):
            create("square_wave", epsilon=1.0, **{"bounds": (1, 99), "integer": True, **bad})


def test_integer_channel_equals_rounding_then_the_band() -> None:
    mech = create("square_wave", epsilon=1.0, bounds=(0, 20), grid=64, integer=True)
    channel = IntegerChannel.of(mech)
    rounding = np.zeros((21, 65))
    for v in range(21):
        pos = v * 64 / 20
        base = min(int(pos), 63)
        rounding[v, base] += 1 - (pos - base)
        rounding[v, base + 1] += pos - base
    dense = rounding @ mech.channel()
    assert np.allclose(channel.forward(np.eye(21)), dense, rtol=0, atol=1e-15)
    r = np.random.default_rng(1).random((2, dense.shape[1]))
    assert np.allclose(channel.backward(r), r @ dense.T, rtol=0, atol=1e-12)


def test_an_integer_valued_estimate_has_atoms_on_the_integers() -> None:
    """Declared integer-valued, the estimate puts mass on the integers: its CDF is a step
    function, quantiles are integers (the inverted CDF, as ``true_quantile``), and on spiky
    integer data it is closer in W1 than the grid estimate of the same reports."""
    x = spikes(20_000, 5)
    grid = create("square_wave", epsilon=4.0, bounds=(1, 99), grid=128)
    declared = create("square_wave", epsilon=4.0, bounds=(1, 99), grid=128, integer=True)
    tally = grid.tally(grid.perturb_many(x, rng=6))
    est = estimate_numeric(declared, tally, bootstrap=10, rng=7)
    assert isinstance(est, DistributionEstimate) and est.atoms
    assert np.array_equal(est.centers, np.arange(1.0, 100.0))
    assert est.edges[0] == 1 and est.edges[-1] == 99 and est.edges.size == est.centers.size + 1
    assert abs(est.frequencies.sum() - 1) < 1e-9 and (est.frequencies >= 0).all()
    assert est.cdf(39.99) == est.cdf(39.0) < est.cdf(40.0)
    for q in (0.5, 0.9):
        e = est.quantile(q)
        assert e.value == round(e.value) and e.low <= e.value <= e.high
    assert est.quantile(0.5).value == true_quantile(x, 0.5, (1, 99)) == 40
    grid_est = estimate_numeric(grid, tally, bootstrap=0)
    assert wasserstein1(est, x) < wasserstein1(grid_est, x)
    # The atoms are answered (to_dict; the HTTP answer through atom_rows): every integer,
    # its frequency and an interval from the replicates that holds it; none for the grid.
    listed = est.to_dict()["atoms"]
    assert [a["value"] for a in listed] == est.centers.tolist()
    assert [a["frequency"] for a in listed] == est.frequencies.tolist()
    rows = atom_rows(est, 0.95)
    low, high = est.frequency_intervals(0.95)
    assert [r.value for r in rows] == est.centers.tolist()
    assert all(r.ci_low <= r.frequency <= r.ci_high for r in rows)
    assert [r.ci_low for r in rows] == np.minimum(low, est.frequencies).tolist()
    assert grid_est.to_dict()["atoms"] == [] and atom_rows(grid_est, 0.95) == []


def test_an_integer_quantiles_interval_ends_on_integers() -> None:
    """With atoms the bootstrap percentile interval of a quantile ends on replicate quantiles
    (integers), outside the interpolated percentiles, not between two integers."""
    centers = np.arange(1.0, 6.0)
    edges = np.arange(0.5, 6.0)
    # Replicate medians 1, 2, 2, 3, 3, 3, 4, 4, 5: a point mass at each in turn.
    medians = [1, 2, 2, 3, 3, 3, 4, 4, 5]
    replicates = np.zeros((len(medians), 5))
    replicates[np.arange(len(medians)), np.array(medians) - 1] = 1.0
    freqs = np.full(5, 0.2)
    est = DistributionEstimate("x", 9, edges, freqs, centers, replicates, atoms=True)
    e = est.quantile(0.5, level=0.8)
    # Interpolated: 10% and 90% of [1, 2, 2, 3, 3, 3, 4, 4, 5] are 1.8 and 4.2.
    assert np.quantile(medians, [0.1, 0.9]).tolist() == pytest.approx([1.8, 4.2])
    assert (e.value, e.low, e.high) == (3.0, 1.0, 5.0)
    grid = DistributionEstimate("x", 9, edges, freqs, centers, replicates)
    assert grid.quantile(0.5, level=0.8).low not in (1.0, 2.0)
