"""'Programming Differential Privacy' ch. 13 on Adult ``occupation``, in expectation.

The book's two-coin randomized response ("is the occupation Sales?", epsilon = ln 3, estimator
(#yes - n/4) * 2) and its unary encoding (p = .75, q = .25, epsilon = ln 9) over the 32,561 rows of
adult.data. The estimates are random; their mean over seeded repetitions must be the true count
within a tolerance from the variance, and their spread must match the closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from aggregator import debias, estimate
from client_sdk.mechanisms import Tally, create
from simulator.adult import load_adult

REPS = 300
ALPHA = 1e-4


def occupation_column() -> tuple[list[str], np.ndarray, int]:
    """Occupation labels (sorted), each row's index (missing dropped), and the row count.

    Read through the packaged, checksummed loader (the bundled copy of adult.data), so the
    test runs on a clean clone wherever it is checked out.
    """
    data = load_adult("train")
    labels, indices = data.column("occupation")
    return list(labels), np.asarray(indices), data.n_rows


@pytest.fixture(scope="module")
def occupation() -> tuple[list[str], np.ndarray, int]:
    return occupation_column()


def test_adult_occupation_facts(occupation) -> None:
    labels, indices, rows = occupation
    counts = dict(zip(labels, np.bincount(indices, minlength=len(labels)).tolist(), strict=True))
    assert rows == 32_561
    assert len(labels) == 14
    assert rows - indices.size == 1_843
    assert (counts["Sales"], counts["Prof-specialty"], counts["Armed-Forces"]) == (3650, 4140, 9)


def _within(estimates: np.ndarray, truth: float, variance: float, tests: int = 1) -> None:
    z = stats.norm.ppf(1 - ALPHA / (2 * tests))
    assert abs(estimates.mean() - truth) <= z * math.sqrt(variance / estimates.size)
    ratio = ((estimates - truth) ** 2).mean() / variance
    lo = stats.chi2.ppf(ALPHA / (2 * tests), estimates.size) / estimates.size
    hi = stats.chi2.ppf(1 - ALPHA / (2 * tests), estimates.size) / estimates.size
    assert lo <= ratio <= hi


def test_two_coin_rr_estimates_the_number_of_sales(occupation) -> None:
    labels, indices, rows = occupation
    n = rows  # the book keeps every row; a missing occupation is "not Sales"
    is_sales = np.zeros(n, dtype=np.int64)  # 1 = "yes"
    is_sales[: indices.size] = indices == labels.index("Sales")
    mech = create("rr-two-coin", domain=["no", "yes"])
    assert mech.realised_epsilon == pytest.approx(math.log(3), rel=1e-15)
    batch = mech.perturb_many(np.tile(is_sales, REPS), rng=np.random.default_rng(13))
    yes = (batch.reshape(REPS, n) == 1).sum(axis=1)
    book = (yes - n / 4) * 2  # the book's estimator ...
    ours = np.array([debias(mech, Tally(n, np.array([n - y, y])))[1] for y in yes])
    np.testing.assert_allclose(book, ours, rtol=1e-12)  # ... is exactly the mechanism's
    # Variance: V0 = (3/16) / (1/2)^2 = 0.75, beta = 0: SD = sqrt(0.75 * 32,561) ~ 156 counts.
    assert math.sqrt(mech.count_variance(n, 3650)) == pytest.approx(156.3, abs=0.05)
    _within(book, 3650, 0.75 * n)


def test_book_unary_encoding_estimates_every_occupation(occupation) -> None:
    labels, indices, _ = occupation
    n, k = indices.size, len(labels)
    truth = np.bincount(indices, minlength=k)
    mech = create("sue-book", domain=labels)
    assert mech.realised_epsilon == pytest.approx(math.log(9), rel=1e-15)
    reps = 120
    batch = mech.perturb_many(np.tile(indices, reps), rng=np.random.default_rng(17))
    estimates = np.array(
        [debias(mech, mech.tally(batch[r * n : (r + 1) * n])) for r in range(reps)]
    )
    for v in range(k):
        # p + q = 1, so beta = 0 and Var = n q(1-q)/(p-q)^2 = 0.75 n for every occupation.
        _within(estimates[:, v], truth[v], 0.75 * n, tests=k)
    one = estimate(mech, mech.tally(batch[:n]))
    lo, hi = one.ci(0.95)
    assert np.mean((lo <= truth) & (truth <= hi)) >= 0.5  # sanity; coverage is tested above
