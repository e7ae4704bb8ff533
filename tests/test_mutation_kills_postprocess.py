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

from aggregator.estimate import estimate
from aggregator.postprocess import _squarem, mle_frequencies, norm_sub, postprocess, water_filling
from client_sdk.errors import InvalidParameter
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


def test_norm_sub_keeps_its_contract_when_the_last_sum_overflows() -> None:
    # Six counts near the largest float / 6 and a total one ulp below it: with tol < 0 every
    # pass runs, and the sum of the corrected counts rounds past the largest float on the last
    # of the k + 2 passes (found by a search). The correction is then -inf, every positive
    # entry becomes -inf, and the fallback after the loop receives no positive entry: it must
    # still return finite, non-negative counts summing to the total (the all-zero vector has no
    # scale to restore; dividing by its sum would give NaN).
    hexes = ["0x1.5555555555553p+1021", "0x1.5555555555556p+1021", "0x1.5555555555554p+1021"]
    hexes += ["0x1.5555555555556p+1021", "0x1.0000000000000p+969", "0x1.5555555555554p+1021"]
    counts = np.array([float.fromhex(h) for h in hexes])
    total = float.fromhex("0x1.ffffffffffffep+1023")
    with np.errstate(over="ignore", invalid="ignore"):
        got = norm_sub(counts, total, tol=-1.0)
    assert np.isfinite(got).all() and got.min() >= 0
    assert float(got.sum()) == pytest.approx(total, rel=1e-12)


def test_norm_sub_fallback_clamps_an_entry_pushed_below_zero_on_the_last_pass() -> None:
    # Five counts near 0.8 a few ulp apart, one of 1.25 ulp(1), and a total 4 ulp(2) below 4
    # (found by a search): the five oscillate by an ulp from pass to pass while the sum of
    # the corrected counts alternates around the total, and the small count drifts down by a
    # fraction of an ulp per two passes, going below 0 (-0x1.55...p-56) in the update of the
    # last of the k + 2 passes. The fallback must clamp it: non-negative counts summing to the
    # total, the small one 0 (it was dropped) and the others as the loop left them, rescaled.
    hexes = ["0x1.9999999999998p-1", "0x1.9999999999994p-1", "0x1.4000000000000p-52"]
    hexes += ["0x1.9999999999997p-1", "0x1.9999999999995p-1", "0x1.9999999999995p-1"]
    counts = np.array([float.fromhex(h) for h in hexes])
    total = float.fromhex("0x1.ffffffffffffcp+1")
    got = norm_sub(counts, total, tol=-1.0)
    assert got.min() >= 0 and got[2] == 0.0
    assert float(got.sum()) == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(np.delete(got, 2), np.delete(counts, 2), rtol=1e-15)


# SQUAREM from a far start (issue 21's survivors at the extrapolation step): mle_frequencies
# always starts EM within 1e-6 of the maximiser, so only _squarem started elsewhere shows whether
# the extrapolation still accelerates and keeps every iterate a distribution.
FAR_STARTS = [
    ("grr", [400, 250, 150, 90, 60, 30, 15, 5]),
    ("grr", [450, 330, 150, 40, 30]),
    ("oue", [420, 350, 300, 200, 190, 180]),
]


def _plain_em_steps(c: np.ndarray, q: float, d: float, f: np.ndarray, tol: float) -> int:
    """Plain EM steps (no extrapolation) from ``f`` until the Frank-Wolfe gap is <= tol."""
    steps = 0
    while True:
        g = d * c / (q + d * f)
        if g.max() - f @ g <= tol:
            return steps
        f = f * g / (f @ g)
        steps += 1


@pytest.mark.parametrize(("name", "support"), FAR_STARTS)
@pytest.mark.parametrize("heavy_last", [False, True])
def test_squarem_from_a_far_start_reaches_the_maximiser_in_fewer_em_steps(
    name: str, support: list[int], heavy_last: bool
) -> None:
    k = len(support)
    mech = create(name, epsilon=1.0, domain=k)
    c = np.array(support, dtype=float)
    q, d = mech.q_star, mech.p_star - mech.q_star
    # Uniform, or 99% of the mass on the value with the fewest supports (its MLE is 0).
    start = np.full(k, 1.0 / k) if not heavy_last else np.r_[np.full(k - 1, 0.01 / (k - 1)), 0.99]
    exact = water_filling(c, q / d)
    assert exact is not None
    f, iterations, converged, gap = _squarem(c, q, d, start, tol=1e-8, max_iterations=10_000)
    assert converged and gap <= 1e-8
    assert f.min() >= 0 and f.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(f, exact, atol=1e-6)
    # An iteration costs at most 3 EM steps; plain EM needs 4 to 10 times as many steps here
    # (the maximiser is on the boundary, where EM is sublinear). A wrong extrapolation, or one
    # refused when valid, falls back to two plain steps per iteration and loses this.
    assert 3 * iterations < _plain_em_steps(c, q, d, start, 1e-8)


@pytest.mark.parametrize(("name", "support"), FAR_STARTS)
def test_squarem_iterates_are_distributions_that_never_lose_likelihood(
    name: str, support: list[int]
) -> None:
    k = len(support)
    mech = create(name, epsilon=1.0, domain=k)
    c = np.array(support, dtype=float)
    q, d = mech.q_star, mech.p_star - mech.q_star
    start = np.r_[np.full(k - 1, 0.01 / (k - 1)), 0.99]
    previous = float(c @ np.log(q + d * start))
    for steps in range(1, 16):
        f, iterations, _, gap = _squarem(c, q, d, start, tol=-1.0, max_iterations=steps)
        assert iterations == steps
        assert np.isfinite(f).all() and f.min() >= 0
        assert f.sum() == pytest.approx(1.0, abs=1e-12)
        assert gap == pytest.approx(_fw_gap(mech, Tally(1000, c.astype(np.int64)), f), abs=1e-9)
        loglik = float(c @ np.log(q + d * f))
        assert loglik >= previous - 1e-12
        previous = loglik


@pytest.mark.parametrize(
    ("support", "weight"),
    [
        ([450, 330, 150, 40, 30], 0.5),
        ([450, 330, 150, 40, 30], 0.9),
        ([600, 200, 100, 60, 40], 0.8),
    ],
)
def test_a_squarem_step_shortened_towards_minus_one_still_beats_two_em_steps(
    support: list[int], weight: float
) -> None:
    # From these starts the full extrapolation leaves the simplex and the step length must be
    # halved towards -1 (to about -1.05 .. -1.09) before it is a distribution; that shortened
    # step gains over 10 nats more than the two plain EM steps it starts from. Rounding the
    # step length to -1 (giving up the extrapolation) would gain nothing.
    mech = create("grr", epsilon=1.0, domain=5)
    c = np.array(support, dtype=float)
    q, d = mech.q_star, mech.p_star - mech.q_star
    start = np.r_[np.full(4, (1 - weight) / 4), weight]

    def em(x: np.ndarray) -> np.ndarray:
        y = x * d * c / (q + d * x)
        out: np.ndarray = y / y.sum()
        return out

    two_steps = em(em(start))
    f, iterations, _, _ = _squarem(c, q, d, start, tol=-1.0, max_iterations=1)
    assert iterations == 1 and f.min() >= 0
    gain = float(c @ np.log(q + d * f)) - float(c @ np.log(q + d * two_steps))
    assert gain > 5.0


def test_auto_reports_pooled_exactly_when_it_chose_the_pooled_mean() -> None:
    # ``pooled`` in the answer of ``auto`` says which model was used: True for the NPMLE
    # posterior mean (BIC pools), False for the flat-prior mean and for mle.
    from aggregator.estimate import estimate
    from aggregator.evaluation import sample_tally
    from aggregator.postprocess import postprocess

    skewed = np.r_[18_000, np.random.default_rng(20).multinomial(2_000, np.full(29, 1 / 29))]
    spread = np.array([900, 800, 700, 600, 500, 400, 300, 200, 100, 50])
    for name, epsilon, counts, chosen in (
        ("ss", 1.0, skewed, "pooled"),
        ("grr", 0.5, spread, "flat"),
        ("grr", 4.0, spread, "mle"),
    ):
        mech = create(name, epsilon=epsilon, domain=counts.size)
        est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(21)))
        described = postprocess(est, "auto").describe()
        assert described["chosen"] == chosen
        assert described["pooled"] is (chosen == "pooled")


def test_pattern_on_a_tally_alone_is_a_clear_error() -> None:
    """``pattern`` needs the reports' patterns: asked of a tally it names where to ask instead."""
    mech = create("oue", epsilon=1.0, domain=4)
    est = estimate(mech, Tally(10, np.array([3, 4, 5, 6])))
    with pytest.raises(InvalidParameter, match="needs the windows' report patterns"):
        postprocess(est, "pattern")
