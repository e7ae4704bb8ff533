"""Reference estimator for measurements: the posterior mean under a flat prior on the simplex.

Not a query option. ``bench/estimate.py --only ceiling`` uses it to show how much *any*
post-processing without an informative prior can gain over the raw estimates: averaged over
distributions drawn uniformly from the simplex, the flat-prior posterior mean has the lowest
mean squared error of all estimators (Bayes optimality; here within the Gaussian approximation
of the likelihood). It reads only the estimate, so it keeps the privacy guarantee like every
post-processing. Monte Carlo (Gibbs sampling), so it is approximate and slow compared with
``mle``; needs scipy (the ``sim`` or ``dev`` extra).
"""

from __future__ import annotations

import numpy as np

from aggregator.estimate import Estimate
from aggregator.evaluation import MethodErrors, method_errors
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import GeneralizedRR, Mechanism

#: Name of the reference estimator in :func:`flat_prior_errors`.
FLAT_PRIOR = "flat-prior-mean"


def _truncated_normal(
    mean: np.ndarray, sd: np.ndarray, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One draw per entry of ``N(mean, sd^2)`` truncated to ``[lo, hi]`` (inverse CDF).

    Intervals in the upper tail are mirrored into the lower tail, where the normal CDF keeps
    its relative precision, so narrow far-tail intervals still give draws inside them.
    """
    from scipy.special import ndtr, ndtri

    a = (lo - mean) / sd
    b = (hi - mean) / sd
    flip = a > 0
    a2 = np.where(flip, -b, a)
    b2 = np.where(flip, -a, b)
    fa, fb = ndtr(a2), ndtr(b2)
    x = ndtri(fa + rng.random(mean.shape) * (fb - fa))
    x = np.clip(np.where(flip, -x, x), a, b)
    draws: np.ndarray = mean + sd * np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return draws


def flat_prior_mean(
    raw: np.ndarray,
    cov: np.ndarray,
    start: np.ndarray,
    *,
    rng: np.random.Generator,
    chains: int = 200,
    burn_in: int = 30,
    sweeps: int = 30,
) -> np.ndarray:
    """Posterior mean of the frequencies given raw estimates ``raw ~ N(theta, cov)``.

    Prior: uniform on the simplex ``{theta >= 0, sum theta = 1}``. The posterior is the
    Gaussian centred at ``raw``, conditioned on ``sum theta = 1`` (a no-op when ``cov``
    already fixes the sum, ``cov @ 1 = 0``, as for GRR) and truncated to ``theta >= 0``.
    Sampled by Gibbs moves along ``e_i - e_j`` (mass moved between two values, so every state
    stays on the simplex), ``chains`` chains in parallel from the feasible point ``start``;
    the first ``burn_in`` sweeps are dropped and the next ``sweeps`` averaged. ``cov`` must
    have full rank on the sum-zero hyperplane.
    """
    raw = np.asarray(raw, dtype=float)
    cov = np.asarray(cov, dtype=float)
    start = np.asarray(start, dtype=float)
    k = raw.size
    if raw.ndim != 1 or k < 2 or cov.shape != (k, k) or start.shape != (k,):
        raise InvalidParameter(
            f"raw and start must be 1-D arrays of k >= 2 frequencies and cov k x k, got "
            f"shapes {raw.shape}, {start.shape} and {cov.shape}"
        )
    if not (np.isfinite(raw).all() and np.isfinite(cov).all()):
        raise InvalidParameter("raw and cov must be finite")
    if start.min() < 0 or abs(start.sum() - 1) > 1e-9:
        raise InvalidParameter("start must be a distribution (>= 0, summing to 1)")
    if min(chains, burn_in + 1, sweeps) < 1:
        raise InvalidParameter("chains and sweeps must be >= 1 and burn_in >= 0")
    ones = np.ones(k)
    c1 = cov @ ones
    s = float(ones @ c1)
    if s > 1e-12 * float(np.trace(cov)):
        mean = raw + c1 * (1 - raw.sum()) / s
        cov = cov - np.outer(c1, c1) / s
    else:
        mean = raw
    # Projector onto the hyperplane; the precision there is the pseudo-inverse of cov.
    proj = np.eye(k) - np.outer(ones, ones) / k
    precision = np.linalg.pinv(proj @ cov @ proj, hermitian=True)
    theta = np.tile(start, (chains, 1))
    resid = (theta - mean) @ precision  # (chains, k): P (theta - mean) per chain
    total = np.zeros(k)
    for sweep in range(burn_in + sweeps):
        order = rng.permutation(k)
        for i, j in zip(order, np.roll(order, 1), strict=True):
            a = precision[i, i] + precision[j, j] - 2 * precision[i, j]
            b = resid[:, i] - resid[:, j]
            sd = np.full(chains, 1 / np.sqrt(a))
            t = _truncated_normal(-b / a, sd, -theta[:, i], theta[:, j], rng)
            theta[:, i] += t
            theta[:, j] -= t
            resid += np.outer(t, precision[i] - precision[j])
        if sweep >= burn_in:
            total += theta.sum(axis=0)
    return total / (chains * sweeps)


def grr_frequency_cov(mechanism: GeneralizedRR, n: int, f: np.ndarray) -> np.ndarray:
    """Covariance of GRR's raw unbiased frequencies for ``n`` devices holding frequencies ``f``.

    Fixed-population model, as ``Mechanism.count_variance``: the ``n f_x`` devices holding x
    each report from row x of the channel, so the tally's covariance is
    ``sum_x n f_x (diag(A_x) - A_x A_x^T)``. In frequency units that is the multinomial
    ``(diag(pi) - pi pi^T) / (n (p*-q*)^2)``, ``pi = q* + (p*-q*) f``, less the sampling
    variance of the values themselves, ``(diag(f) - f f^T) / n``. Singular along the all-ones
    vector: the raw frequencies always sum to 1.
    """
    p, q = mechanism.p_star, mechanism.q_star
    f = np.asarray(f, dtype=float)
    pi = q + (p - q) * f
    multinomial = (np.diag(pi) - np.outer(pi, pi)) / (n * (p - q) ** 2)
    return multinomial - (np.diag(f) - np.outer(f, f)) / n


def frequency_cov(mechanism: Mechanism, n: int, f: np.ndarray) -> np.ndarray:
    """Covariance of the raw unbiased frequencies for ``n`` devices holding frequencies ``f``.

    ``Cov(C) = sum_x n f_x (M_x - a_x a_x^T)`` with ``a_x[v] = P[v in S | x]`` and ``M_x`` the
    second moments ``P[v, w in S | x]``, divided by ``(n (p* - q*))^2``:

    * GRR/RR and SS (``d`` values per report, d = 1 for GRR): exact. Off the diagonal,
      ``P[x, w in S | x] = p* (d-1)/(k-1)`` and, for ``v, w != x``,
      ``P[v, w in S | x] = (p*(d-1)(d-2) + (1-p*) d (d-1)) / ((k-1)(k-2))``.
    * Unary encoding: exact and diagonal (independent bits given the value).
    * OLH, HR: diagonal, an approximation (their support indicators are uncorrelated up to
      the three-way dependence of the hash family or Hadamard rows).
    """
    p, q = mechanism.p_star, mechanism.q_star
    k = mechanism.k
    f = np.clip(np.asarray(f, dtype=float), 0.0, None)
    f = f / f.sum() if f.sum() > 0 else np.full(k, 1.0 / k)
    c = n * f
    d = mechanism.exact_support_size
    diag = c * p * (1 - p) + (n - c) * q * (1 - q)
    if d is None:
        cov = np.diag(diag)
    else:
        with_x = p * (d - 1) / (k - 1)
        without = (
            (p * (d - 1) * (d - 2) + (1 - p) * d * (d - 1)) / ((k - 1) * (k - 2)) if k > 2 else 0.0
        )
        # sum_x c_x M_x off the diagonal: pairs (x, w) get with_x from c_x and c_w; the rest
        # get `without` from every other holder.
        pair = np.add.outer(c, c)
        second = pair * with_x + (n - pair) * without
        # sum_x c_x a_x a_x^T
        a_outer = n * q * q + q * (p - q) * pair + (p - q) ** 2 * np.diag(c)
        cov = second - a_outer
        np.fill_diagonal(cov, diag)
    return cov / (n * (p - q)) ** 2


def flat_prior_estimate(
    est: Estimate,
    start: np.ndarray,
    *,
    rng: np.random.Generator,
    chains: int = 200,
    burn_in: int = 30,
    sweeps: int = 30,
) -> np.ndarray:
    """Flat-prior posterior-mean frequencies for any mechanism, covariance plugged in at ``start``.

    ``start`` (a distribution, e.g. the ``mle`` frequencies) also starts the chains.
    """
    cov = frequency_cov(est.mechanism, est.n, start)
    return flat_prior_mean(
        est.counts / est.n, cov, start, rng=rng, chains=chains, burn_in=burn_in, sweeps=sweeps
    )


def flat_prior_errors(
    mechanism: GeneralizedRR, true_indices: np.ndarray, *, repetitions: int, seed: int
) -> MethodErrors:
    """Like ``method_errors`` for GRR, scoring ``none``, ``mle`` and :func:`flat_prior_mean`.

    GRR is the case where the raw estimate is the exact unconstrained maximum-likelihood
    estimate and the covariance is known exactly (plug-in at the ``mle`` frequencies, which
    also start the chains), so the flat-prior mean shows what a method without an informative
    prior can add there.
    """
    if not mechanism.exact_channel:
        raise InvalidParameter(
            "flat_prior_errors needs a GRR mechanism (its covariance is known exactly), "
            f"got {mechanism.name!r}"
        )
    sampler = np.random.default_rng([seed, 1])

    def posterior_mean(est: Estimate, freqs: dict[str, np.ndarray]) -> np.ndarray:
        cov = grr_frequency_cov(mechanism, est.n, freqs["mle"])
        return flat_prior_mean(freqs["none"], cov, freqs["mle"], rng=sampler)

    return method_errors(
        mechanism,
        true_indices,
        repetitions=repetitions,
        seed=seed,
        methods=("none", "mle"),
        extra={FLAT_PRIOR: posterior_mean},
    )
