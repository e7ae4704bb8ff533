"""Post-processing methods on known inputs, edge cases and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import estimate
from aggregator.postprocess import (
    DEFAULT_EM_TOLERANCE,
    DEFAULT_POSTPROCESS,
    POSTPROCESSORS,
    base_cut,
    clip_to_zero,
    mle_frequencies,
    norm_sub,
    postprocess,
    significance_threshold,
)
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def simplex_projection(v: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection onto {x >= 0, sum x = total} by sorting (reference)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    rho = np.nonzero(u - css / np.arange(1, v.size + 1) > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1), 0)


def exact_tally(mech, n: int, f: np.ndarray) -> Tally:
    """A tally whose support counts equal their expectation n (q* + (p*-q*) f) (rounded)."""
    support = np.rint(n * (mech.q_star + (mech.p_star - mech.q_star) * f)).astype(np.int64)
    return Tally(n, support)


# -- clip ----------------------------------------------------------------------------------


def test_clip_sets_negatives_to_zero_and_keeps_the_rest() -> None:
    assert clip_to_zero(np.array([-3.0, 0.0, 2.5])).tolist() == [0.0, 0.0, 2.5]
    assert clip_to_zero(np.array([-1.0, -2.0])).tolist() == [0.0, 0.0]


# -- norm-sub ------------------------------------------------------------------------------


def test_norm_sub_documented_example_differs_from_projection() -> None:
    assert np.allclose(norm_sub(np.array([-0.1, 0.5]), 1.0), [0.0, 1.0])
    assert np.allclose(simplex_projection(np.array([-0.1, 0.5]), 1.0), [0.2, 0.8])


def test_norm_sub_subtracts_a_common_delta_and_iterates() -> None:
    # Pass 1: delta = (100 - 112) / 3 = -4 drives 2 below zero; pass 2: delta = -1.
    v = np.array([80.0, 30.0, 2.0, -5.0])
    out = norm_sub(v, 100.0)
    assert np.allclose(out, [75.0, 25.0, 0.0, 0.0])
    assert np.allclose(out, simplex_projection(v, 100.0))


def test_norm_sub_raises_positives_when_they_sum_below_the_total() -> None:
    out = norm_sub(np.array([10.0, 20.0, -5.0]), 100.0)
    assert np.allclose(out, [45.0, 55.0, 0.0])


def test_norm_sub_all_negative_and_all_zero_give_uniform() -> None:
    assert np.allclose(norm_sub(np.array([-1.0, -5.0, -0.1, -3.0]), 40.0), [10.0] * 4)
    assert np.allclose(norm_sub(np.zeros(5), 10.0), [2.0] * 5)


def test_norm_sub_rejects_bad_input() -> None:
    with pytest.raises(InvalidParameter, match="total"):
        norm_sub(np.array([1.0, 2.0]), float("nan"))
    with pytest.raises(InvalidParameter, match="1-D"):
        norm_sub(np.array([]), 1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=2, max_size=30), st.floats(min_value=1, max_value=1e6))
def test_norm_sub_is_non_negative_sums_to_total_and_matches_projection(
    values: list[float], total: float
) -> None:
    v = np.asarray(values)
    out = norm_sub(v, total)
    assert out.min() >= 0
    assert math.isclose(out.sum(), total, rel_tol=1e-7, abs_tol=1e-6)
    assert (out[v <= 0] == 0).all() or not (v > 0).any()
    if np.maximum(v, 0).sum() >= total and (v > 0).any():
        assert np.allclose(out, simplex_projection(v, total), atol=1e-6 * max(1, total))


# -- base-cut and the threshold ------------------------------------------------------------


def test_significance_threshold_matches_the_worked_example() -> None:
    # docs/MECHANISMS.md §12: OUE, eps 1, n = 10^6, k = 1024, alpha .05: sigma0 1919, T ~ 7480.
    mech = create("oue", epsilon=1.0, domain=1024)
    threshold = significance_threshold(mech, 10**6, 0.05)
    assert abs(threshold - 7480) < 15


def test_base_cut_zeroes_what_is_at_or_below_the_threshold() -> None:
    out = base_cut(np.array([-5.0, 3.0, 10.0, 10.5, 200.0]), 10.0)
    assert out.tolist() == [0.0, 0.0, 0.0, 10.5, 200.0]
    assert base_cut(np.array([-1.0, -2.0]), 0.5).tolist() == [0.0, 0.0]
    assert base_cut(np.zeros(3), 0.5).tolist() == [0.0, 0.0, 0.0]


def test_significance_threshold_rejects_a_bad_alpha() -> None:
    with pytest.raises(InvalidParameter, match="alpha"):
        significance_threshold(create("oue", epsilon=1.0, domain=4), 100, 1.5)


# -- maximum likelihood by EM ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "olh", "ss", "hr", "rr"])
def test_mle_recovers_an_interior_distribution_from_its_expected_tally(name: str) -> None:
    k = 2 if name == "rr" else 6
    mech = create(name, epsilon=1.0, domain=k)
    f = np.linspace(1, 2, k)
    f /= f.sum()
    n = 10**7
    got, iterations, converged, gap = mle_frequencies(mech, exact_tally(mech, n, f), tol=1e-9)
    assert converged and gap <= DEFAULT_EM_TOLERANCE and iterations >= 0
    assert np.allclose(got, f, atol=1e-5)


def kkt_solution(mech, tally: Tally) -> np.ndarray:
    """Closed form of argmax sum C log(q + d f) over the simplex (water-filling on C)."""
    p, q = mech.p_star, mech.q_star
    d = p - q
    c = tally.support.astype(float)
    order = np.argsort(-c)
    for m in range(mech.k, 0, -1):
        top = order[:m]
        lam = c[top].sum() / (1 + m * q / d)
        f = np.maximum(c / lam - q / d, 0)
        f[order[m:]] = 0
        if (c[top] / lam - q / d > 0).all():
            return f
    raise AssertionError("no active set")


@pytest.mark.parametrize("name", ["grr", "oue", "ss", "hr"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_em_reaches_the_likelihood_maximum_on_noisy_tallies(name: str, eps: float) -> None:
    mech = create(name, epsilon=eps, domain=10)
    values = np.repeat(np.arange(10), [500, 300, 200, 0, 0, 5, 50, 100, 0, 1])
    tally = mech.tally(mech.perturb_many(values, rng=3))
    f, iterations, converged, _ = mle_frequencies(mech, tally)
    assert converged and iterations == 0  # the closed form, no EM needed
    assert np.allclose(f, kkt_solution(mech, tally), atol=1e-9)
    assert f.min() >= 0 and math.isclose(f.sum(), 1.0)
    # Plain EM from uniform reaches the same point (the closed form is the maximiser).
    p, q = mech.p_star, mech.q_star
    c = tally.support.astype(float)
    g = np.full(10, 0.1)
    for _ in range(50_000):
        g = g * c / (q + (p - q) * g)
        g /= g.sum()
    assert np.allclose(f, g, atol=2e-3)


def test_grr_mle_is_ibu_with_the_mechanism_channel() -> None:
    mech = create("grr", epsilon=1.0, domain=5)
    tally = mech.tally(mech.perturb_many(np.array([0] * 300 + [1] * 100 + [4] * 20), rng=5))
    channel = mech.channel()
    f = np.full(5, 0.2)
    for _ in range(20_000):  # plain iterative Bayesian update with P[y | x]
        pi = f @ channel
        f = f * (channel @ (tally.support / pi)) / tally.n
    got, *_ = mle_frequencies(mech, tally)
    assert np.allclose(got, f, atol=1e-4)


def test_mle_all_negative_raw_estimates_give_a_distribution() -> None:
    mech = create("oue", epsilon=1.0, domain=4)
    n = 1000
    low = int(n * mech.q_star) - 20  # every support count below n q*: every raw count < 0
    tally = Tally(n, np.full(4, low))
    est = estimate(mech, tally)
    assert (est.counts < 0).all()
    out = postprocess(est, "mle")
    assert out.converged and np.allclose(out.counts, 250.0)
    assert np.allclose(postprocess(est, "norm-sub").counts, 250.0)
    assert (postprocess(est, "clip").counts == 0).all()
    assert (postprocess(est, "base-cut").counts == 0).all()


def test_all_zero_raw_estimates() -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    tally = Tally(400, np.full(4, 100))  # exactly n q* + (p*-q*) n/4 for every value
    est = estimate(mech, tally)
    assert np.allclose(est.counts, 100.0)
    mech2 = create("oue", epsilon=1.0, domain=4)
    zero = Tally(0, np.zeros(4, dtype=np.int64))
    f, iterations, converged, _ = mle_frequencies(mech2, zero)
    assert converged and iterations == 0 and np.allclose(f, 0.25)


def test_mle_stops_at_the_iteration_cap_and_says_so() -> None:
    mech = create("grr", epsilon=0.5, domain=14)
    tally = mech.tally(mech.perturb_many(np.zeros(200, dtype=np.int64), rng=1))
    # An unreachable tolerance forces the EM polish past the closed form.
    _, iterations, converged, gap = mle_frequencies(mech, tally, tol=-1.0, max_iterations=3)
    assert iterations == 3 and not converged and gap > -1.0


# -- the registry ----------------------------------------------------------------------------


def test_registry_names_and_default() -> None:
    assert list(POSTPROCESSORS) == [
        "none",
        "clip",
        "norm-sub",
        "base-cut",
        "mle",
        "eb",
        "eb-joint",
        "auto",
    ]
    assert DEFAULT_POSTPROCESS == "auto"


def test_every_method_states_what_it_applied_and_keeps_n() -> None:
    mech = create("oue", epsilon=1.0, domain=6)
    est = estimate(mech, mech.tally(mech.perturb_many(np.arange(600) % 3, rng=2)))
    for name in POSTPROCESSORS:
        out = postprocess(est, name)
        assert out.method == name and out.describe()["method"] == name
        assert out.counts.shape == (6,)
    assert math.isclose(postprocess(est, "norm-sub").counts.sum(), 600)
    assert math.isclose(postprocess(est, "mle").counts.sum(), 600)
    assert math.isclose(postprocess(est, "eb").counts.sum(), 600)
    assert isinstance(postprocess(est, "eb").describe()["pooled"], bool)
    assert np.array_equal(postprocess(est, "none").counts, est.counts)
    assert "threshold" in postprocess(est, "base-cut").describe()
    assert {"iterations", "converged", "gap"} <= set(postprocess(est, "mle").describe())


def test_unknown_method_names_the_choices() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    est = estimate(mech, mech.tally(mech.perturb_many(np.arange(30) % 3, rng=2)))
    with pytest.raises(InvalidParameter, match=r"postprocess must be one of .*'norm-sub'"):
        postprocess(est, "normsub")


def test_single_report_single_window() -> None:
    mech = create("grr", epsilon=1.0, domain=3)
    est = estimate(mech, mech.tally([2]))
    for name in POSTPROCESSORS:
        out = postprocess(est, name)
        assert np.isfinite(out.counts).all()
    assert math.isclose(postprocess(est, "mle").counts.sum(), 1.0)
    assert np.argmax(postprocess(est, "mle").counts) == 2
