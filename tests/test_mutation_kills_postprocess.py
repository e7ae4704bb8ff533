"""Maximum-likelihood post-processing checked against its optimality conditions (issue 21).

Mutation survivors showed that the closed form (:func:`water_filling`) and the EM polish it
hands over to were only checked through their final answer, which EM repairs: a wrong closed
form or a wrong convergence gap went unnoticed. Here the closed form must satisfy the KKT
conditions itself, the reported gap must be the Frank-Wolfe gap of the returned point, and the
EM loop (forced with ``tol < 0``) must run exactly ``max_iterations`` steps and stay a
distribution that does not lose likelihood.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.postprocess import mle_frequencies, norm_sub, water_filling
from client_sdk.mechanisms import Tally, create

CASES = [
    (np.array([50.0, 30.0, 5.0, 0.0, 1.0]), 0.4),
    (np.array([10.0, 10.0, 10.0]), 2.0),
    (np.array([1000.0, 1.0, 2.0, 3.0, 500.0, 0.0]), 0.05),
    (np.array([7.0, 0.0]), 10.0),
]


def _fw_gap(mech, tally: Tally, f: np.ndarray) -> float:
    d = mech.p_star - mech.q_star
    g = d * tally.support / (mech.q_star + d * f)
    return float(g.max() - f @ g)


def _loglik(mech, tally: Tally, f: np.ndarray) -> float:
    d = mech.p_star - mech.q_star
    return float(tally.support @ np.log(mech.q_star + d * f))


@pytest.mark.parametrize(("c", "offset"), CASES)
def test_water_filling_satisfies_the_kkt_conditions(c: np.ndarray, offset: float) -> None:
    f = water_filling(c, offset)
    assert f is not None
    assert f.min() >= 0 and f.sum() == pytest.approx(1.0, abs=1e-12)
    g = c / (offset + f)  # the gradient of sum c log(offset + f), up to a constant factor
    top = g.max()
    # On the support every gradient is the largest; off it none is larger.
    assert np.allclose(g[f > 0], top, rtol=1e-9)
    assert (g[f == 0] <= top * (1 + 1e-9)).all()


def _tally(mech, support: list[int], n: int) -> Tally:
    return Tally(n, np.array(support, dtype=np.int64))


def test_mle_returns_the_closed_form_when_it_is_within_tolerance() -> None:
    mech = create("grr", epsilon=1.0, domain=5)
    tally = _tally(mech, [400, 300, 150, 100, 50], 1000)
    f, iterations, converged, gap = mle_frequencies(mech, tally)
    exact = water_filling(tally.support.astype(float), mech.q_star / (mech.p_star - mech.q_star))
    assert exact is not None
    assert iterations == 0 and converged is True
    np.testing.assert_array_equal(f, exact)
    assert gap == pytest.approx(_fw_gap(mech, tally, f), abs=1e-12) and gap <= 1e-4


@pytest.mark.parametrize("name", ["grr", "oue"])
def test_forced_em_runs_the_iterations_asked_and_keeps_the_likelihood(name: str) -> None:
    mech = create(name, epsilon=1.0, domain=5)
    # Two values below the noise floor: their maximum-likelihood frequency is 0.
    support = [450, 330, 150, 40, 30] if name == "grr" else [420, 350, 300, 200, 190]
    tally = _tally(mech, support, 1000)
    best = mle_frequencies(mech, tally)[0]
    for steps in (1, 3, 200):
        f, iterations, converged, gap = mle_frequencies(mech, tally, tol=-1.0, max_iterations=steps)
        assert (iterations, converged) == (steps, False)
        assert f.min() >= 0 and f.sum() == pytest.approx(1.0, abs=1e-12)
        assert gap == pytest.approx(_fw_gap(mech, tally, f), abs=1e-9)
        # EM is monotone from a start within 1e-6 of the maximiser: at most that much is lost.
        assert _loglik(mech, tally, f) >= _loglik(mech, tally, best) - 1e-3
        np.testing.assert_allclose(f, best, atol=1e-4)


def test_mle_of_no_reports_is_uniform_with_no_iteration() -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    f, iterations, converged, gap = mle_frequencies(mech, Tally.empty(4))
    np.testing.assert_array_equal(f, np.full(4, 0.25))
    assert (iterations, converged, gap) == (0, True, 0.0)


@pytest.mark.parametrize(
    ("counts", "total"),
    [([0.4, 0.1, -0.2], 0.5), ([3.0, -1.0, 2.0, 0.5], 4.0), ([-1.0, -2.0], 3.0)],
)
def test_norm_sub_keeps_its_contract_when_the_loop_runs_out(
    counts: list[float], total: float
) -> None:
    # tol < 0 never stops the passes early: the fallback after the loop must still give
    # non-negative counts summing to the total, the same as the normal path.
    got = norm_sub(np.array(counts), total, tol=-1.0)
    assert got.min() >= 0 and got.sum() == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(got, norm_sub(np.array(counts), total), atol=1e-9)
