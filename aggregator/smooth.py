"""Per-window estimates that borrow strength across windows: a local-level Kalman smoother.

Each window's raw unbiased frequency ``y_t`` of a value has a known variance ``s_t^2`` (the
closed form ``(v0 + beta f)/n_t``, what the trend's ``std_errors`` show). Telemetry
distributions move slowly, so the true frequency is modelled per value as a random walk

    theta_t = theta_(t-1) + w_t,   w_t ~ N(0, tau^2)     (process)
    y_t     = theta_t + e_t,       e_t ~ N(0, s_t^2)     (the window's raw estimate)

and the smoothed estimate is the posterior mean of ``theta_t`` given *all* windows (Kalman
filter forward, Rauch-Tung-Striebel smoother backward), with its posterior standard error.

* ``tau`` is fitted per value by maximum marginal likelihood (empirical Bayes) over a grid
  that includes 0 (a constant frequency, full pooling).
* Abrupt changes: a window whose raw estimate lies more than ``BREAK_Z`` predictive standard
  errors from the filter's prediction starts a new level (the process variance there is made
  diffuse), so a step is followed at once instead of being smeared over many windows.
  ``BREAK_Z = 4.5`` keeps false breaks rare (two-sided normal tail 7e-6 per value and window).
* Windows without an estimate (below the minimum reports) are skipped by the filter and get a
  prediction only.

Smoothed values are *not* unbiased per window (they trade a little bias for much less
variance); the raw estimates stay alongside them, labelled. Reads only raw estimates: the
privacy guarantee is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from client_sdk.errors import InvalidParameter

#: Standardised innovation beyond which a window starts a new level.
BREAK_Z = 4.5
#: Process standard deviations tried, as multiples of the median window standard error.
TAU_GRID = np.concatenate([[0.0], np.geomspace(0.01, 3.0, 12)])
#: Prior variance of a new level (diffuse), relative to the largest window variance.
DIFFUSE = 1e6


@dataclass(frozen=True)
class Smoothed:
    """Smoothed per-window values of k series (T windows x k values).

    ``mean``/``std_error``: posterior mean and standard error of each window's true value given
    every window; ``filtered``/``filtered_std_error``: given the windows up to and including
    that one (what was known then); ``tau``: fitted process standard deviation per value;
    ``breaks``: (window position, value index) where a new level started.
    """

    mean: np.ndarray
    std_error: np.ndarray
    filtered: np.ndarray
    filtered_std_error: np.ndarray
    tau: np.ndarray
    breaks: tuple[tuple[int, int], ...]


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
    if obs.all():
        # Every window observed (the usual trend): the same arithmetic as the general loop
        # below, without its masks and written into the outputs in place; innovations and
        # their variances are taken after the loop (``yy[t] - pm[t]``, ``pp[t] + rr[t]``: the
        # same operations on the same numbers).
        s, innov = np.empty(shape), np.empty(shape)
        pp[0] = p
        pm[0] = m
        rows = zip(pp, fp, fm, pm, yy, rr, strict=True)
        for t, (pt, ft, mt, prior, yt, rt) in enumerate(rows):
            if t > 0:
                np.add(fp[t - 1], qq[t], out=pt)
                prior[...] = fm[t - 1]
            np.add(pt, rt, out=s)
            np.subtract(yt, prior, out=innov)
            np.divide(pt, s, out=mt)
            np.multiply(mt, innov, out=mt)
            np.add(prior, mt, out=mt)
            np.divide(rt, s, out=innov)
            np.multiply(pt, innov, out=ft)
        innovations = yy - pm
        totals = pp + rr
    else:
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
            # p r / s, not p - gain p: after a diffuse prediction (p = DIFFUSE times the largest
            # r) a window with a much smaller r has gain rounding to 1 and p - gain p to 0, a
            # posterior variance of 0 (and 0/0 in the smoother below); p r / s keeps its
            # relative precision.
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
    pm, pp, fm, fp, _, zs = _filter(y, r, tau**2, no_reset[:, 0, :])
    reset = np.abs(zs) > break_z
    if reset.any():
        tau = fit(reset[:, None, :])
        *_, zs = _filter(y, r, tau**2, reset)
        reset = reset | (np.abs(zs) > break_z)
        pm, pp, fm, fp, _, _ = _filter(y, r, tau**2, reset)
    # (Without a break the filter above already ran with this tau and no reset.)
    # Rauch-Tung-Striebel backward pass (local level: transition 1).
    sm, sp = fm.copy(), fp.copy()
    gains = fp[:-1] / pp[1:]
    squares = gains**2
    for t in range(t_len - 2, -1, -1):
        sm[t] = fm[t] + gains[t] * (sm[t + 1] - pm[t + 1])
        sp[t] = fp[t] + squares[t] * (sp[t + 1] - pp[t + 1])
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
