"""The pattern MLE's EM loop checked step by step (issue 21, aggregator/pattern.py).

Mutation survivors showed that the pattern MLE was only checked through its final answer, which
EM (the fallback after the active-set Newton ascent, run alone here with ``newton=False``)
reaches from any start and along any path: a wrong SQUAREM step length, a skipped
extrapolation, an extra iteration or a wrong start went unnoticed. Here one iteration (forced
with ``tol < 0``) must be exactly the SQUAREM step its docstring states, ``max_iterations`` must
be exact, ``pattern_frequencies`` must start at the tally ``mle``, and the edge cases (no
reports, the largest domain kept) must hold.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aggregator.pattern import (
    MAX_PATTERN_K,
    PatternHistogram,
    pattern_frequencies,
    pattern_histogram,
    pattern_mle,
    pattern_mle_ratio,
)
from aggregator.postprocess import mle_frequencies
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create


def _hist() -> tuple[object, PatternHistogram, np.ndarray]:
    mech = create("oue", epsilon=1.0, domain=4)
    rng = np.random.default_rng(5)
    batch = mech.perturb_many(rng.choice(4, size=3000, p=[0.1, 0.2, 0.3, 0.4]), rng=rng)
    return mech, pattern_histogram(mech, batch), batch


def _squarem_iteration(
    p: float, q: float, hist: PatternHistogram, start: np.ndarray
) -> tuple[np.ndarray, int]:
    """One SQUAREM iteration (Varadhan & Roland 2008, S3 step length) written out from the
    docstring: two EM steps, ``alpha = min(-1, -|r|/|v|)`` halved towards -1 while the trial
    leaves the simplex, then one EM step from the trial, kept if it does not lower L."""
    a = np.where(hist.patterns, p / q, (1 - p) / (1 - q))
    w = hist.counts / hist.counts.sum()
    k = hist.patterns.shape[1]

    def step(x: np.ndarray) -> np.ndarray:
        y = x * ((w / (a @ x)) @ a)
        return y / y.sum()

    def loglik(x: np.ndarray) -> float:
        return float(w @ np.log(a @ x))

    f = 0.99 * start + 0.01 / k
    f1 = step(f)
    f2 = step(f1)
    r = f1 - f
    v = f2 - f1 - r
    alpha = min(-1.0, -np.sqrt(r @ r) / np.sqrt(v @ v))
    shrinks = 0
    trial = f - 2 * alpha * r + alpha * alpha * v
    while trial.min() < 0 and alpha < -1.01:
        alpha = (alpha - 1) / 2
        shrinks += 1
        trial = f - 2 * alpha * r + alpha * alpha * v
    assert trial.min() >= 0 and alpha < -1.0  # the cases below all extrapolate
    extrapolated = step(trial / trial.sum())
    assert loglik(extrapolated) > loglik(f2)  # ... and keep the extrapolation
    return extrapolated, shrinks


@pytest.mark.parametrize(
    ("start", "shrinks"),
    [
        ([0.7, 0.1, 0.1, 0.1], 3),  # the trial leaves the simplex three times first
        ([0.25, 0.25, 0.25, 0.25], 0),
        ([1.0, 0.0, 0.0, 0.0], 0),
    ],
)
def test_one_iteration_is_the_squarem_step(start: list[float], shrinks: int) -> None:
    mech, hist, _ = _hist()
    s = np.asarray(start)
    want, seen = _squarem_iteration(mech.p_star, mech.q_star, hist, s)
    assert seen == shrinks
    fit = pattern_mle(
        mech.p_star, mech.q_star, hist, start=s, tol=-1.0, max_iterations=1, newton=False
    )
    assert fit.iterations == 1 and not fit.converged
    np.testing.assert_allclose(fit.frequencies, want, rtol=1e-12, atol=1e-15)


def test_max_iterations_is_exact() -> None:
    mech, hist, _ = _hist()
    start = np.array([0.4, 0.3, 0.2, 0.1])
    none = pattern_mle(mech.p_star, mech.q_star, hist, start=start, tol=-1.0, max_iterations=0)
    assert none.iterations == 0 and not none.converged
    np.testing.assert_allclose(none.frequencies, 0.99 * start + 0.01 / 4, rtol=1e-15)
    for newton in (True, False):
        three = pattern_mle(
            mech.p_star, mech.q_star, hist, start=start, tol=-1.0, max_iterations=3, newton=newton
        )
        assert three.iterations == 3 and not three.converged


def test_a_fit_started_at_its_maximum_is_still_a_distribution() -> None:
    # The 1% uniform mix keeps the start a distribution: EM is scale-free, so a start of
    # another total would stop at once (gap <= tol) and return frequencies that do not sum to 1.
    mech, hist, _ = _hist()
    best = pattern_mle(mech.p_star, mech.q_star, hist)
    again = pattern_mle(mech.p_star, mech.q_star, hist, start=best.frequencies)
    assert again.converged
    assert abs(again.frequencies.sum() - 1.0) < 1e-12
    np.testing.assert_allclose(again.frequencies, best.frequencies, atol=1e-3)


def test_no_reports_give_the_uniform_distribution() -> None:
    hist = PatternHistogram(np.zeros((1, 5), dtype=bool), np.zeros(1, dtype=np.int64))
    fit = pattern_mle(0.5, 0.2, hist)
    assert fit.iterations == 0 and fit.converged and fit.gap == 0.0
    np.testing.assert_array_equal(fit.frequencies, np.full(5, 0.2))


def test_pattern_frequencies_starts_at_the_tally_mle() -> None:
    mech, hist, batch = _hist()
    start, _, _, _ = mle_frequencies(mech, mech.tally(batch))
    fit = pattern_frequencies(mech, hist)
    same = pattern_mle(mech.p_star, mech.q_star, hist, start=start)
    assert fit.iterations == same.iterations
    np.testing.assert_array_equal(fit.frequencies, same.frequencies)


def test_the_largest_domain_is_kept_and_one_more_refused() -> None:
    assert MAX_PATTERN_K == 16
    rng = np.random.default_rng(3)
    mech = create("sue", epsilon=2.0, domain=16)
    hist = pattern_histogram(mech, mech.perturb_many(rng.integers(0, 16, size=50), rng=rng))
    assert hist.patterns.shape[1] == 16 and hist.n == 50
    bigger = create("sue", epsilon=2.0, domain=17)
    with pytest.raises(InvalidParameter, match="k <= 16"):
        pattern_histogram(bigger, bigger.perturb_many(rng.integers(0, 17, size=5), rng=rng))


def test_histogram_is_frozen() -> None:
    _, hist, _ = _hist()
    with pytest.raises(dataclasses.FrozenInstanceError):
        hist.counts = np.zeros(1, dtype=np.int64)  # type: ignore[misc]


def test_the_fit_result_is_frozen() -> None:
    mech, hist, _ = _hist()
    fit = pattern_mle(mech.p_star, mech.q_star, hist)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.iterations = 0  # type: ignore[misc]


@pytest.mark.parametrize(("p", "q"), [(1.0, 0.2), (0.5, 0.0), (0.3, 0.3), (0.2, 0.5)])
def test_bit_probabilities_outside_the_open_order_are_refused(p: float, q: float) -> None:
    _, hist, _ = _hist()
    with pytest.raises(InvalidParameter, match="0 < q\\* < p\\* < 1"):
        pattern_mle(p, q, hist)


@pytest.mark.parametrize("rho", [1.0, 0.5, float("inf"), float("nan")])
def test_a_likelihood_ratio_not_above_one_is_refused(rho: float) -> None:
    _, hist, _ = _hist()
    with pytest.raises(InvalidParameter, match="rho > 1"):
        pattern_mle_ratio(rho, hist)


def test_newton_reaches_the_maximum_in_a_handful_of_steps() -> None:
    # The active-set Newton ascent converges quadratically once its free set is right: 3 steps
    # here from the tally mle, where SQUAREM-accelerated EM alone takes 8 iterations (24 EM
    # steps); a broken step or free set falls back to EM and takes more (checked by hand).
    mech, hist, batch = _hist()
    start, _, _, _ = mle_frequencies(mech, mech.tally(batch))
    fit = pattern_mle(mech.p_star, mech.q_star, hist, start=start, tol=1e-9)
    em = pattern_mle(mech.p_star, mech.q_star, hist, start=start, tol=1e-9, newton=False)
    assert fit.converged and fit.iterations <= 4, fit.iterations
    assert em.converged
    np.testing.assert_allclose(fit.frequencies, em.frequencies, atol=1e-5)
