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


@dataclass(frozen=True)
class StreamErrors:
    """Raw vs smoothed per-window estimates on simulated streams (see :func:`stream_errors`).

    ``raw_mse``/``smoothed_mse``: per window, the frequency MSE over the k values averaged over
    the repetitions. ``*_coverage``: share of 95% intervals holding the window's true
    frequency. ``*_delays``: per repetition, windows after the step until the estimate of the
    value that moved most leaves the old level by more than 1.96 of its standard errors
    (None: never); the smoothed delay uses the filtered estimate (what was known that day).
    """

    raw_mse: np.ndarray
    smoothed_mse: np.ndarray
    raw_coverage: float
    smoothed_coverage: float
    raw_delays: tuple[int | None, ...]
    smoothed_delays: tuple[int | None, ...]

    @property
    def ratio(self) -> float:
        """Smoothed MSE over raw MSE, averaged over windows."""
        return float(self.smoothed_mse.mean() / self.raw_mse.mean())


def stream_errors(
    mechanism: Mechanism,
    before: np.ndarray,
    after: np.ndarray | None,
    *,
    windows: int,
    step_at: int,
    reports: int,
    repetitions: int,
    seed: int,
) -> StreamErrors:
    """Simulate daily streams and score raw and smoothed per-window estimates.

    Each window's devices are ``reports`` draws from ``before`` (from ``after`` at windows
    ``>= step_at`` when given: a step change), as resampling Adult per day; the window's truth
    is its own devices' frequencies. Tallies come from :func:`sample_tally`, estimates from
    ``aggregator.query.trend_series`` and the smoother.
    """
    from aggregator.query import smooth_trend, trend_rows

    before = np.asarray(before, dtype=float) / np.sum(before)
    target = None if after is None else np.asarray(after, dtype=float) / np.sum(after)
    moved = int(np.argmax(np.abs(target - before))) if target is not None else None
    rng = np.random.default_rng(seed)
    raw_sq = np.zeros(windows)
    smooth_sq = np.zeros(windows)
    covered = [0, 0]
    delays: tuple[list[int | None], list[int | None]] = ([], [])
    for _ in range(repetitions):
        truth = np.empty((windows, mechanism.k))
        tallies = {}
        for t in range(windows):
            w = target if target is not None and t >= step_at else before
            counts = rng.multinomial(reports, w)
            truth[t] = counts / reports
            tallies[f"w{t:04d}"] = sample_tally(mechanism, counts, rng)
        rows = trend_rows(mechanism, tallies, 1)
        raw = np.array([r["frequencies"] for r in rows])
        raw_se = np.array([r["std_errors"] for r in rows])
        sm = smooth_trend(rows)
        assert sm is not None
        raw_sq += ((raw - truth) ** 2).mean(axis=1)
        smooth_sq += ((sm.mean - truth) ** 2).mean(axis=1)
        covered[0] += int((np.abs(raw - truth) <= 1.96 * raw_se).sum())
        covered[1] += int((np.abs(sm.mean - truth) <= 1.96 * sm.std_error).sum())
        if moved is not None and target is not None:
            old, sign = before[moved], np.sign(target[moved] - before[moved])
            for out, est, se in (
                (delays[0], raw[:, moved], raw_se[:, moved]),
                (delays[1], sm.filtered[:, moved], sm.filtered_std_error[:, moved]),
            ):
                seen = [
                    t - step_at
                    for t in range(step_at, windows)
                    if sign * (est[t] - old) > 1.96 * se[t]
                ]
                out.append(seen[0] if seen else None)
    cells = repetitions * windows * mechanism.k
    return StreamErrors(
        raw_mse=raw_sq / repetitions,
        smoothed_mse=smooth_sq / repetitions,
        raw_coverage=covered[0] / cells,
        smoothed_coverage=covered[1] / cells,
        raw_delays=tuple(delays[0]),
        smoothed_delays=tuple(delays[1]),
    )
