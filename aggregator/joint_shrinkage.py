"""``eb-joint``: empirical Bayes whose unpooled branch is the joint flat-prior posterior mean.

Privacy: reads only the estimate (the tally and the mechanism's public constants), so, like
every post-processing, it leaves the epsilon-LDP guarantee unchanged. Deterministic: no random
numbers (a fixed-point iteration on fixed grids; NumPy and SciPy only), so the same tally and
mechanism give the same counts on every run.

Model (docs/MECHANISMS.md §23, "The joint likelihood"). The raw unbiased frequencies ``r`` are
taken as ``N(f, S)``, ``S`` the exact fixed-population covariance of the mechanism's raw
frequencies (``aggregator.flat_prior.frequency_cov``: exact for GRR, SS and unary encoding,
including subset selection's negatively correlated counts; diagonal for OLH and HR) plugged in
at the ``mle`` frequencies. Conditioning on ``sum f = 1`` gives ``r~ ~ N(f, S~)`` on the
hyperplane (``r~ = r`` for GRR and SS, whose raw frequencies always sum to 1). Under the flat
(uniform) prior on the simplex the posterior is that Gaussian truncated to ``f >= 0``; its mean
is the repository's ceiling reference (``aggregator.flat_prior``, there by Monte Carlo).

Here the posterior mean is computed by expectation propagation (EP; Minka 2001, for truncated
Gaussians as in Cunningham, Hennig and Lacoste-Julien 2011): each factor ``1[0 <= f_v <= 1]`` is
replaced by a Gaussian site whose parameters match the mean and variance of the one-dimensional
tilted distribution (the cavity Gaussian truncated to [0, 1], integrated exactly per cell on a
grid whose cells are at most a third of the cavity's standard deviation wide), sweeping all
sites in parallel with damping :data:`EP_DAMPING` until no mean moves by more than
:data:`EP_TOLERANCE`. Truncation of a Gaussian is log-concave, so every site precision is
non-negative and the iteration is well defined. On the 2-simplex the EP mean is within 0.015
posterior standard deviations of brute-force integration; on Adult occupation and education
(``bench/accuracy.py``, R = 30) its count MSE is 0.99-1.00x that of the Monte Carlo reference,
whose own sampling noise adds a little to its error.

``eb-joint`` keeps ``eb``'s model choice (aggregator/shrinkage.py): when BIC gives very strong
evidence for the pooled model (many values below the noise, e.g. native-country) it returns
``eb``'s pooled posterior mean; otherwise, where ``eb`` returns ``mle``, it returns the joint
flat-prior posterior mean, which uses the exact covariance and the simplex and so gains where
``mle`` over-fits (small values at low epsilon). Like every shrinkage it is biased toward the
prior; intervals stay on the raw estimates (§13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aggregator.estimate import Estimate
from client_sdk.errors import InvalidParameter

#: EP stops when no posterior mean moved by more than this (frequency units) in one sweep.
#: 1e-8 of n is 3e-4 counts at n = 30,000 (measured against 1e-10 on Adult education at epsilon
#: 0.5: counts within 3e-4, 20 sweeps instead of 27).
EP_TOLERANCE = 1e-8
#: EP gives up after this many parallel sweeps (and says so: ``converged`` False).
EP_MAX_SWEEPS = 200
#: Share of the new site parameters taken per sweep (damped parallel EP).
EP_DAMPING = 0.5
#: Uniform cells over [0, 1] and cells across each cavity's window (``WINDOW_SDS`` each side).
UNIFORM_CELLS = 200
WINDOW_CELLS = 64
WINDOW_SDS = 10.0

_UNIFORM = np.linspace(0.0, 1.0, UNIFORM_CELLS + 1)
_UNIT_WINDOW = np.linspace(0.0, 1.0, WINDOW_CELLS + 1)

#: (cavity means, cavity sds) -> (tilted means, tilted variances), per value.
Tilted = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Posterior:
    """EP posterior: ``mean`` (a distribution), marginal ``variance``, and how EP ended."""

    mean: np.ndarray
    variance: np.ndarray
    sweeps: int
    converged: bool


def conditioned_gaussian(raw: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``N(raw, cov)`` conditioned on ``sum f = 1``: its mean (summing to 1) and covariance.

    A no-op apart from rounding when ``cov`` already fixes the sum (``cov 1 = 0``), as for GRR
    and SS, whose raw frequencies sum to 1.
    """
    k = raw.size
    ones = np.ones(k)
    c1 = cov @ ones
    s = float(ones @ c1)
    if s > 1e-12 * float(np.trace(cov)):
        mean = raw + c1 * (1 - raw.sum()) / s
        cov = cov - np.outer(c1, c1) / s
    else:
        mean = raw + (1 - raw.sum()) / k
    return mean, (cov + cov.T) / 2


def _windows(mu: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cavity, the part of [0, 1] where the truncated cavity Gaussian lives.

    ``mu +- 10 sd`` clipped to [0, 1]; when ``mu`` is outside [0, 1] the truncated density decays
    from the nearest end at rate ``|mu - end| / sd^2`` and the window spans 10 of those lengths.
    """
    below = WINDOW_SDS * sd**2 / np.maximum(-mu, sd)
    above = WINDOW_SDS * sd**2 / np.maximum(mu - 1, sd)
    lo = np.clip(np.minimum(mu - WINDOW_SDS * sd, 1 - above), 0.0, 1.0)
    hi = np.clip(np.maximum(mu + WINDOW_SDS * sd, below), 0.0, 1.0)
    return lo, np.maximum(hi, lo)


def flat_tilted(mu: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of ``N(mu, sd^2)`` truncated to [0, 1], per entry.

    Integrated on 200 uniform cells plus 64 cells across the window of :func:`_windows`; the
    Gaussian is taken at each cell's midpoint, the cell's mass and moments are exact.
    """
    lo, hi = _windows(mu, sd)
    window = lo[:, None] + (hi - lo)[:, None] * _UNIT_WINDOW
    edges = np.concatenate([np.broadcast_to(_UNIFORM, (mu.size, _UNIFORM.size)), window], axis=1)
    edges.sort(axis=1)
    a, b = edges[:, :-1], edges[:, 1:]
    logl = (((a + b) / 2 - mu[:, None]) / sd[:, None]) ** 2
    logl *= -0.5
    logl -= logl.max(axis=1, keepdims=True)
    lik = np.exp(logl, out=logl)
    a2, b2 = a * a, b * b
    z = np.einsum("ij,ij->i", lik, b - a)
    mean = np.einsum("ij,ij->i", lik, b2 - a2) / (2 * z)
    second = np.einsum("ij,ij->i", lik, b2 * b - a2 * a) / (3 * z)
    var: np.ndarray = np.maximum(second - mean**2, 0.0)
    return mean, var


def _spd_inverse(a: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive-definite matrix (Cholesky factor, then its inverse)."""
    low = np.linalg.cholesky(a)
    inv_low = np.linalg.solve(low, np.eye(a.shape[0]))
    out: np.ndarray = inv_low.T @ inv_low
    return out


def ep_posterior(centre: np.ndarray, cov: np.ndarray, tilted: Tilted = flat_tilted) -> Posterior:
    """EP posterior of ``f`` given ``centre ~ N(f, cov)`` on the hyperplane, times product sites.

    ``centre`` sums to 1 and ``cov 1 = 0`` (:func:`conditioned_gaussian`); ``cov`` must have
    full rank on the sum-zero hyperplane. ``tilted(mu, sd)`` gives, per value, the mean and
    variance of the cavity ``N(mu, sd^2)`` times the value's prior factor (default: the flat
    prior, :func:`flat_tilted`). The returned mean is clipped at 0 and renormalised (it moves
    only by rounding: EP's marginal means are means of distributions on [0, 1]).
    """
    from scipy.linalg import helmert

    k = centre.size
    u = helmert(k).T  # (k, k-1): an orthonormal basis of the sum-zero hyperplane
    f0 = np.full(k, 1.0 / k)
    cz = u.T @ cov @ u
    cz = (cz + cz.T) / 2
    lam0 = np.linalg.inv(cz)
    lam0 = (lam0 + lam0.T) / 2
    h0 = lam0 @ (u.T @ (centre - f0))
    tau = np.zeros(k)
    nu = np.zeros(k)
    mean = centre.copy()
    var = np.diag(cov).copy()
    converged = False
    sweeps = 0
    while sweeps < EP_MAX_SWEEPS:
        sweeps += 1
        # The posterior precision is symmetric positive definite (lam0 is, tau >= 0); its
        # inverse by LAPACK's Cholesky-based routine, symmetrised.
        cz_post = _spd_inverse(lam0 + (u.T * tau) @ u)
        uc = u @ cz_post
        new_mean = f0 + uc @ (h0 + u.T @ (nu - tau * f0))
        new_var = np.maximum(np.einsum("ij,ij->i", uc, u), 1e-300)
        moved = float(np.max(np.abs(new_mean - mean)))
        mean, var = new_mean, new_var
        if sweeps > 1 and moved < EP_TOLERANCE:
            converged = True
            break
        tau_c = np.maximum(1 / var - tau, 1e-300)
        nu_c = mean / var - nu
        t_mean, t_var = tilted(nu_c / tau_c, np.sqrt(1 / tau_c))
        t_var = np.maximum(t_var, 1e-300)
        tau_new = np.maximum(1 / t_var - tau_c, 0.0)
        nu_new = t_mean * (tau_c + tau_new) - nu_c
        tau = (1 - EP_DAMPING) * tau + EP_DAMPING * tau_new
        nu = (1 - EP_DAMPING) * nu + EP_DAMPING * nu_new
    out = np.maximum(mean, 0.0)
    return Posterior(out / out.sum(), var, sweeps, converged)


def flat_posterior(raw: np.ndarray, cov: np.ndarray) -> Posterior:
    """Posterior under the flat prior on the simplex given ``raw ~ N(f, cov)`` (module doc).

    ``raw`` are k >= 2 finite frequencies and ``cov`` their k x k covariance, of full rank on
    the sum-zero hyperplane.
    """
    raw = np.asarray(raw, dtype=float)
    cov = np.asarray(cov, dtype=float)
    k = raw.size
    if raw.ndim != 1 or k < 2 or cov.shape != (k, k):
        raise InvalidParameter(
            f"raw must be k >= 2 frequencies and cov k x k, got shapes {raw.shape}, {cov.shape}"
        )
    if not (np.isfinite(raw).all() and np.isfinite(cov).all()):
        raise InvalidParameter("raw and cov must be finite")
    centre, cond = conditioned_gaussian(raw, cov)
    return ep_posterior(centre, cond)


@dataclass(frozen=True)
class JointShrinkage:
    """What ``eb-joint`` returned: frequencies, whether ``eb`` pooled, and the flat posterior.

    ``flat`` is None when the pooled branch was taken (the flat posterior is then not computed).
    """

    frequencies: np.ndarray
    pooled: bool
    flat: Posterior | None


def eb_joint_frequencies(est: Estimate) -> JointShrinkage:
    """``eb-joint``: ``eb``'s pooled posterior mean when BIC pools, else the joint flat-prior mean.

    The covariance is the mechanism's exact one (``frequency_cov``) plugged in at the ``mle``
    frequencies. Deterministic.
    """
    from aggregator.flat_prior import frequency_cov
    from aggregator.postprocess import mle_frequencies
    from aggregator.shrinkage import pooling_fit

    mech = est.mechanism
    if est.n == 0:
        return JointShrinkage(np.full(mech.k, 1.0 / mech.k), False, None)
    raw = est.counts / est.n
    # The fit itself is not returned: skipped where a bound proves it would not pool.
    fit = pooling_fit(est, need_fit=False)
    if fit is not None and fit.pooled:
        return JointShrinkage(fit.pooled_frequencies, True, None)
    mle, _, _, _ = mle_frequencies(mech, est.tally)
    flat = flat_posterior(raw, frequency_cov(mech, est.n, mle))
    return JointShrinkage(flat.mean, False, flat)
