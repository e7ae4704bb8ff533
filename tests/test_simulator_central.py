"""Central baselines: Laplace and Gaussian calibration, and their errors match the theory."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from simulator.central import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    default_delta,
    gaussian_baseline,
    laplace_baseline,
    sensitivities,
)
from simulator.errors import InvalidSetting


def test_sensitivities_of_a_histogram() -> None:
    assert sensitivities("add-remove") == (1.0, 1.0)
    assert sensitivities("replace") == (2.0, math.sqrt(2))
    with pytest.raises(InvalidSetting, match="neighbours must be"):
        sensitivities("swap")  # type: ignore[arg-type]


def test_laplace_scale_and_theoretical_errors() -> None:
    lap = laplace_baseline(0.5)
    assert lap.scale == 2.0
    assert lap.variance == pytest.approx(2 / 0.5**2)
    assert lap.mean_abs_error == 2.0
    assert laplace_baseline(1.0, neighbours="replace").scale == 2.0
    with pytest.raises(InvalidSetting, match="epsilon must be a finite number > 0, got 0"):
        laplace_baseline(0)


def test_laplace_release_has_the_stated_variance() -> None:
    lap = laplace_baseline(1.0)
    noise = lap.release(np.zeros(200_000), rng=np.random.default_rng(1))
    # Var of the sample variance of Laplace(b) noise: (mu4 - sigma^4)/m = (24 - 4)/m for b = 1
    assert noise.var() == pytest.approx(2.0, abs=5 * math.sqrt(20 / 200_000))
    assert np.abs(noise).mean() == pytest.approx(1.0, abs=5 * math.sqrt(1 / 200_000))


def test_classic_gaussian_sigma_formula_and_its_range() -> None:
    delta = 1e-6
    assert classic_gaussian_sigma(0.5, delta) == pytest.approx(
        math.sqrt(2 * math.log(1.25e6)) / 0.5
    )
    # docs/MECHANISMS.md §15: sigma^2 = 28.1 / eps^2 at delta = 1e-6
    assert classic_gaussian_sigma(0.5, delta) ** 2 * 0.25 == pytest.approx(28.1, abs=0.05)
    with pytest.raises(InvalidSetting, match="only for epsilon < 1"):
        classic_gaussian_sigma(1.0, delta)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.9])
def test_analytic_sigma_is_tight_and_beats_the_classic_one(epsilon: float) -> None:
    delta = 1e-5
    sigma = analytic_gaussian_sigma(epsilon, delta)
    classic = classic_gaussian_sigma(epsilon, delta)
    assert analytic_gaussian_delta(sigma, epsilon) <= delta  # the guarantee holds
    assert analytic_gaussian_delta(sigma * (1 - 1e-9), epsilon) > delta  # and it is tight
    assert analytic_gaussian_delta(classic, epsilon) <= delta  # the classic one is also valid
    assert sigma < classic


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 8.0])
def test_analytic_sigma_for_large_epsilon(epsilon: float) -> None:
    delta = 1e-9
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity=math.sqrt(2))
    assert analytic_gaussian_delta(sigma, epsilon, math.sqrt(2)) <= delta
    assert analytic_gaussian_delta(sigma * (1 - 1e-9), epsilon, math.sqrt(2)) > delta


def test_analytic_sigma_known_value() -> None:
    # Balle & Wang's reference implementation gives sigma ~ 3.73 for eps=1, delta=1e-5, D=1
    assert analytic_gaussian_sigma(1.0, 1e-5) == pytest.approx(3.73, abs=0.01)


def test_gaussian_baseline_uses_one_over_n_squared() -> None:
    assert default_delta(1000) == 1e-6
    base = gaussian_baseline(1.0, n=1000)
    assert base.delta == 1e-6
    assert base.std == pytest.approx(analytic_gaussian_sigma(1.0, 1e-6))
    assert base.mean_abs_error == pytest.approx(base.std * math.sqrt(2 / math.pi))
    noise = base.release(np.zeros(100_000), rng=np.random.default_rng(2))
    assert noise.std() == pytest.approx(base.std, rel=5 / math.sqrt(2 * 100_000))


def test_shuffle_comparison_uses_the_amplified_budget_and_replacement() -> None:
    """The honest comparison of a shuffled deployment: central noise at the amplified (ε, δ)
    of n shuffled ε0 reports, protecting the same neighbour relation (one value replaced)."""
    from aggregator.amplification import amplified_epsilon
    from aggregator.amplification import default_delta as shuffle_delta
    from simulator.central import shuffle_comparison

    n, eps0 = 30_718, 1.0
    cmp = shuffle_comparison(eps0, n)
    assert cmp.delta == shuffle_delta(n) == 1e-8
    assert cmp.epsilon == amplified_epsilon(eps0, n, cmp.delta) < eps0
    assert cmp.laplace.scale == pytest.approx(2.0 / cmp.epsilon)  # Δ1 = 2
    assert cmp.gaussian.delta == cmp.delta
    assert cmp.gaussian.scale == analytic_gaussian_sigma(cmp.epsilon, cmp.delta, math.sqrt(2))
    assert cmp.to_dict()["central_epsilon"] == cmp.epsilon


@pytest.mark.parametrize("sensitivity", [math.sqrt(2), 2.0, 0.5])
def test_the_gaussian_noise_scales_with_the_sensitivity(sensitivity: float) -> None:
    """Noise ``N(0, (D s)^2)`` on a query of sensitivity D is ``D`` times noise ``N(0, s^2)`` on
    one of sensitivity 1, so delta depends on ``sigma / D`` alone and sigma is linear in D."""
    epsilon, delta = 1.0, 1e-8
    for s in (0.5, 2.0, 5.0):
        assert analytic_gaussian_delta(sensitivity * s, epsilon, sensitivity) == pytest.approx(
            analytic_gaussian_delta(s, epsilon), rel=1e-9
        )
    assert analytic_gaussian_sigma(epsilon, delta, sensitivity) == pytest.approx(
        sensitivity * analytic_gaussian_sigma(epsilon, delta), rel=1e-9
    )


def test_the_gaussian_delta_where_the_second_tail_underflows() -> None:
    """At a tiny sigma the second term's Phi underflows to 0: delta is then the first Phi alone
    (no log of 0), close to 1 since almost no privacy is left."""
    assert analytic_gaussian_delta(0.01, 1.0) == pytest.approx(1.0)
    assert 0 < analytic_gaussian_delta(3.73, 1.0) < 2e-5


@pytest.mark.parametrize("epsilon", [True, "1", None, -1.0, 0, math.inf, math.nan])
def test_an_epsilon_that_is_not_a_positive_number_is_refused(epsilon: Any) -> None:
    for make in (laplace_baseline, lambda e: gaussian_baseline(e, n=100)):
        with pytest.raises(InvalidSetting, match="epsilon must be a finite number > 0"):
            make(epsilon)


@pytest.mark.parametrize("delta", ["0.1", [0.1], True, -0.5, 0, 0.0, 1, 1.0, 1.5])
def test_a_delta_outside_0_1_is_refused(delta: object) -> None:
    with pytest.raises(InvalidSetting, match=r"delta must be a number in \(0, 1\)"):
        gaussian_baseline(1.0, n=100, delta=delta)  # type: ignore[arg-type]
    with pytest.raises(InvalidSetting, match=r"delta must be a number in \(0, 1\)"):
        classic_gaussian_sigma(0.5, delta)  # type: ignore[arg-type]


@pytest.mark.parametrize("sensitivity", [0, 0.0, -0.5, -1.0, math.nan])
def test_a_sensitivity_that_is_not_positive_is_refused(sensitivity: float) -> None:
    with pytest.raises(InvalidSetting, match="sensitivity must be > 0"):
        analytic_gaussian_sigma(1.0, 1e-5, sensitivity)


@pytest.mark.parametrize("neighbours", ["", "a", "b", "add", "Replace", "replace "])
def test_only_the_two_neighbour_relations_are_taken(neighbours: str) -> None:
    with pytest.raises(InvalidSetting, match="neighbours must be"):
        sensitivities(neighbours)  # type: ignore[arg-type]


def test_the_default_delta_needs_two_people() -> None:
    assert default_delta(2) == 0.25
    for n in (1, 0, -3):
        with pytest.raises(InvalidSetting, match="needs n >= 2"):
            default_delta(n)


def test_the_analytic_sigma_below_the_sensitivity_is_tight() -> None:
    """At a large epsilon sigma is below the sensitivity, so the bisection starts from 0 without
    doubling the bracket first."""
    sigma = analytic_gaussian_sigma(10.0, 1e-3)
    assert 0 < sigma < 1
    assert analytic_gaussian_delta(sigma, 10.0) <= 1e-3
    assert analytic_gaussian_delta(sigma * (1 - 1e-9), 10.0) > 1e-3


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_the_bisection_is_relative_to_sigma(epsilon: float) -> None:
    """The tolerance is relative: with a sensitivity of a power of 2 every step of the search is
    the same up to that factor, so sigma scales exactly (an absolute tolerance would stop the
    search for the small sensitivity early)."""
    for d in (2.0**-10, 2.0**-20, 2.0**6):
        assert analytic_gaussian_sigma(epsilon, 1e-5, d) == d * analytic_gaussian_sigma(
            epsilon, 1e-5
        )


def test_the_classic_sigma_with_any_delta_and_sensitivity() -> None:
    assert classic_gaussian_sigma(0.5, 0.3) == pytest.approx(
        math.sqrt(2 * math.log(1.25 / 0.3)) / 0.5, rel=1e-12
    )
    assert classic_gaussian_sigma(0.5, 1e-6, 3.0) == pytest.approx(
        3 * classic_gaussian_sigma(0.5, 1e-6), rel=1e-12
    )
    for epsilon in (1.0, 1.5, 2.0, 8.0):
        with pytest.raises(InvalidSetting, match="only for epsilon < 1"):
            classic_gaussian_sigma(epsilon, 1e-6)


def test_the_baselines_are_frozen_and_say_what_they_are() -> None:
    import dataclasses

    from simulator.central import CentralBaseline, shuffle_comparison

    lap = laplace_baseline(1.0)
    assert lap.delta == 0.0 and lap.to_dict()["delta"] == 0.0  # pure epsilon-DP
    with pytest.raises(dataclasses.FrozenInstanceError):
        lap.scale = 0.0  # type: ignore[misc]
    cmp = shuffle_comparison(1.0, 1000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cmp.epsilon = 9.0  # type: ignore[misc]
    with pytest.raises(InvalidSetting, match="name must be 'laplace' or 'gaussian'"):
        CentralBaseline("uniform", 1.0, 1.0)


def test_the_options_are_keyword_only() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError):
        laplace_baseline(1.0, "replace")  # type: ignore[misc]
    with pytest.raises(TypeError):
        gaussian_baseline(1.0, 1000)  # type: ignore[misc]
    with pytest.raises(TypeError):
        laplace_baseline(1.0).release(np.zeros(3), rng)  # type: ignore[misc]
    assert laplace_baseline(1.0).release(counts=np.zeros(3), rng=rng).shape == (3,)


@pytest.mark.parametrize("name", ["laplace", "gaussian"])
def test_the_released_counts_are_unbiased(name: str) -> None:
    """Mean of m noisy copies of one count: within 5 standard errors (std / sqrt(m)) of it."""
    base = laplace_baseline(1.0) if name == "laplace" else gaussian_baseline(1.0, n=1000)
    m = 200_000
    released = base.release(np.full(m, 40.0), rng=np.random.default_rng(5))
    assert abs(released.mean() - 40.0) < 5 * base.std / math.sqrt(m)


def test_the_bracket_grows_geometrically(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sigma thousands of times the sensitivity is found in a few dozen evaluations of the
    exact delta (the bracket doubles, then halves), not one evaluation per unit of sigma."""
    import simulator.central as central

    calls = 0
    exact = central.analytic_gaussian_delta

    def counted(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
        nonlocal calls
        calls += 1
        return exact(sigma, epsilon, sensitivity)

    monkeypatch.setattr(central, "analytic_gaussian_delta", counted)
    sigma = central.analytic_gaussian_sigma(0.002, 1e-10)
    assert sigma > 2000
    # log2(sigma) doublings, then log2(1e12) halvings, and one check per doubling.
    assert calls <= 2 * math.ceil(math.log2(sigma)) + 42
