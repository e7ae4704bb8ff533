"""The per-report pattern MLE for unary encoding and subset selection (aggregator/pattern.py).

The brute-force reference evaluates the exact likelihood bit by bit (product of Bernoulli
terms, not the r0/r1 form the estimator uses) over a fine grid of the simplex. Statistical
claims use paired draws and a one-sided z at 1% (2.326); seeds are fixed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aggregator.estimate import estimate
from aggregator.pattern import (
    PatternHistogram,
    histogram_of_payloads,
    merge_histograms,
    pattern_frequencies,
    pattern_histogram,
    pattern_mle,
    pattern_mle_ratio,
    pattern_ratio,
    pattern_std_errors,
)
from aggregator.postprocess import mle_frequencies, postprocess
from aggregator.results import FrequencyEstimates
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create

Z_ONE_SIDED_1PCT = 2.326


def _bitwise_loglik(f: np.ndarray, hist: PatternHistogram, p: float, q: float) -> np.ndarray:
    """Exact log-likelihood of the histogram at each row of ``f``, bit by bit."""
    out = np.zeros(f.shape[0])
    k = hist.patterns.shape[1]
    for bits, count in zip(hist.patterns, hist.counts, strict=True):
        per_x = np.array(
            [
                math.prod(
                    (p if bits[v] else 1 - p) if v == x else (q if bits[v] else 1 - q)
                    for v in range(k)
                )
                for x in range(k)
            ]
        )
        out += count * np.log(f @ per_x)
    return out


def test_pattern_mle_is_the_brute_force_maximum() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    rng = np.random.default_rng(11)
    batch = mech.perturb_many(rng.choice(3, size=400, p=[0.6, 0.3, 0.1]), rng=rng)
    hist = pattern_histogram(mech, batch)
    fit = pattern_frequencies(mech, hist)
    assert fit.converged
    step = 0.002
    grid = np.array(
        [
            (a, b, 1 - a - b)
            for a in np.arange(0, 1 + 1e-9, step)
            for b in np.arange(0, 1 - a + 1e-9, step)
        ]
    )
    ll = _bitwise_loglik(grid, hist, mech.p_star, mech.q_star)
    best = grid[int(np.argmax(ll))]
    got = _bitwise_loglik(fit.frequencies[None, :], hist, mech.p_star, mech.q_star)[0]
    assert got >= ll.max() - 1e-6
    assert np.allclose(fit.frequencies, best, atol=2 * step)


def test_histogram_keeps_every_report_and_the_tally() -> None:
    mech = create("sue", epsilon=2.0, domain=5)
    rng = np.random.default_rng(4)
    batch = mech.perturb_many(rng.integers(0, 5, size=3_000), rng=rng)
    hist = pattern_histogram(mech, batch)
    assert hist.n == 3_000 and hist.counts.size <= 2**5
    assert len({tuple(row) for row in hist.patterns}) == hist.counts.size
    support = (hist.patterns * hist.counts[:, None]).sum(axis=0)
    assert np.array_equal(support, mech.tally(batch).support)


def test_consistent_for_large_n() -> None:
    mech = create("oue", epsilon=1.0, domain=4)
    f = np.array([0.5, 0.3, 0.2, 0.0])
    n = 200_000
    rng = np.random.default_rng(8)
    batch = mech.perturb_many(np.repeat(np.arange(4), (f * n).astype(int)), rng=rng)
    fit = pattern_frequencies(mech, pattern_histogram(mech, batch))
    # The pattern MLE is at least as efficient as the tally's raw estimate; 5 of its SEs.
    sd = np.sqrt(mech.count_variance(n, f * n)) / n
    assert np.all(np.abs(fit.frequencies - f) <= 5 * sd)


@pytest.mark.slow
def test_lower_error_than_the_tally_mle_at_epsilon_2() -> None:
    mech = create("oue", epsilon=2.0, domain=8)
    counts = np.array([5_000, 4_000, 3_000, 2_500, 2_000, 1_500, 1_000, 1_000])
    values = np.repeat(np.arange(8), counts)
    rng = np.random.default_rng(21)
    diff = []
    for _ in range(30):
        batch = mech.perturb_many(values, rng=rng)
        fit = pattern_frequencies(mech, pattern_histogram(mech, batch))
        tally_f, _, _, _ = mle_frequencies(mech, mech.tally(batch))
        n = values.size
        diff.append(
            np.mean((tally_f * n - counts) ** 2) - np.mean((fit.frequencies * n - counts) ** 2)
        )
    d = np.asarray(diff)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    assert z > Z_ONE_SIDED_1PCT, z


def test_deterministic_and_all_patterns() -> None:
    # Every one of the 2^3 patterns present once: a valid, reproducible distribution.
    patterns = np.array(list(itertools.product([False, True], repeat=3)))
    hist = PatternHistogram(patterns, np.ones(8, dtype=np.int64))
    a = pattern_mle(0.5, 0.2, hist)
    b = pattern_mle(0.5, 0.2, hist)
    assert np.array_equal(a.frequencies, b.frequencies)
    assert math.isclose(a.frequencies.sum(), 1.0) and a.frequencies.min() >= 0


def test_refuses_what_it_cannot_do() -> None:
    with pytest.raises(InvalidParameter, match="only through one bit per value"):
        pattern_histogram(create("grr", epsilon=1.0, domain=4), np.zeros(3, dtype=np.int64))
    mech = create("oue", epsilon=1.0, domain=17)
    with pytest.raises(InvalidParameter, match="k <= 16"):
        pattern_histogram(mech, mech.perturb_many(np.zeros(2, dtype=np.int64), rng=1))
    with pytest.raises(InvalidParameter, match="0 < q"):
        pattern_mle(0.2, 0.5, PatternHistogram(np.zeros((1, 2), dtype=bool), np.ones(1)))


def test_subset_selection_is_the_brute_force_maximum() -> None:
    # Reference: the exact output law of every report (the mechanism's own Fractions, from the
    # integer thresholds that run), summed report by report over a grid of the simplex.
    mech = create("ss", epsilon=1.5, domain=4, d=2)
    rng = np.random.default_rng(5)
    batch = mech.perturb_many(rng.choice(4, size=300, p=[0.5, 0.3, 0.15, 0.05]), rng=rng)
    laws = [mech.output_distribution(x) for x in range(4)]
    keys = [mech.output_key(p) for p in mech.encode_many(batch)]
    per_report = np.array([[float(law[key]) for law in laws] for key in keys])
    fit = pattern_frequencies(mech, pattern_histogram(mech, batch))
    assert fit.converged
    step = 0.02
    a, b, c = np.meshgrid(*[np.arange(0, 1 + 1e-9, step)] * 3, indexing="ij")
    keep = a + b + c <= 1 + 1e-9
    grid = np.stack([a[keep], b[keep], c[keep], 1 - a[keep] - b[keep] - c[keep]], axis=1)
    grid = np.clip(grid, 0, None)
    ll = np.log(grid @ per_report.T).sum(axis=1)
    got = float(np.log(per_report @ fit.frequencies).sum())
    assert got >= ll.max() - 1e-6
    assert np.allclose(fit.frequencies, grid[int(np.argmax(ll))], atol=2 * step)


def test_ratio_is_the_realised_likelihood_ratio() -> None:
    ss = create("ss", epsilon=1.0, domain=6, d=2)
    assert math.isclose(pattern_ratio(ss), math.exp(ss.realised_epsilon), rel_tol=1e-12)
    oue = create("oue", epsilon=1.0, domain=6)
    p, q = oue.p_star, oue.q_star
    assert math.isclose(pattern_ratio(oue), p * (1 - q) / (q * (1 - p)), rel_tol=1e-12)


def test_histograms_add_and_payloads_give_the_same_histogram() -> None:
    mech = create("ss", epsilon=2.0, domain=8, d=3)
    rng = np.random.default_rng(3)
    batch = mech.perturb_many(rng.integers(0, 8, size=2_000), rng=rng)
    whole = pattern_histogram(mech, batch)
    halves = merge_histograms(
        8, [pattern_histogram(mech, batch[:700]), pattern_histogram(mech, batch[700:])]
    )
    from_wire = histogram_of_payloads(mech, mech.encode_many(batch), chunk=333)
    for other in (halves, from_wire):
        assert np.array_equal(other.patterns, whole.patterns)
        assert np.array_equal(other.counts, whole.counts)
    assert (
        whole.counts.size <= math.comb(8, 3)
        and whole.patterns.sum(axis=1).tolist() == [3] * whole.counts.size
    )


@pytest.mark.parametrize("name", ["oue", "ss"])
def test_fisher_standard_errors_cover(name: str) -> None:
    # R windows of the same devices (fixed values, frequencies far from 0): the empirical sd of
    # the pattern MLE
    # matches the Fisher standard error, and the 95% intervals cover at 95%. Tolerances from
    # the variance: sd ratio, sqrt(1/(2(R-1))) per value (normal sample variance), 4 of them;
    # coverage of the R k intervals, sd <= sqrt(0.95 0.05 / R) even if the values moved together,
    # 4 of them.
    f = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    n, repetitions = 3_000, 400
    mech = create(name, epsilon=2.0, domain=5, **({"d": 2} if name == "ss" else {}))
    values = np.repeat(np.arange(5), (f * n).astype(int))
    rng = np.random.default_rng(17)
    rho = pattern_ratio(mech)
    estimates, errors = [], []
    for _ in range(repetitions):
        hist = pattern_histogram(mech, mech.perturb_many(values, rng=rng))
        fit = pattern_frequencies(mech, hist)
        estimates.append(fit.frequencies)
        errors.append(pattern_std_errors(rho, hist, fit.frequencies))
    est, se = np.array(estimates), np.array(errors)
    ratio = est.std(axis=0, ddof=1) / se.mean(axis=0)
    assert np.all(np.abs(ratio - 1) <= 4 * math.sqrt(1 / (2 * (repetitions - 1)))), ratio
    covered = np.abs(est - f) <= 1.96 * se
    assert abs(covered.mean() - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / repetitions), covered.mean()


def test_service_pattern_answer_and_its_fallback() -> None:
    mech = create("oue", epsilon=2.0, domain=5)
    rng = np.random.default_rng(9)
    batches = {
        w: mech.perturb_many(rng.integers(0, 5, size=800), rng=rng)
        for w in ("2026-11-01", "2026-11-02")
    }
    tallies = {w: mech.tally(b) for w, b in batches.items()}
    hists = {w: pattern_histogram(mech, b) for w, b in batches.items()}
    query = EstimateQuery(postprocess="pattern")
    answer = estimate_range(mech, tallies, query, patterns=hists)
    assert isinstance(answer, FrequencyEstimates)
    assert answer.postprocess["method"] == "pattern"
    both = pattern_histogram(mech, np.concatenate(list(batches.values())))
    expected = pattern_frequencies(mech, both).frequencies * 1_600
    assert np.allclose([v.count for v in answer.values], expected, rtol=1e-12)
    mle = estimate_range(mech, tallies, EstimateQuery(postprocess="mle"))
    for patterns, reason in (
        ({"2026-11-02": hists["2026-11-02"]}, "no stored reports for window(s) 2026-11-01"),
        ({**hists, "2026-11-01": hists["2026-11-02"]}, "do not add up"),
        (None, "no report patterns were given"),
    ):
        fallback = estimate_range(mech, tallies, query, patterns=patterns)
        assert isinstance(fallback, FrequencyEstimates)
        post = fallback.postprocess
        assert post["method"] == "mle" and post["requested"] == "pattern"
        assert reason in str(post["note"])
        assert [v.count for v in fallback.values] == [v.count for v in mle.values]


def test_pattern_refused_without_capability_or_patterns() -> None:
    grr = create("grr", epsilon=1.0, domain=4)
    tally = grr.tally(grr.perturb_many(np.zeros(50, dtype=np.int64), rng=1))
    with pytest.raises(InvalidParameter, match="got mechanism 'grr'; use postprocess 'mle'"):
        estimate_range(grr, {"2026-11-01": tally}, EstimateQuery(postprocess="pattern"))
    oue = create("oue", epsilon=1.0, domain=4)
    est = estimate(oue, oue.tally(oue.perturb_many(np.zeros(50, dtype=np.int64), rng=1)))
    with pytest.raises(InvalidParameter, match="needs the windows' report patterns"):
        postprocess(est, "pattern")
    with pytest.raises(InvalidParameter, match="rho > 1"):
        pattern_mle_ratio(1.0, PatternHistogram(np.zeros((1, 2), dtype=bool), np.ones(1)))


@pytest.mark.parametrize(("name", "params"), [("oue", {}), ("ss", {"d": 5})])
def test_fisher_errors_at_low_epsilon_are_the_efficient_bound(name: str, params: dict) -> None:
    # At epsilon 0.5, k 14 the information is small against its null direction (sum f): the
    # errors must still be finite, positive and, the pattern MLE being efficient, at most the
    # unbiased raw estimate's exact error (Cramer-Rao), and not far below it (few bits of
    # information per report). Evaluated at the devices' true frequencies, n = 40,000.
    mech = create(name, epsilon=0.5, domain=14, **params)
    counts = np.arange(1, 15) * 500
    values = np.repeat(np.arange(14), counts)
    hist = pattern_histogram(mech, mech.perturb_many(values, rng=np.random.default_rng(2)))
    se = pattern_std_errors(pattern_ratio(mech), hist, counts / values.size) * values.size
    raw = np.sqrt(mech.count_variance(values.size, counts.astype(float)))
    assert np.all(se <= raw * 1.01) and np.all(se >= 0.9 * raw), se / raw
