"""Measuring post-processing on known data: the error of each method over seeded repetitions.

Used by ``bench/estimate.py`` (which prints the reductions quoted in the README) and by the
statistical tests. The true values are simulated through the mechanism's own ``perturb_many``
and ``tally``, exactly what devices and the collector do; they never leave this process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aggregator.estimate import Estimate, estimate
from aggregator.postprocess import POSTPROCESSORS, postprocess
from client_sdk.mechanisms import GeneralizedRR, Mechanism, Tally, UnaryEncoding


def sample_tally(mechanism: Mechanism, counts: np.ndarray, rng: np.random.Generator) -> Tally:
    """A tally of ``counts[x]`` devices holding each x, drawn from its exact distribution.

    GRR/RR: the output histogram is a sum of independent multinomials, one per input row of the
    channel (built from the mechanism's own ``p*``/``q*``). Unary encoding (OUE, SUE): bits
    are independent given the value, so each support count is
    ``Bin(c_v, p*) + Bin(n - c_v, q*)``. These are the tally's exact laws, with no per-report
    work. Every other mechanism goes through its own ``perturb_many`` and ``tally``, exactly
    what devices and the collector do.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    p, q = mechanism.p_star, mechanism.q_star
    k = mechanism.k
    if isinstance(mechanism, GeneralizedRR):
        support = np.zeros(k, dtype=np.int64)
        for x in np.flatnonzero(counts):
            kept = int(rng.binomial(counts[x], p))
            others = rng.multinomial(counts[x] - kept, np.full(k - 1, 1.0 / (k - 1)))
            support += np.insert(others, x, kept)
        return Tally(n, support)
    if isinstance(mechanism, UnaryEncoding):
        support = rng.binomial(counts, p) + rng.binomial(n - counts, q)
        return Tally(n, support.astype(np.int64))
    indices = np.repeat(np.arange(k), counts)
    return mechanism.tally(mechanism.perturb_many(indices, rng=rng))


@dataclass(frozen=True)
class MethodErrors:
    """Per repetition, the mean squared error of each method's frequencies (paired draws)."""

    mechanism: str
    epsilon: float
    n: int
    mse: dict[str, np.ndarray]

    def reduction(self, method: str, baseline: str = "none") -> tuple[float, float]:
        """Relative MSE reduction of ``method`` vs ``baseline`` and its standard error.

        ``1 - mean(mse_method) / mean(mse_baseline)``; the standard error is the delta method
        over the paired repetitions.
        """
        a, b = self.mse[method], self.mse[baseline]
        reps = a.size
        ma, mb = float(a.mean()), float(b.mean())
        # Var of the ratio ma/mb by the delta method on paired samples.
        cov = np.cov(a, b, ddof=1) / reps
        ratio = ma / mb
        var = (cov[0, 0] - 2 * ratio * cov[0, 1] + ratio**2 * cov[1, 1]) / mb**2
        return 1 - ratio, math.sqrt(max(float(var), 0.0))

    def paired_test(self, method: str, fraction: float, baseline: str = "none") -> float:
        """z statistic of ``mean((1 - fraction) mse_baseline - mse_method) > 0``.

        Large positive: ``method`` lowers the MSE by more than ``fraction`` (one-sided).
        """
        diff = (1 - fraction) * self.mse[baseline] - self.mse[method]
        se = float(diff.std(ddof=1)) / math.sqrt(diff.size)
        return float(diff.mean()) / se if se > 0 else math.inf * np.sign(diff.mean())


def method_errors(
    mechanism: Mechanism,
    true_indices: np.ndarray,
    *,
    repetitions: int,
    seed: int,
    methods: Sequence[str] = tuple(POSTPROCESSORS),
    extra: Mapping[str, Callable[[Estimate, dict[str, np.ndarray]], np.ndarray]] | None = None,
) -> MethodErrors:
    """Perturb ``true_indices`` ``repetitions`` times and score every method on each draw.

    ``extra``: further estimators scored on the same draws, by name; each gets the estimate
    and the frequencies the named ``methods`` gave on that draw, and returns frequencies.
    """
    truth = np.bincount(true_indices, minlength=mechanism.k) / true_indices.size
    rng = np.random.default_rng(seed)
    extra = dict(extra or {})
    out: dict[str, list[float]] = {m: [] for m in [*methods, *extra]}
    for _ in range(repetitions):
        tally = mechanism.tally(mechanism.perturb_many(true_indices, rng=rng))
        est = estimate(mechanism, tally)
        freqs = {m: postprocess(est, m).counts / tally.n for m in methods}
        for name, fn in extra.items():
            freqs[name] = fn(est, freqs)
        for m, f in freqs.items():
            out[m].append(float(np.mean((f - truth) ** 2)))
    return MethodErrors(
        mechanism=mechanism.name,
        epsilon=mechanism.epsilon,
        n=int(true_indices.size),
        mse={m: np.asarray(v) for m, v in out.items()},
    )
