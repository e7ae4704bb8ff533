"""Consistency post-processing of unbiased count estimates (Wang et al., NDSS 2020).

Privacy: post-processing reads only the tally (perturbed reports) and public mechanism
constants, so it never changes the epsilon-LDP guarantee (the post-processing property of
differential privacy). It trades the unbiasedness of the raw estimates for lower error:
every method except ``none`` is biased, so confidence intervals are always computed from the
raw estimates (docs/MECHANISMS.md §13).

Methods (the explicit registry :data:`POSTPROCESSORS`, chosen per query by name):

* ``none``: the raw unbiased counts ``(C_v - n q*) / (p* - q*)``; may be negative.
* ``clip``: Base-Pos, negative counts set to 0 (sum unconstrained, biased upwards).
* ``norm-sub``: Norm-Sub exactly as docs/MECHANISMS.md §11: clamp negatives, subtract a
  common delta from the positive entries, iterate until non-negative and summing to ``n``.
* ``base-cut``: counts at or below the significance threshold ``z_(1-alpha/k) sigma0`` set to 0,
  the rest kept raw (sum unconstrained).
* ``mle``: maximum likelihood over the probability simplex by expectation-maximisation
  (iterative Bayesian update, IBU) with the mechanism's channel built from its own ``p*``/``q*``;
  see :func:`mle_frequencies` for the likelihood it maximises.
* ``eb``: empirical Bayes (``aggregator.shrinkage.eb_frequencies``, docs/MECHANISMS.md §23): the
  posterior mean under a prior fitted nonparametrically to the k raw estimates when BIC gives
  very strong evidence for that pooled model, else ``mle``; its description says whether it
  ``pooled``.
* ``eb-joint``: ``eb``'s choice, but where ``eb`` returns ``mle`` it returns the posterior mean
  under the flat prior on the simplex with the mechanism's exact joint covariance
  (``aggregator.joint_shrinkage``, docs/MECHANISMS.md §23); ``iterations``/``converged``
  describe its expectation-propagation fit.
* ``auto`` (**the default**): ``eb``'s pooled posterior mean where BIC pools; else, where a value
  at the uniform frequency ``1/k`` is within ``FLAT_BELOW_SDS`` (7) standard errors of 0, the
  joint flat-prior posterior mean (as ``eb-joint``); else ``mle``
  (``aggregator.shrinkage.auto_frequencies``), except that where the tally keeps its report
  patterns (an SS campaign ``auto`` created with ``patterns``, a
  :class:`~client_sdk.mechanisms.tally.PatternTally`) that last branch is the pattern MLE, the
  maximiser of the exact likelihood of every report (:mod:`aggregator.pattern`); ``chosen``
  says which (``pooled``, ``flat``, ``mle`` or ``pattern``).
* ``pattern`` (:data:`PATTERN_METHOD`): the pattern MLE; from the tally when it keeps the
  patterns, else from the windows' histograms (:func:`aggregator.service.estimate_range`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from aggregator.estimate import Estimate, binomial_critical_z, upper_z
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism, Tally

#: Significance level of ``base-cut`` (and top-k) when the caller gives none.
DEFAULT_ALPHA = 0.05
#: EM stops once the Frank-Wolfe duality gap (an upper bound on how far the log-likelihood is
#: below its maximum, in nats) is at most this. A log-likelihood within 1e-4 nats of the maximum
#: puts the estimate within about sqrt(2e-4) = 0.014 standard errors of the exact maximiser.
DEFAULT_EM_TOLERANCE = 1e-4
#: EM gives up after this many (accelerated) iterations and says so (``converged`` False).
DEFAULT_EM_MAX_ITERATIONS = 10_000
#: Norm-Sub stops when the sum is within this many counts of the target.
NORM_SUB_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PostProcessed:
    """Post-processed counts and how they were obtained.

    ``counts`` estimate the true counts of the ``n`` reporting devices; ``method`` names the
    registry entry applied. ``iterations``/``converged``/``gap`` are set by iterative methods;
    ``pooled`` by ``eb`` (whether it returned the empirical-Bayes posterior mean); ``chosen`` by
    ``auto`` (``pooled``, ``flat``, ``mle`` or ``pattern``: which estimate it returned).
    ``pattern`` (:mod:`aggregator.pattern_answers`) sets ``std_errors`` (of its counts),
    ``patterns`` (distinct report patterns) and ``note``; when it fell back to ``mle``,
    ``method`` is ``mle``, ``requested`` is ``pattern`` and ``note`` says why.
    """

    method: str
    counts: np.ndarray
    iterations: int | None = None
    converged: bool | None = None
    gap: float | None = None
    threshold: float | None = None
    pooled: bool | None = None
    chosen: str | None = None
    requested: str | None = None
    patterns: int | None = None
    std_errors: list[float] | None = None
    note: str | None = None

    def describe(self) -> dict[str, object]:
        """JSON-safe description of what was applied."""
        out: dict[str, object] = {"method": self.method}
        keys = ("iterations", "converged", "gap", "threshold", "pooled", "chosen", "requested")
        for key in (*keys, "patterns", "std_errors", "note"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


# -- array-level methods (known inputs in, known outputs out) ----------------------------------


def clip_to_zero(counts: np.ndarray) -> np.ndarray:
    """Base-Pos: negative entries set to 0."""
    clipped: np.ndarray = np.maximum(np.asarray(counts, dtype=float), 0.0)
    return clipped


def norm_sub(counts: np.ndarray, total: float, *, tol: float = NORM_SUB_TOLERANCE) -> np.ndarray:
    """Norm-Sub (docs/MECHANISMS.md §11): non-negative, sums to ``total``.

    Repeats: clamp negatives to 0, add ``delta = (total - sum of positives) / #positives`` to
    every positive entry; until all entries are >= 0 and the sum is ``total``. When no entry is
    positive (all estimates <= 0) nothing distinguishes the values and every entry becomes
    ``total / k``. Unlike the Euclidean projection onto the simplex, entries that start
    non-positive are never raised (e.g. (-0.1, 0.5) with total 1 gives (0, 1), not (0.2, 0.8)).
    """
    f = np.asarray(counts, dtype=float).copy()
    if f.ndim != 1 or f.size == 0:
        raise InvalidParameter("counts must be a non-empty 1-D array")
    if not math.isfinite(total) or total < 0:
        raise InvalidParameter(f"total must be a finite number >= 0, got {total!r}")
    scale_tol = tol * max(1.0, total)
    for _ in range(f.size + 2):  # each pass either ends or drops at least one entry
        f[f < 0] = 0.0
        positive = f > 0
        if not positive.any():
            return np.full(f.size, total / f.size)
        if abs(f.sum() - total) <= scale_tol and f.min() >= 0:
            return f
        f[positive] += (total - f[positive].sum()) / positive.sum()
        if f.min() >= 0 and abs(f.sum() - total) <= scale_tol:
            return f
    f[f < 0] = 0.0  # unreachable in exact arithmetic; keeps the contract under rounding
    return f * (total / f.sum()) if f.sum() > 0 else np.full(f.size, total / f.size)


def significance_z(mechanism: Mechanism, n: int, alpha: float = DEFAULT_ALPHA) -> float:
    """The z of the significance test over the k values: ``z_(1-alpha/k)``, raised to the exact
    critical value of the support count of a value nobody holds, ``Binomial(n, q*)``, where
    that is larger (few reports and a small ``q*``: a heavier upper tail than a Gaussian's;
    docs/MECHANISMS.md §12). Where no count of ``n`` reports can pass, just above the largest
    possible count (:func:`~aggregator.estimate.binomial_critical_z`)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InvalidParameter(f"significance level alpha must be in (0, 1), got {alpha!r}")
    tail = alpha / mechanism.k
    return max(upper_z(tail), binomial_critical_z(n, mechanism.q_star, tail))


def significance_threshold(mechanism: Mechanism, n: int, alpha: float = DEFAULT_ALPHA) -> float:
    """``z sigma0`` (:func:`significance_z`), ``sigma0 = sqrt(n q*(1-q*)) / (p*-q*)``, the
    standard error of a count nobody holds (docs/MECHANISMS.md §12).

    A count above it is significantly above zero at level ``alpha``, Bonferroni over the k
    values: with no value present, all k estimates stay below it with probability >= 1-alpha.
    """
    z = significance_z(mechanism, n, alpha)
    p, q = mechanism.p_star, mechanism.q_star
    sigma0 = math.sqrt(n * q * (1 - q)) / (p - q)
    return z * sigma0


def base_cut(counts: np.ndarray, threshold: float) -> np.ndarray:
    """Base-Cut: entries at or below ``threshold`` set to 0, the others kept as they are."""
    c = np.asarray(counts, dtype=float)
    return np.where(c > threshold, c, 0.0)


def _support_likelihood_terms(mechanism: Mechanism, tally: Tally) -> tuple[float, float]:
    p, q = mechanism.p_star, mechanism.q_star
    if not 0 <= q < p <= 1:
        raise InvalidParameter(f"mechanism needs 0 <= q* < p* <= 1, got p*={p}, q*={q}")
    return p, q


def water_filling(c: np.ndarray, offset: float) -> np.ndarray | None:
    """The exact maximiser of ``sum_v c_v log(offset + f_v)`` over the simplex, or None.

    The Lagrange (KKT) conditions give ``f_v = max(0, c_v / lam - offset)`` with ``lam`` fixing
    the sum to 1; the support is the values with the largest ``c_v``, found in O(k log k).
    (``L(f) = sum C_v log(q* + (p*-q*) f_v)`` is this with ``offset = q*/(p*-q*)``.)
    """
    order = np.argsort(-c, kind="stable")
    top = np.cumsum(c[order])
    m = np.arange(1, c.size + 1)
    lam = top / (1 + m * offset)
    valid = (c[order] / np.where(lam > 0, lam, np.inf) - offset > 0) & (lam > 0)
    if not valid.any():
        return None
    # The active set is the largest m whose smallest member stays positive.
    size = int(np.flatnonzero(valid)[-1]) + 1
    f = np.maximum(c / lam[size - 1] - offset, 0.0)
    f[order[size:]] = 0.0
    result: np.ndarray = f / f.sum()
    return result


def mle_frequencies(
    mechanism: Mechanism,
    tally: Tally,
    *,
    tol: float = DEFAULT_EM_TOLERANCE,
    max_iterations: int = DEFAULT_EM_MAX_ITERATIONS,
) -> tuple[np.ndarray, int, bool, float]:
    """Frequencies maximising the likelihood of the support counts over the simplex, by EM.

    The likelihood maximised is ``L(f) = sum_v C_v log(q* + (p* - q*) f_v)`` over
    ``f_v >= 0, sum f = 1``, where ``C_v`` are the tally's support counts. This is the
    log-likelihood of the counts under the channel ``A[x, v] = (q* + (p*-q*) [x = v]) / s``,
    ``s = p* + (k-1) q*`` (the expected number of values a report supports):

    * GRR and RR: ``s = 1`` and ``A`` is exactly ``mech.channel()``; the tally is the output
      histogram, multinomial given f, so this is the exact maximum-likelihood estimate.
    * SS: every report supports exactly ``s = d`` values; ``A`` is exactly the law of one value
      picked uniformly from a report's subset, and ``L`` treats the ``n d`` picks as
      independent draws. The maximiser is exact for that composite likelihood; the ``d`` picks
      of one report are in truth dependent, which changes the curvature, not the maximiser's
      consistency.
    * SUE, OUE, OLH, HR: a report supports a random number of values (mean ``s``). ``L`` is
      the Poisson likelihood of counts with means ``E[C_v] = n (q* + (p*-q*) f_v)``, which are
      exact for these mechanisms; the Poisson/independence form is an approximation (it drops
      the information in the non-supporting reports and the correlation between values).

    In every case the score ``(p*-q*) C_v / (q* + (p*-q*) f_v)`` has equal expectation ``n
    (p*-q*)`` for every v at the true f, so the estimate is consistent; it is a valid
    distribution by construction. ``L`` is separable, so its maximiser has a closed form
    (:func:`water_filling`, exact, O(k log k)); it is returned when its Frank-Wolfe gap is
    within ``tol`` (``iterations`` 0). Otherwise (rounding) EM polishes it. EM (IBU) step:
    ``f_x <- f_x g_x / sum_w f_w g_w`` with ``g_x = (p*-q*) C_x / pi_x``, accelerated by
    SQUAREM (Varadhan & Roland 2008) with a monotonicity safeguard. Convergence: the
    Frank-Wolfe gap ``max g - f.g``, an upper bound on ``L(f*) - L(f)`` for this concave
    ``L``, is at most ``tol``. Returns
    ``(f, iterations, converged, gap)``.
    """
    p, q = _support_likelihood_terms(mechanism, tally)
    k = mechanism.k
    d = p - q
    c = tally.support.astype(float)
    f = np.full(k, 1.0 / k)
    if tally.n == 0 or c.sum() == 0:
        return f, 0, True, 0.0

    exact = water_filling(c, q / d)
    if exact is not None:
        # EM polishes only if rounding left the closed form short of the tolerance; a little
        # uniform mass lets it move entries the closed form set to zero.
        gap = _fw_gap(c, q, d, exact)
        if gap <= tol:
            return exact, 0, True, gap
        f = 0.999999 * exact + 1e-6 / k
    return _squarem(c, q, d, f, tol=tol, max_iterations=max_iterations)


def _fw_gap(c: np.ndarray, q: float, d: float, x: np.ndarray) -> float:
    """Frank-Wolfe gap ``max g - x.g`` of ``L(x) = sum c log(q + d x)`` at ``x`` (``g``: its
    gradient); an upper bound on ``max L - L(x)`` over the simplex, ``L`` being concave."""
    g = d * c / (q + d * x)
    return float(g.max() - x @ g)


def _squarem(
    c: np.ndarray, q: float, d: float, f: np.ndarray, *, tol: float, max_iterations: int
) -> tuple[np.ndarray, int, bool, float]:
    """EM (IBU) from the distribution ``f`` for ``L(x) = sum c log(q + d x)``, SQUAREM-accelerated.

    Each iteration takes two EM steps and, when the extrapolated point stays a distribution,
    one more step from it if that does not lose likelihood against the two plain steps (the
    monotonicity safeguard): ``L`` never decreases and every iterate is a distribution. Stops
    when the Frank-Wolfe gap is at most ``tol`` or after ``max_iterations``; returns
    ``(f, iterations, converged, gap)`` as :func:`mle_frequencies` does.
    """

    def step(x: np.ndarray) -> np.ndarray:
        y = x * (d * c / (q + d * x))
        normalised: np.ndarray = y / y.sum()
        return normalised

    def loglik(x: np.ndarray) -> float:
        with np.errstate(divide="ignore"):
            return float(np.dot(c, np.log(q + d * x)))

    gap = _fw_gap(c, q, d, f)
    iterations = 0
    while gap > tol and iterations < max_iterations:
        iterations += 1
        f1 = step(f)
        f2 = step(f1)
        r = f1 - f
        v = f2 - f1 - r
        vnorm = math.sqrt(float(v @ v))
        candidate = f2
        if vnorm > 0:
            # Step length alpha <= -1 (alpha = -1 is two plain EM steps); halve towards -1
            # until the extrapolated point stays a distribution.
            alpha = min(-1.0, -math.sqrt(float(r @ r)) / vnorm)
            trial = f - 2 * alpha * r + alpha * alpha * v
            while trial.min() < 0 and alpha < -1.01:
                alpha = (alpha - 1) / 2
                trial = f - 2 * alpha * r + alpha * alpha * v
            if trial.min() >= 0 and alpha < -1.0:
                candidate = step(trial / trial.sum())
                if loglik(candidate) < loglik(f2):
                    candidate = f2
        f = candidate
        gap = _fw_gap(c, q, d, f)
    return f, iterations, gap <= tol, gap


# -- estimate-level registry ------------------------------------------------------------------

PostProcessor = Callable[[Estimate, float], PostProcessed]


def _none(est: Estimate, alpha: float) -> PostProcessed:
    return PostProcessed("none", np.asarray(est.counts, dtype=float).copy())


def _clip(est: Estimate, alpha: float) -> PostProcessed:
    return PostProcessed("clip", clip_to_zero(est.counts))


def _norm_sub(est: Estimate, alpha: float) -> PostProcessed:
    return PostProcessed("norm-sub", norm_sub(est.counts, float(est.n)))


def _base_cut(est: Estimate, alpha: float) -> PostProcessed:
    threshold = significance_threshold(est.mechanism, est.n, alpha)
    return PostProcessed("base-cut", base_cut(est.counts, threshold), threshold=threshold)


def _mle(est: Estimate, alpha: float) -> PostProcessed:
    f, iterations, converged, gap = mle_frequencies(est.mechanism, est.tally)
    return PostProcessed(
        "mle", f * est.n, iterations=iterations, converged=converged, gap=float(gap)
    )


def _eb(est: Estimate, alpha: float) -> PostProcessed:
    from aggregator.shrinkage import eb_frequencies

    # The fit is not part of the answer: skipped where a bound proves it would not pool.
    result = eb_frequencies(est, need_fit=False)
    return PostProcessed(  # the mle fit's info; None where the answer pooled
        "eb",
        result.frequencies * est.n,
        iterations=result.mle_iterations,
        converged=result.mle_converged,
        gap=result.mle_gap,
        pooled=result.pooled,
    )


def _eb_joint(est: Estimate, alpha: float) -> PostProcessed:
    from aggregator.joint_shrinkage import eb_joint_frequencies

    result = eb_joint_frequencies(est)
    flat = result.flat
    return PostProcessed(
        "eb-joint",
        result.frequencies * est.n,
        iterations=None if flat is None else flat.sweeps,
        converged=None if flat is None else flat.converged,
        pooled=result.pooled,
    )


def _auto(est: Estimate, alpha: float) -> PostProcessed:
    from aggregator.shrinkage import auto_frequencies

    result = auto_frequencies(est, need_fit=False)
    if result.chosen == "mle":
        from aggregator.pattern import SingularInformation
        from aggregator.pattern_answers import fit_patterns, tally_patterns

        hist = tally_patterns(est)
        if hist is not None and hist.n > 0:
            # The tally keeps every report's subset: the exact likelihood's maximiser, 4-8%
            # below the tally mle at epsilon 2 (docs/AGGREGATOR.md "Pattern MLE").
            try:
                fit = fit_patterns(est, hist, "auto")
            except SingularInformation:
                pass  # the patterns do not identify every frequency yet: the mle below
            else:
                return replace(fit, pooled=False, chosen=PATTERN_METHOD)
        # The mle fit auto_frequencies ran; the same numbers as _mle(est, alpha) would give.
        return PostProcessed(
            "auto",
            result.frequencies * est.n,
            iterations=result.mle_iterations,
            converged=result.mle_converged,
            gap=result.mle_gap,
            pooled=False,
            chosen="mle",
        )
    return PostProcessed(
        "auto",
        result.frequencies * est.n,
        iterations=result.sweeps,
        converged=result.converged,
        pooled=result.chosen == "pooled",
        chosen=result.chosen,
    )


#: The named post-processing methods; the query's ``postprocess`` picks one by name.
POSTPROCESSORS: dict[str, PostProcessor] = {
    "none": _none,
    "clip": _clip,
    "norm-sub": _norm_sub,
    "base-cut": _base_cut,
    "mle": _mle,
    "eb": _eb,
    "eb-joint": _eb_joint,
    "auto": _auto,
}

#: What a query applies unless told otherwise: ``auto`` (``eb``'s pooled posterior mean where BIC
#: strongly prefers pooling, the flat-prior posterior mean where noise dominates every value,
#: else ``mle``, or the pattern MLE where the tally keeps its report patterns;
#: aggregator.shrinkage.auto_frequencies). On Adult occupation, education and
#: native-country at epsilon 0.5-4 its error is at most that of ``mle`` in every cell (R = 200,
#: ``python bench/accuracy.py``; docs/AGGREGATOR.md). ``postprocess=mle`` keeps the former default.
DEFAULT_POSTPROCESS = "auto"


#: The post-processing that needs the window's report patterns, not only its tally
#: (:mod:`aggregator.pattern`): served by :func:`aggregator.service.estimate_range` given the
#: windows' pattern histograms (the collector builds them from the stored reports).
PATTERN_METHOD = "pattern"

#: Every method a query may name (HTTP ``postprocess``, ``ldp estimate --postprocess``, the
#: OpenAPI enum, the dashboard): the tally-level registry, then the pattern MLE.
POSTPROCESS_METHODS: tuple[str, ...] = (*POSTPROCESSORS, PATTERN_METHOD)


def check_method(method: object) -> str:
    """``method`` if it names a post-processing method a query may ask for, else a clear
    error."""
    if not isinstance(method, str) or method not in POSTPROCESS_METHODS:
        raise InvalidParameter(
            f"postprocess must be one of {sorted(POSTPROCESS_METHODS)}, got {method!r}"
        )
    return method


def postprocess(
    est: Estimate, method: str = DEFAULT_POSTPROCESS, *, alpha: float = DEFAULT_ALPHA
) -> PostProcessed:
    """Apply the named consistency post-processing to an estimate (see the module docstring).

    Reads only the estimate (tally and public mechanism constants): the privacy guarantee is
    unchanged. ``pattern`` needs the report patterns: a :class:`PatternTally` holds them; for
    any other tally ask :func:`aggregator.service.estimate_range` with ``patterns=``.
    """
    if check_method(method) == PATTERN_METHOD:
        from aggregator.pattern import check_pattern_capable
        from aggregator.pattern_answers import fit_patterns_or_mle, tally_patterns

        check_pattern_capable(est.mechanism)
        hist = tally_patterns(est)
        if hist is not None:
            return fit_patterns_or_mle(est, hist, alpha=alpha)
        raise InvalidParameter(
            "postprocess 'pattern' needs the windows' report patterns, not only a tally: "
            "ask aggregator.estimate_range(..., patterns=...) or the collector"
        )
    return POSTPROCESSORS[method](est, alpha)


def is_exact_channel(mechanism: Mechanism) -> bool:
    """Whether ``mle`` maximises the exact likelihood of the tally (GRR/RR) or a composite one."""
    return mechanism.exact_channel
