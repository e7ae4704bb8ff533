"""The per-report pattern MLE for unary encoding (aggregator/pattern.py).

The brute-force reference evaluates the exact likelihood bit by bit (product of Bernoulli
terms, not the r0/r1 form the estimator uses) over a fine grid of the simplex. Statistical
claims use paired draws and a one-sided z at 1% (2.326); seeds are fixed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aggregator.pattern import (
    PatternHistogram,
    pattern_frequencies,
    pattern_histogram,
    pattern_mle,
)
from aggregator.postprocess import mle_frequencies
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
    with pytest.raises(InvalidParameter, match="independent unary bits"):
        pattern_histogram(create("grr", epsilon=1.0, domain=4), np.zeros(3, dtype=np.int64))
    mech = create("oue", epsilon=1.0, domain=17)
    with pytest.raises(InvalidParameter, match="k <= 16"):
        pattern_histogram(mech, mech.perturb_many(np.zeros(2, dtype=np.int64), rng=1))
    with pytest.raises(InvalidParameter, match="0 < q"):
        pattern_mle(0.2, 0.5, PatternHistogram(np.zeros((1, 2), dtype=bool), np.ones(1)))
