"""The per-report pattern MLE for unary encoding: maximum likelihood from pattern histograms.

A tally keeps, per value, how many reports support it. For unary encoding (OUE, SUE) a report is
a k-bit pattern whose bits are independent given the device's value x: bit x is 1 with
probability ``p*``, every other bit with ``q*``. So the probability of a pattern b given x is
``c(|b|) * (r1 if b_x else r0)``, with ``r1 = p*/q*``, ``r0 = (1-p*)/(1-q*)`` and ``c`` not
depending on x, and the exact log-likelihood of the window's reports given frequencies f is

    ``L(f) = sum_b N_b log(r0 + (r1 - r0) sum_{x in b} f_x)``  (+ a constant),

``N_b`` the number of reports with pattern b. The support counts are not sufficient for f (the
tally ``mle`` maximises the Poisson composite likelihood, docs/MECHANISMS.md §23), so the
pattern MLE is more efficient; it needs the *pattern histogram* of the window: at most
``min(n, 2^k)`` cells. Privacy: reads only reports, like every estimator.

Here the histogram is built from report batches (``pattern_histogram``) and L is maximised by EM
(``pattern_mle``). The collector stores tallies only; storing per-window pattern histograms is
what a deployment would need (docs/MECHANISMS.md §23 says how large).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism

#: Mechanisms whose reports are unary patterns with independent bits given the value.
PATTERN_MECHANISMS = frozenset({"oue", "sue"})
#: Largest domain whose pattern histogram is kept as 2^k cells (2^16 cells = 512 KiB of int64).
MAX_PATTERN_K = 16
#: EM stops once the Frank-Wolfe gap of L (an upper bound on L(f*) - L(f), in nats) is this small.
PATTERN_TOLERANCE = 1e-4
PATTERN_MAX_ITERATIONS = 20_000


@dataclass(frozen=True)
class PatternHistogram:
    """Distinct report patterns (rows of a bool matrix, k columns) and how many reports had each."""

    patterns: np.ndarray
    counts: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())


@dataclass(frozen=True)
class PatternFit:
    """Pattern-MLE frequencies (sum to 1) with EM's iterations, convergence and final gap."""

    frequencies: np.ndarray
    iterations: int
    converged: bool
    gap: float


def _check_mechanism(mechanism: Mechanism) -> None:
    if mechanism.name not in PATTERN_MECHANISMS:
        raise InvalidParameter(
            f"the pattern MLE needs independent unary bits ({sorted(PATTERN_MECHANISMS)}), "
            f"got {mechanism.name!r}"
        )


def pattern_histogram(mechanism: Mechanism, batch: np.ndarray) -> PatternHistogram:
    """The histogram of report patterns in a batch of unary-encoding reports.

    Built from the mechanism's own ``supports`` (bit v of a report is whether it supports v).
    """
    _check_mechanism(mechanism)
    k = mechanism.k
    if k > MAX_PATTERN_K:
        raise InvalidParameter(
            f"pattern histograms are kept for k <= {MAX_PATTERN_K} (2^k cells), got k = {k}"
        )
    bits = np.stack([mechanism.supports(batch, v) for v in range(k)], axis=1)
    codes = bits.astype(np.int64) @ (np.int64(1) << np.arange(k, dtype=np.int64))
    unique, counts = np.unique(codes, return_counts=True)
    patterns = ((unique[:, None] >> np.arange(k, dtype=np.int64)) & 1).astype(bool)
    return PatternHistogram(patterns, counts.astype(np.int64))


def pattern_mle(
    p: float,
    q: float,
    hist: PatternHistogram,
    *,
    start: np.ndarray | None = None,
    tol: float = PATTERN_TOLERANCE,
    max_iterations: int = PATTERN_MAX_ITERATIONS,
) -> PatternFit:
    """Maximise the exact pattern log-likelihood ``L(f)`` (module docstring) over the simplex.

    ``p``/``q`` are the per-bit probabilities ``p*``/``q*``. EM (each report's value is the
    missing datum): ``f_x <- f_x g_x``, ``g_x = (1/n) sum_b N_b A_bx / pi_b`` with
    ``A_bx = r1 if b_x else r0`` and ``pi_b = sum_x f_x A_bx``. L is concave in f, so EM
    converges to the maximum (accelerated by SQUAREM with a monotonicity safeguard); it stops
    when the Frank-Wolfe gap ``n (max g - f.g)`` is at most ``tol`` nats. ``start`` (a
    distribution, e.g. the tally ``mle``) is mixed with 1% uniform so every value can move.
    """
    if not 0 < q < p < 1:
        raise InvalidParameter(f"pattern MLE needs 0 < q* < p* < 1, got p*={p}, q*={q}")
    patterns = np.asarray(hist.patterns, dtype=bool)
    counts = np.asarray(hist.counts, dtype=float)
    m, k = patterns.shape
    n = counts.sum()
    if n <= 0:
        return PatternFit(np.full(k, 1.0 / k), 0, True, 0.0)
    r1, r0 = p / q, (1 - p) / (1 - q)
    a = np.where(patterns, r1, r0)  # (m, k)
    f = np.full(k, 1.0 / k) if start is None else 0.99 * np.asarray(start, float) + 0.01 / k
    weights = counts / n

    def gradient(x: np.ndarray) -> np.ndarray:
        grad: np.ndarray = (weights / (a @ x)) @ a
        return grad

    def step(x: np.ndarray) -> np.ndarray:
        y = x * gradient(x)
        out: np.ndarray = y / y.sum()
        return out

    def loglik(x: np.ndarray) -> float:
        return float(weights @ np.log(a @ x))

    iterations = 0
    while True:
        g = gradient(f)
        gap = float(n * (g.max() - f @ g))
        if gap <= tol or iterations >= max_iterations:
            break
        iterations += 1
        # SQUAREM (Varadhan & Roland 2008): extrapolate two EM steps, keep it only if it
        # stays a distribution and does not lower L; else the two plain EM steps.
        f1 = step(f)
        f2 = step(f1)
        r = f1 - f
        v = f2 - f1 - r
        vnorm = float(np.sqrt(v @ v))
        candidate = f2
        if vnorm > 0:
            alpha = min(-1.0, -float(np.sqrt(r @ r)) / vnorm)
            trial = f - 2 * alpha * r + alpha * alpha * v
            while trial.min() < 0 and alpha < -1.01:
                alpha = (alpha - 1) / 2
                trial = f - 2 * alpha * r + alpha * alpha * v
            if trial.min() >= 0 and alpha < -1.0:
                extrapolated = step(trial / trial.sum())
                if loglik(extrapolated) >= loglik(f2):
                    candidate = extrapolated
        f = candidate
    return PatternFit(f, iterations, gap <= tol, gap)


def pattern_frequencies(mechanism: Mechanism, hist: PatternHistogram) -> PatternFit:
    """:func:`pattern_mle` with the mechanism's own ``p*``/``q*``, started at the tally ``mle``."""
    from aggregator.postprocess import mle_frequencies
    from client_sdk.mechanisms import Tally

    _check_mechanism(mechanism)
    tally = Tally(hist.n, (hist.patterns * hist.counts[:, None]).sum(axis=0).astype(np.int64))
    start, _, _, _ = mle_frequencies(mechanism, tally)
    return pattern_mle(mechanism.p_star, mechanism.q_star, hist, start=start)
