"""The per-report pattern MLE: maximum likelihood from pattern histograms (OUE, SUE, SS).

A tally keeps, per value, how many reports support it. For unary encoding (OUE, SUE) a report is
a k-bit pattern whose bits are independent given the device's value x: bit x is 1 with
probability ``p*``, every other bit with ``q*``. So the probability of a pattern b given x is
``c(b) * (r1 if b_x else r0)``, with ``r1 = p*/q*``, ``r0 = (1-p*)/(1-q*)`` and ``c`` not
depending on x. Subset selection has the same structure: a report is a d-subset S, and
``P(S | x) = p / C(k-1, d-1)`` if x is in S, else ``(1-p) / C(k-1, d)``. In both cases the
exact log-likelihood of the window's reports given frequencies f is

    ``L(f) = sum_b N_b log(1 + (rho - 1) sum_{x in b} f_x)``  (+ a constant),

``N_b`` the number of reports with pattern b and ``rho`` the likelihood ratio of a pattern
holding x against one without it (:func:`pattern_ratio`: ``r1/r0`` for unary encoding,
``p (k-d) / ((1-p) d) = e^realised_epsilon`` for SS). The support counts are not sufficient for
f (the tally ``mle`` maximises a Poisson or composite likelihood, docs/MECHANISMS.md §23), so
the pattern MLE is more efficient; it needs the *pattern histogram* of the window: at most
``min(n, 2^k)`` cells (SS: ``min(n, C(k, d))``). Privacy: reads only perturbed reports and
public mechanism constants, like every estimator.

The histogram is built from report batches (``pattern_histogram``, or from wire payloads by
``histogram_of_payloads``), histograms of windows add (``merge_histograms``), L is maximised
by EM (``pattern_mle``) and :func:`pattern_std_errors` gives asymptotic standard errors from the
observed Fisher information on the simplex. The collector builds a window's histogram on demand
from its stored reports (``postprocess=pattern``, docs/AGGREGATOR.md "Pattern MLE").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism
from client_sdk.mechanisms.subset import MAX_PATTERN_K as MAX_PATTERN_K  # re-exported
from client_sdk.mechanisms.subset import SubsetSelection, subset_members
from client_sdk.mechanisms.tally import PatternTally

#: Mechanisms whose report likelihood depends on the value only through one bit per value
#: (unary encoding: independent bits; subset selection: membership in the reported subset).
PATTERN_MECHANISMS = frozenset({"oue", "sue", "ss"})
#: EM stops once the Frank-Wolfe gap of L (an upper bound on L(f*) - L(f), in nats) is this small.
PATTERN_TOLERANCE = 1e-4
PATTERN_MAX_ITERATIONS = 20_000
#: Newton steps tried before EM takes over (it needs a handful; see ``_newton``).
NEWTON_MAX_STEPS = 100
#: Stored payloads are decoded this many at a time when a window's histogram is built.
PAYLOAD_CHUNK = 20_000


class SingularInformation(ValueError):
    """The reports' patterns do not identify every frequency (too few reports, or too few
    distinct patterns): the pattern MLE has no standard errors there."""


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


def pattern_refusal(mechanism: object) -> str | None:
    """Why the pattern MLE cannot serve ``mechanism`` (None: it can).

    It can when the mechanism is one of :data:`PATTERN_MECHANISMS` (a frequency oracle whose
    report likelihood depends on x only through bit x of the report) and ``k <=``
    :data:`MAX_PATTERN_K` (the histogram keeps patterns as ``k``-bit codes).
    """
    name = getattr(mechanism, "name", None)
    k = getattr(mechanism, "k", None)
    if name not in PATTERN_MECHANISMS or getattr(mechanism, "kind", "frequency") != "frequency":
        return (
            f"the pattern MLE needs reports whose likelihood depends on the value only through "
            f"one bit per value ({', '.join(sorted(PATTERN_MECHANISMS))}), got mechanism "
            f"{name!r}; use postprocess 'mle'"
        )
    if not isinstance(k, int) or k > MAX_PATTERN_K:
        return (
            f"pattern histograms are kept for k <= {MAX_PATTERN_K} (2^k cells), got k = {k}; "
            f"use postprocess 'mle'"
        )
    return None


def check_pattern_capable(mechanism: object) -> None:
    """Raise :class:`InvalidParameter` saying why, unless :func:`pattern_refusal` is None."""
    reason = pattern_refusal(mechanism)
    if reason is not None:
        raise InvalidParameter(reason)


def _check_mechanism(mechanism: Mechanism) -> None:
    check_pattern_capable(mechanism)


def pattern_ratio(mechanism: Mechanism) -> float:
    """``rho``: how much likelier a report pattern holding x is under x than under a value
    outside it, from the probabilities the mechanism really uses (its integer thresholds).

    Unary encoding: ``(p*/q*) / ((1-p*)/(1-q*))``; subset selection: ``p (k-d) / ((1-p) d)``
    with ``p = p*`` (= ``e^realised_epsilon``).
    """
    _check_mechanism(mechanism)
    p, q = mechanism.p_star, mechanism.q_star
    if isinstance(mechanism, SubsetSelection):
        k, d = mechanism.k, mechanism.d
        return p * (k - d) / ((1 - p) * d)
    return (p / q) / ((1 - p) / (1 - q))


def _codes(patterns: np.ndarray) -> np.ndarray:
    k = patterns.shape[1]
    codes: np.ndarray = patterns.astype(np.int64) @ (np.int64(1) << np.arange(k, dtype=np.int64))
    return codes


def _from_codes(codes: np.ndarray, counts: np.ndarray, k: int) -> PatternHistogram:
    unique, inverse = np.unique(codes, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=counts, minlength=unique.size)
    patterns = ((unique[:, None] >> np.arange(k, dtype=np.int64)) & 1).astype(bool)
    return PatternHistogram(patterns, np.rint(summed).astype(np.int64))


def pattern_histogram(mechanism: Mechanism, batch: np.ndarray) -> PatternHistogram:
    """The histogram of report patterns in a batch of reports (OUE, SUE, SS; ``k <= 16``).

    Built from the mechanism's own ``supports`` (bit v of a report is whether it supports v).
    """
    _check_mechanism(mechanism)
    k = mechanism.k
    bits = np.stack([mechanism.supports(batch, v) for v in range(k)], axis=1)
    return _from_codes(_codes(bits), np.ones(bits.shape[0]), k)


def merge_histograms(k: int, histograms: Iterable[PatternHistogram]) -> PatternHistogram:
    """The histogram of all reports of ``histograms`` (pattern histograms add, exactly)."""
    parts = [h for h in histograms if h.counts.size]
    if not parts:
        return PatternHistogram(np.zeros((0, k), dtype=bool), np.zeros(0, dtype=np.int64))
    codes = np.concatenate([_codes(np.asarray(h.patterns, dtype=bool)) for h in parts])
    counts = np.concatenate([np.asarray(h.counts, dtype=np.int64) for h in parts])
    return _from_codes(codes, counts.astype(float), k)


def histogram_of_payloads(
    mechanism: Mechanism, payloads: Iterable[object], *, chunk: int = PAYLOAD_CHUNK
) -> PatternHistogram:
    """The pattern histogram of wire payloads (e.g. a window's stored reports), decoded
    ``chunk`` at a time so memory stays flat; raises what ``decode_many`` raises."""
    _check_mechanism(mechanism)
    parts: list[PatternHistogram] = []
    pending: list[object] = []
    for payload in payloads:
        pending.append(payload)
        if len(pending) >= chunk:
            parts.append(pattern_histogram(mechanism, mechanism.decode_many(pending)))
            pending = []
    if pending:
        parts.append(pattern_histogram(mechanism, mechanism.decode_many(pending)))
    return merge_histograms(mechanism.k, parts)


def histogram_of_tally(tally: PatternTally) -> PatternHistogram:
    """The pattern histogram a subset-selection :class:`PatternTally` keeps (its non-empty
    subsets and their counts): what :func:`histogram_of_payloads` would build from the same
    reports, without reading them."""
    members = subset_members(tally.k, tally.d).astype(bool)
    held = np.flatnonzero(tally.patterns)
    return PatternHistogram(members[held], np.asarray(tally.patterns[held], dtype=np.int64))


def pattern_mle(
    p: float,
    q: float,
    hist: PatternHistogram,
    *,
    start: np.ndarray | None = None,
    tol: float = PATTERN_TOLERANCE,
    max_iterations: int = PATTERN_MAX_ITERATIONS,
    newton: bool = True,
) -> PatternFit:
    """Maximise the unary-encoding pattern log-likelihood over the simplex.

    ``p``/``q`` are the per-bit probabilities ``p*``/``q*`` (so ``rho = (p/q)/((1-p)/(1-q))``);
    see :func:`pattern_mle_ratio`.
    """
    if not 0 < q < p < 1:
        raise InvalidParameter(f"pattern MLE needs 0 < q* < p* < 1, got p*={p}, q*={q}")
    rho = (p / q) / ((1 - p) / (1 - q))
    return pattern_mle_ratio(
        rho, hist, start=start, tol=tol, max_iterations=max_iterations, newton=newton
    )


def _design(rho: float, hist: PatternHistogram) -> tuple[np.ndarray, np.ndarray]:
    patterns = np.asarray(hist.patterns, dtype=bool)
    a: np.ndarray = np.where(patterns, rho, 1.0)
    return a, np.asarray(hist.counts, dtype=float)


def pattern_mle_ratio(
    rho: float,
    hist: PatternHistogram,
    *,
    start: np.ndarray | None = None,
    tol: float = PATTERN_TOLERANCE,
    max_iterations: int = PATTERN_MAX_ITERATIONS,
    newton: bool = True,
) -> PatternFit:
    """Maximise the exact pattern log-likelihood ``L(f)`` (module docstring) over the simplex.

    ``rho > 1`` is :func:`pattern_ratio`. EM (each report's value is the missing datum):
    ``f_x <- f_x g_x``, ``g_x = (1/n) sum_b N_b A_bx / pi_b`` with ``A_bx = rho if b_x else 1``
    and ``pi_b = sum_x f_x A_bx``. L is concave in f, so EM converges to the maximum
    (an active-set Newton ascent first, then, if that stalls, EM accelerated by SQUAREM with a
    monotonicity safeguard); it stops when the Frank-Wolfe gap
    ``n (max g - f.g)``, an upper bound on ``L(f*) - L(f)``, is at most ``tol`` nats.
    ``start`` (a distribution, e.g. the tally ``mle``) is mixed with 1% uniform so every value
    can move. ``max_iterations`` caps Newton steps and SQUAREM iterations together;
    ``newton=False`` runs EM alone (the fallback, checked on its own in the tests).
    """
    if not (math.isfinite(rho) and rho > 1):
        raise InvalidParameter(f"pattern MLE needs a likelihood ratio rho > 1, got {rho!r}")
    a, counts = _design(rho, hist)
    m, k = a.shape
    n = counts.sum()
    if n <= 0:
        return PatternFit(np.full(k, 1.0 / k), 0, True, 0.0)
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
        # A sum, not a 1-D ``@``: BLAS threads a long dot product, which stalls on a busy host.
        return float(np.sum(weights * np.log(a @ x)))

    iterations, done = 0, False
    if newton:
        f, iterations, done = _newton(a, weights, n, f, tol, min(NEWTON_MAX_STEPS, max_iterations))
    if done:
        g = gradient(f)
        return PatternFit(f, iterations, True, float(n * (g.max() - f @ g)))
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


def _newton(
    a: np.ndarray, weights: np.ndarray, n: float, f: np.ndarray, tol: float, max_steps: int
) -> tuple[np.ndarray, int, bool]:
    """Active-set Newton ascent of ``L`` on the simplex from ``f``: ``(f, steps, converged)``.

    The free set is the positive entries plus the zero entries whose gradient exceeds
    ``f.g`` (they would rise); the step maximises the quadratic model of ``L`` on it subject
    to ``sum f = 1`` (a (k+1)-square KKT system), is cut at the first entry it would drive
    below 0 (which leaves the free set) and halved until ``L`` does not decrease. Quadratic
    convergence once the active set is found, where EM slows to a crawl when the maximum lies
    on the boundary (a value with frequency 0). Converged: Frank-Wolfe gap ``<= tol``.
    """

    def loglik(x: np.ndarray) -> float:
        return float(np.sum(weights * np.log(a @ x)))

    for steps in range(max_steps):
        pi = a @ f
        g = (weights / pi) @ a
        mean = float(f @ g)
        if n * (float(g.max()) - mean) <= tol:
            return f, steps, True
        free = (f > 0) | (g > mean)
        af = a[:, free]
        hessian = -(af * (weights / pi**2)[:, None]).T @ af
        size = int(free.sum())
        kkt = np.zeros((size + 1, size + 1))
        kkt[:size, :size] = hessian
        kkt[:size, size] = kkt[size, :size] = 1.0
        try:
            solution = np.linalg.solve(kkt, np.concatenate([-g[free], [0.0]]))
        except np.linalg.LinAlgError:
            return f, steps, False
        d = np.zeros_like(f)
        d[free] = solution[:size]
        falling = d < 0
        t = min(1.0, float((f[falling] / -d[falling]).min())) if falling.any() else 1.0
        base = loglik(f)
        while t > 1e-12:
            trial = np.maximum(f + t * d, 0.0)
            trial /= trial.sum()
            if loglik(trial) >= base:
                break
            t /= 2
        else:
            return f, steps, False
        f = trial
    return f, max_steps, False


def pattern_std_errors(rho: float, hist: PatternHistogram, f: np.ndarray) -> np.ndarray:
    """Asymptotic standard errors of the pattern-MLE frequencies ``f`` as estimates of the
    reporting devices' own frequencies (the estimand of every count here), from the observed
    Fisher information of ``L`` restricted to the simplex.

    ``I = sum_b N_b a_b a_b^T / (a_b . f)^2`` (``a_b``: row b of ``A``); ``I^-1`` on the
    simplex is ``Q (Q^T I Q)^-1 Q^T``, ``Q`` an orthonormal basis of the directions that keep
    ``sum f = 1``. That is the covariance around the frequencies of
    the population the devices were drawn from; given the devices' values it is smaller by the
    multinomial sampling part ``(diag f - f f^T) / n``, which is subtracted (as the tally's
    ``count_variance`` holds only the mechanism's noise). Valid for values whose frequency is
    several standard errors from 0; at the boundary it is the error of the interior
    approximation. Multiply by ``n`` for counts.
    """
    a, counts = _design(rho, hist)
    k = a.shape[1]
    n = counts.sum()
    if n <= 0:
        return np.full(k, math.nan)
    x = np.asarray(f, dtype=float)
    pi = a @ x
    info = (a * (counts / pi**2)[:, None]).T @ a
    # An orthonormal basis Q of {v : sum v = 0}; cov = Q (Q^T I Q)^-1 Q^T. (A pseudo-inverse
    # of P I P would have to tell its null eigenvalue from rounding, which it cannot always.)
    basis, _ = np.linalg.qr(np.eye(k)[:, : k - 1] - 1.0 / k)
    restricted = basis.T @ info @ basis
    # Rank by SVD (k <= 16): an exactly singular matrix need not make solve() raise once
    # rounding has touched it, and its "inverse" would be noise.
    try:
        if np.linalg.matrix_rank(restricted) < k - 1:
            raise np.linalg.LinAlgError
        cov = basis @ np.linalg.solve(restricted, basis.T)
    except np.linalg.LinAlgError:
        raise SingularInformation(
            f"the {int(n)} report(s)' {int(np.count_nonzero(counts))} distinct pattern(s) do "
            f"not identify the {k} frequencies (a singular Fisher information)"
        ) from None
    var = np.diag(cov) - x * (1 - x) / n
    se: np.ndarray = np.sqrt(np.maximum(var, 0.0))
    return se


def pattern_frequencies(mechanism: Mechanism, hist: PatternHistogram) -> PatternFit:
    """:func:`pattern_mle_ratio` with the mechanism's own :func:`pattern_ratio`, started at
    the tally ``mle`` (the support counts are the histogram's column sums)."""
    from aggregator.postprocess import mle_frequencies
    from client_sdk.mechanisms import Tally

    rho = pattern_ratio(mechanism)
    tally = Tally(hist.n, (hist.patterns * hist.counts[:, None]).sum(axis=0).astype(np.int64))
    start, _, _, _ = mle_frequencies(mechanism, tally)
    return pattern_mle_ratio(rho, hist, start=start)
