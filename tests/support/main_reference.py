"""main's code before the latency work, verbatim: the references the fast paths are tested against.

Copied from ``git show cd1dce9:<file>`` (the commit the ``wt-latency`` branch was cut from),
function bodies unchanged except the lines (marked) of ``_auto``, ``_eb``, ``_eb_joint`` and
``eb_joint_frequencies`` that imported a function from its module, whose copy here is used
instead; the imports below make each copy call the other copies
(the reference smoother, the reference fit) and the unchanged helpers of its module.
``tests/test_latency_equivalence.py`` asserts that the optimised functions return the same
numbers (bit for bit) as these.
"""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from aggregator.estimate import Estimate
from aggregator.postprocess import PostProcessed, _mle
from aggregator.results import FrequencyTrendWindow
from aggregator.joint_shrinkage import JointShrinkage, flat_posterior
from aggregator.shrinkage import (
    EmpiricalBayes,
    FLAT_BELOW_SDS,
    FLUSH,
    MERGE_SDS,
    NEGLIGIBLE,
    NPMLE_ITERATIONS,
    TINY,
    ATOM_SHARE,
    AutoChoice,
    PooledFit,
    UNIFORM_CELLS,
    WINDOW_CELLS,
    WINDOW_SDS,
    _check,
    _variance,
    sum_to_one,
    uniform_sds,
)
from aggregator.service import kind_of
from aggregator.smooth import BREAK_Z, DIFFUSE, TAU_GRID, Smoothed
from client_sdk.errors import InvalidParameter


# -- aggregator/smooth.py ---------------------------------------------------------------


def _filter(
    y: np.ndarray, r: np.ndarray, q: np.ndarray, reset: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kalman filter for independent local-level series, vectorised over the last axes.

    ``y``, ``r``: (T, ...) observations and their variances (NaN y: missing); ``q``: process
    variance broadcastable to y[0]; ``reset``: (T, ...) bool, diffuse process variance there.
    Returns predicted mean/var, filtered mean/var, log-likelihood terms and standardised
    innovations.
    """
    t_len = y.shape[0]
    shape = np.broadcast_shapes(y.shape[1:], np.shape(q))
    finite = r[np.isfinite(r)]
    big = DIFFUSE * float(finite.max()) if finite.size else DIFFUSE
    obs = ~np.isnan(y)
    # A missing window has infinite observation variance: zero gain, no likelihood.
    yy = np.where(obs, y, 0.0)
    rr = np.where(obs, r, np.inf)
    qq = np.where(reset, big, q)
    m = np.zeros(shape)
    p = np.full(shape, big)
    pm = np.empty((t_len, *shape))
    pp = np.empty((t_len, *shape))
    fm = np.empty((t_len, *shape))
    fp = np.empty((t_len, *shape))
    innovations = np.zeros((t_len, *shape))
    totals = np.ones((t_len, *shape))
    for t in range(t_len):
        if t > 0:
            p = p + qq[t]
        pm[t], pp[t] = m, p
        s = p + rr[t]
        innov = yy[t] - m
        gain = p / s
        m = m + gain * innov
        # p r / s, not p - gain p: after a diffuse prediction (p = DIFFUSE times the largest r)
        # a window with a much smaller r has gain rounding to 1 and p - gain p to 0, a posterior
        # variance of 0 (and 0/0 in the smoother below); p r / s keeps its relative precision.
        seen = obs[t]
        p = np.where(seen, p * (np.where(seen, rr[t], 1.0) / np.where(seen, s, 1.0)), p)
        innovations[t], totals[t] = innov, s
        fm[t], fp[t] = m, p
    # A diffuse prediction (first window, or a new level) carries no likelihood.
    counted = obs & (pp < big * 0.5)
    safe = np.where(counted, totals, 1.0)
    ll = np.where(counted, -0.5 * (np.log(2 * math.pi * safe) + innovations**2 / safe), 0.0)
    zs = np.where(counted, innovations / np.sqrt(safe), 0.0)
    return pm, pp, fm, fp, ll, zs


def smooth_series(
    y: np.ndarray,
    std_errors: np.ndarray,
    *,
    reports: np.ndarray | None = None,
    break_z: float = BREAK_Z,
) -> Smoothed:
    """Smooth T windows of k raw estimates ``y`` (T x k) with standard errors ``std_errors``.

    NaN marks a window without an estimate (both arrays). Deterministic.

    ``reports`` (T,): the number of reports per window. Each window's estimates are about its
    own devices, whose frequencies scatter around the smooth level by sampling; with
    ``reports`` the standard errors add that scatter, ``f (1 - f) / n_t``, so an interval
    covers the window's own frequency, not only the level.
    """
    y = np.asarray(y, dtype=float)
    se = np.asarray(std_errors, dtype=float)
    if y.ndim != 2 or se.shape != y.shape or y.shape[0] == 0:
        raise InvalidParameter("y and std_errors must be T x k arrays of the same shape, T >= 1")
    observed = ~np.isnan(y)
    if np.any(observed & ~(np.isfinite(se) & (se > 0))):
        raise InvalidParameter("every observed window needs a finite standard error > 0")
    r = np.where(observed, se**2, np.nan)
    scale = float(np.nanmedian(se)) if observed.any() else 1.0
    taus = TAU_GRID * scale
    t_len, k = y.shape
    no_reset = np.zeros((t_len, 1, k), dtype=bool)

    def fit(reset: np.ndarray) -> np.ndarray:
        # Log-likelihood per (tau, value); the grid axis is the second one.
        _, _, _, _, ll, _ = _filter(y[:, None, :], r[:, None, :], (taus**2)[:, None], reset)
        best: np.ndarray = taus[np.argmax(ll.sum(axis=0), axis=0)]
        return best

    tau = fit(no_reset)
    # Breaks: innovations beyond break_z under the first fit; then refit tau with them.
    *_, zs = _filter(y, r, tau**2, no_reset[:, 0, :])
    reset = np.abs(zs) > break_z
    if reset.any():
        tau = fit(reset[:, None, :])
        *_, zs = _filter(y, r, tau**2, reset)
        reset = reset | (np.abs(zs) > break_z)
    pm, pp, fm, fp, _, _ = _filter(y, r, tau**2, reset)
    # Rauch-Tung-Striebel backward pass (local level: transition 1).
    sm, sp = fm.copy(), fp.copy()
    for t in range(t_len - 2, -1, -1):
        gain = fp[t] / pp[t + 1]
        sm[t] = fm[t] + gain * (sm[t + 1] - pm[t + 1])
        sp[t] = fp[t] + gain**2 * (sp[t + 1] - pp[t + 1])
    breaks = tuple((int(t), int(v)) for t, v in zip(*np.nonzero(reset), strict=True))
    if reports is not None:
        n_t = np.asarray(reports, dtype=float).reshape(-1, 1)
        if n_t.shape[0] != t_len or (n_t <= 0).any():
            raise InvalidParameter("reports must hold one positive count per window")
        sp = sp + np.clip(sm, 0, 1) * (1 - np.clip(sm, 0, 1)) / n_t
        fp = fp + np.clip(fm, 0, 1) * (1 - np.clip(fm, 0, 1)) / n_t
    return Smoothed(
        mean=sm,
        std_error=np.sqrt(np.maximum(sp, 0.0)),
        filtered=fm,
        filtered_std_error=np.sqrt(np.maximum(fp, 0.0)),
        tau=tau,
        breaks=breaks,
    )


# -- aggregator/shrinkage.py ------------------------------------------------------------


def _partition(raw: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Edges of a partition of [0, 1]: uniform cells plus fine cells around each raw value."""
    parts = [np.linspace(0.0, 1.0, UNIFORM_CELLS + 1)]
    for r, s in zip(raw, sd, strict=True):
        lo, hi = max(0.0, r - WINDOW_SDS * s), min(1.0, r + WINDOW_SDS * s)
        if hi > lo:
            parts.append(np.linspace(lo, hi, WINDOW_CELLS + 1))
    edges: np.ndarray = np.unique(np.concatenate(parts))
    return edges


def _npmle_grid(
    raw: np.ndarray, n: int, v0: float, beta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The NPMLE's support grid ``t`` (0 and the partition's midpoints), the variance
    function's values there, the likelihood matrix ``L_vj`` (each row's maximum 1) and each
    row's log-scale (the maximum subtracted)."""
    raw = np.asarray(raw, dtype=float)
    _check(raw, n, v0, beta)
    edges = _partition(raw, np.sqrt(_variance(np.clip(raw, 0.0, 1.0), n, v0, beta)))
    t = np.concatenate([[0.0], (edges[:-1] + edges[1:]) / 2])
    var = _variance(t, n, v0, beta)
    loglik = -0.5 * ((raw[:, None] - t[None, :]) ** 2 / var[None, :] + np.log(var)[None, :])
    shift = loglik.max(axis=1, keepdims=True)
    lik = np.exp(loglik - shift)
    return t, var, lik, shift


def _npmle_fit(
    raw: np.ndarray, n: int, v0: float, beta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The NPMLE prior's support ``t``, weights ``w`` and the likelihood matrix ``L_vj``.

    The same fixed-iteration EM as :func:`_npmle_fit_reference`, on a reduced problem: columns
    whose likelihood is negligible for every value (:data:`NEGLIGIBLE`) are left out, and the
    points of each :data:`MERGE_SDS`-standard-error bin are fitted as one point (their mean
    position) starting from their summed weight; a merged point's fitted weight is then shared
    equally among its members. Likelihoods below :data:`FLUSH` and weights that fall below it
    are set to 0 (subnormal arithmetic cost 3x). The returned arrays are on the full grid, like
    the reference's. Deterministic (fixed grid, fixed bins, fixed iteration count).
    """
    raw = np.asarray(raw, dtype=float)
    t, var, lik, shift = _npmle_grid(raw, n, v0, beta)
    k = lik.shape[0]
    keep = np.flatnonzero(lik.max(axis=0) >= NEGLIGIBLE)
    tk = t[keep]
    # Position on the standard-error scale (t is sorted), then fixed-width bins along it.
    u = np.concatenate(
        [[0.0], np.cumsum(np.diff(tk) / np.sqrt((var[keep][1:] + var[keep][:-1]) / 2))]
    )
    _, group = np.unique(np.floor(u / MERGE_SDS).astype(np.int64), return_inverse=True)
    group = np.asarray(group).reshape(-1)
    sizes = np.bincount(group).astype(float)
    centres = np.bincount(group, weights=tk) / sizes
    vc = _variance(centres, n, v0, beta)
    loglik = -0.5 * ((raw[:, None] - centres[None, :]) ** 2 / vc[None, :] + np.log(vc)[None, :])
    small = np.exp(loglik - shift)
    small[small < FLUSH] = 0.0  # no subnormal numbers in the products (see FLUSH)
    small_t = np.ascontiguousarray(small.T) / k
    w = sizes / t.size
    for i in range(NPMLE_ITERATIONS):
        w = w * (small_t @ (1.0 / np.maximum(small @ w, TINY)))
        if i % 16 == 15:
            # Weights that have fallen below FLUSH of the total (which stays 1) can no longer
            # move any marginal; zeroing them keeps the arithmetic off slow subnormal numbers.
            w[w < FLUSH] = 0.0
    full = np.zeros(t.size)
    full[keep] = (w / sizes)[group]
    return t, full, lik


def npmle_posterior_mean(raw: np.ndarray, n: int, v0: float, beta: float) -> PooledFit:
    """Posterior means under the prior fitted by nonparametric maximum likelihood (module doc).

    The prior is a discrete distribution on ``{0}`` and the cell midpoints of the integration
    partition; its weights maximise ``sum_v log sum_j w_j N(r_v; t_j, s^2(t_j))`` (Kiefer and
    Wolfowitz's NPMLE), by :data:`NPMLE_ITERATIONS` EM steps from equal weights. Each value's
    posterior mean is ``sum_j w_j L_vj t_j / sum_j w_j L_vj``; the k means are then conditioned
    on summing to 1 (:func:`sum_to_one`).
    """
    raw = np.asarray(raw, dtype=float)
    k = raw.size
    t, w, lik = _npmle_fit(raw, n, v0, beta)
    marginal = np.maximum(lik @ w, TINY)
    post = (lik * w) @ t / marginal
    second = (lik * w) @ (t * t) / marginal
    freqs = sum_to_one(post, np.maximum(second - post**2, 0.0))
    heavy = w > ATOM_SHARE * w.max()
    atoms = int(np.sum(heavy[1:] & ~heavy[:-1]) + heavy[0])
    log_gain = float(np.sum(np.log(marginal)))
    bic = log_gain + (k - (2 * atoms - 1)) / 2 * math.log(k)
    return PooledFit(freqs, atoms, log_gain, bic, t, w / w.sum())


def auto_frequencies(est: Estimate) -> AutoChoice:
    """``auto``: ``eb``'s pooled posterior mean where BIC pools; else, where the noise
    dominates (:data:`FLAT_BELOW_SDS`), the joint flat-prior posterior mean; else ``mle``.

    A function of the mechanism's public constants, ``n`` and the tally only, so the same
    campaign and tally give the same counts everywhere. The flat-prior posterior is computed
    only when chosen.
    """
    from aggregator.postprocess import mle_frequencies

    mech = est.mechanism
    mle, _, _, _ = mle_frequencies(mech, est.tally)
    if est.n == 0:
        return AutoChoice(mle, "mle", 0.0, None)
    sds = uniform_sds(mech.k, est.n, mech.v0)
    raw = est.counts / est.n
    fit = npmle_posterior_mean(raw, est.n, mech.v0, mech.beta)
    if fit.pooled:
        return AutoChoice(fit.pooled_frequencies, "pooled", sds, fit)
    if sds < FLAT_BELOW_SDS:
        from aggregator.flat_prior import frequency_cov
        from aggregator.joint_shrinkage import flat_posterior

        flat = flat_posterior(raw, frequency_cov(mech, est.n, mle))
        return AutoChoice(flat.mean, "flat", sds, fit, flat.sweeps, flat.converged)
    return AutoChoice(mle, "mle", sds, fit)


# -- aggregator/postprocess.py ----------------------------------------------------------


def _auto(est: Estimate, alpha: float) -> PostProcessed:
    # (main imported auto_frequencies from aggregator.shrinkage here; the copy above is used.)

    result = auto_frequencies(est)
    if result.chosen == "mle":
        return replace(_mle(est, alpha), method="auto", pooled=False, chosen="mle")
    return PostProcessed(
        "auto",
        result.frequencies * est.n,
        iterations=result.sweeps,
        converged=result.converged,
        pooled=result.chosen == "pooled",
        chosen=result.chosen,
    )


def eb_frequencies(est: Estimate) -> EmpiricalBayes:
    """``eb``: the NPMLE posterior mean when BIC prefers pooling, else the ``mle`` frequencies.

    Two models of the k raw estimates: *unpooled* (each frequency its own parameter, whose
    constrained maximum is ``mle``) and *pooled* (the frequencies drawn from a common prior,
    fitted nonparametrically, :func:`npmle_posterior_mean`). BIC (with ``log k``, the number of
    observations) approximates the log Bayes factor between them; ``eb`` pools when it exceeds
    :data:`POOLING_EVIDENCE`. Pooling wins where many values are below the noise (a skewed
    domain such as native-country, or low epsilon); it loses where the k values are few and
    well resolved (there a k-point prior fit pulls distinct values together), and there BIC
    keeps ``mle``. Deterministic.
    """
    from aggregator.postprocess import mle_frequencies

    mech = est.mechanism
    mle, _, _, _ = mle_frequencies(mech, est.tally)
    if est.n == 0:
        return EmpiricalBayes(mle, False, PooledFit(mle, 0, 0.0, -math.inf))
    fit = npmle_posterior_mean(est.counts / est.n, est.n, mech.v0, mech.beta)
    return EmpiricalBayes(fit.pooled_frequencies if fit.pooled else mle, fit.pooled, fit)


def _eb(est: Estimate, alpha: float) -> PostProcessed:
    # (main imported eb_frequencies from aggregator.shrinkage here; the copy above is used.)

    result = eb_frequencies(est)
    if result.pooled:
        return PostProcessed("eb", result.frequencies * est.n, pooled=True)
    return replace(_mle(est, alpha), method="eb", pooled=False)


def eb_joint_frequencies(est: Estimate) -> JointShrinkage:
    """``eb-joint``: ``eb``'s pooled posterior mean when BIC pools, else the joint flat-prior mean.

    The covariance is the mechanism's exact one (``frequency_cov``) plugged in at the ``mle``
    frequencies. Deterministic.
    """
    from aggregator.flat_prior import frequency_cov
    from aggregator.postprocess import mle_frequencies
    # (main imported npmle_posterior_mean from aggregator.shrinkage here; the copy is used.)

    mech = est.mechanism
    if est.n == 0:
        return JointShrinkage(np.full(mech.k, 1.0 / mech.k), False, None)
    raw = est.counts / est.n
    fit = npmle_posterior_mean(raw, est.n, mech.v0, mech.beta)
    if fit.pooled:
        return JointShrinkage(fit.pooled_frequencies, True, None)
    mle, _, _, _ = mle_frequencies(mech, est.tally)
    flat = flat_posterior(raw, frequency_cov(mech, est.n, mle))
    return JointShrinkage(flat.mean, False, flat)


def _eb_joint(est: Estimate, alpha: float) -> PostProcessed:
    # (main imported eb_joint_frequencies here; the copy above is used.)

    result = eb_joint_frequencies(est)
    flat = result.flat
    return PostProcessed(
        "eb-joint",
        result.frequencies * est.n,
        iterations=None if flat is None else flat.sweeps,
        converged=None if flat is None else flat.converged,
        pooled=result.pooled,
    )


# -- aggregator/service.py --------------------------------------------------------------


def sum_tallies(mechanism: Any, tallies: Mapping[str, Any]) -> Any:
    """The tally of all reports in ``tallies`` (tallies of one campaign add)."""
    if kind_of(mechanism) != "frequency":
        total = mechanism.empty_tally()
        for window, tally in tallies.items():
            try:
                total = total + mechanism.check_tally(tally)
            except InvalidParameter as exc:
                raise InvalidParameter(f"window {window!r}: {exc}") from None
        return total
    from client_sdk.mechanisms import Tally

    total = Tally.empty(mechanism.k)
    for window, tally in tallies.items():
        if not isinstance(tally, Tally) or tally.k != mechanism.k:
            raise InvalidParameter(
                f"window {window!r}: expected a tally over {mechanism.k} values, got {tally!r}"
            )
        total = total + tally
    return total


def raw_frequency_trend(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int
) -> list[FrequencyTrendWindow]:
    """Per window (in the given order): ``n`` and the raw unbiased frequencies with their
    closed-form standard errors, both None below ``min_reports``; no smoothed values yet."""
    from aggregator.estimate import debias

    rows = []
    for window, tally in tallies.items():
        n = tally.n
        freqs: list[float] | None = None
        errs: list[float] | None = None
        if n >= max(1, min_reports):
            counts = debias(mechanism, tally)
            var = mechanism.count_variance(n, np.clip(counts, 0, n))
            freqs = (counts / n).tolist()
            errs = (np.sqrt(np.maximum(var, 0)) / n).tolist()
        rows.append(FrequencyTrendWindow(window, n, freqs, errs, None, None))
    return rows


def smooth_frequency_trend(rows: list[FrequencyTrendWindow]) -> Smoothed | None:
    """The smoother (:mod:`aggregator.smooth`) over raw trend rows; None when no window has an
    estimate. A zero standard error (only a degenerate mechanism gives one) is replaced by the
    smallest positive one of its window."""
    shown = [r for r in rows if r.frequencies is not None]
    if not shown:
        return None
    k = len(shown[0].frequencies or ())
    missing = [math.nan] * k
    y = np.array([r.frequencies or missing for r in rows], dtype=float)
    se = np.array([r.std_errors or missing for r in rows], dtype=float)
    reports = np.array([max(1, r.n) for r in rows], dtype=float)
    zero = se <= 0
    if zero.any():
        floor = np.where(se > 0, se, np.inf).min(axis=1, keepdims=True)
        floor = np.where(np.isfinite(floor), floor, 1.0 / reports[:, None])
        se = np.where(zero, floor, se)
    return smooth_series(y, se, reports=reports)


def with_smoothed_frequencies(rows: list[FrequencyTrendWindow]) -> list[FrequencyTrendWindow]:
    """``rows`` with ``smoothed_frequencies``/``smoothed_std_errors`` filled in (None where the
    raw ones are None)."""
    sm = smooth_frequency_trend(rows)
    if sm is None:
        return rows
    return [
        FrequencyTrendWindow(
            r.window,
            r.n,
            r.frequencies,
            r.std_errors,
            sm.mean[t].tolist(),
            sm.std_error[t].tolist(),
        )
        if r.frequencies is not None
        else r
        for t, r in enumerate(rows)
    ]


def frequency_trend(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int, *, smoothing: bool = True
) -> list[FrequencyTrendWindow]:
    """The categorical trend: raw unbiased frequencies per window and, with ``smoothing``, the
    smoothed ones beside them."""
    rows = raw_frequency_trend(mechanism, tallies, min_reports)
    return with_smoothed_frequencies(rows) if smoothing else rows
