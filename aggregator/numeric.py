"""Estimates of numeric campaigns: a mean with its interval, or a distribution with quantiles.

``estimate_numeric(mech, tally)`` turns the exact tally of a numeric mechanism
(``client_sdk.mechanisms.numeric``) into a typed result:

* mean mechanisms (``duchi``, ``1bitmean``, ``piecewise``, ``hybrid``, ``alpha_point``): a
  :class:`MeanEstimate`. ``mean`` is the average of the per-report unbiased estimates, computed
  exactly from the integer tally; ``std_error`` is ``sqrt(s**2 / n)`` with ``s**2`` the sample
  variance of those per-report estimates (also exact from the tally). For a fixed population
  this over-states the true standard error by at most the spread of the clipped values
  themselves (``E[s**2] = mean of Var[report | x_i] + population variance of x``), so intervals
  are conservative; in the iid model it is exact. ``s**2`` is floored at the mechanism's exact
  ``Var[report | x]`` at the estimate clamped to the bounds: where the reports barely vary
  (values at a bound at a high epsilon, a few reports) ``s**2`` collapses toward 0 and the
  interval with it. ``worst_case_std_error`` is the formula's bound ``sqrt(max_x Var / n)``.
* ``square_wave``: a :class:`DistributionEstimate` by EMS (expectation maximisation with a
  binomial smoothing step, Li et al., SIGMOD 2020) over the mechanism's exact channel (inputs:
  the grid points, or the integers in the bounds when the campaign declares ``integer``: then
  the estimate has atoms, :class:`IntegerChannel`), then
  ``k`` plain EM steps without smoothing, ``k`` chosen from :data:`REFINEMENT_STEPS` by held-out
  likelihood on the reports themselves (:func:`choose_refinement`: two halves of the output
  histogram by binomial thinning, a fixed seed, so the estimate is a function of the tally).
  Quantile intervals come from a multinomial bootstrap of the output histogram (each replicate
  re-runs EMS warm-started from the EMS estimate, then the same ``k`` EM steps), widened for
  the bias the bootstrap cannot see (:func:`widen_interval`: the percentile interval moved out
  by how far a less smoothed fit, :data:`RELAXED_STEPS` more EM steps, moves the answer,
  hulled with the basic bootstrap interval; a grid quantile's ends then go out to whole bins).

Formulas and choices: docs/MECHANISMS.md §19.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aggregator.errors import NotEnoughReports
from aggregator.estimate import z_value
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import MeanMechanism, NumericMechanism, NumericTally, SquareWave

#: Bootstrap replicates behind a distribution's quantile intervals.
DEFAULT_BOOTSTRAP = 50
#: Most replicates one estimate runs (each is a full EMS reconstruction; more only costs time,
#: and an absurd count would first try to allocate every replicate's histogram at once).
MAX_BOOTSTRAP = 10_000
#: EMS stops when the log-likelihood (summed over reports) changes by less than this.
EMS_TOLERANCE = 1e-3
#: ... or after this many iterations.
EMS_MAX_ITERATIONS = 5000
#: Candidate numbers of plain EM steps after EMS (0 = EMS alone); :func:`choose_refinement`.
REFINEMENT_STEPS = (0, 3, 10, 30, 100, 300, 1000)
#: Seed of the binomial split behind :func:`choose_refinement` (fixed: the estimate is a
#: deterministic function of the tally).
REFINEMENT_SPLIT_SEED = 15
#: Plain EM steps after the estimate behind the *relaxed* fit whose distance from the estimate
#: is the intervals' bias allowance (:func:`widen_interval`): the most the refinement rule
#: would ever add, so the relaxed fit is less smoothed than any estimate the rule can choose.
RELAXED_STEPS = max(REFINEMENT_STEPS)


def widen_interval(
    value: Any, low: Any, high: Any, allowance: Any
) -> tuple[np.ndarray, np.ndarray]:
    """A bootstrap interval widened for the bias the bootstrap does not carry (elementwise).

    The percentile interval ``[low, high]`` (hulled with ``value``) carries the reports'
    randomness but not EMS's smoothing bias: replicates are smoothed as the estimate is, so
    they scatter around the estimate's biased value, not around the truth. Two corrections,
    hulled: (1) the interval moved out on both sides by ``|allowance|``, how far the answer
    moves when the smoothing is relaxed (:data:`RELAXED_STEPS` plain EM steps more: a fit with
    less smoothing bias and more noise; the sign of that move is not trusted, so both sides),
    and (2) the *basic* bootstrap interval ``[2 value - high, 2 value - low]``, which reflects
    the replicates' shift from the estimate onto the estimate's shift from the truth (a biased
    estimator's replicates are biased again, as with mass piled against a bound). Measured in
    docs/MECHANISMS.md section 19.5 (``bench/quantile_coverage.py``).
    """
    v = np.asarray(value, dtype=float)
    lo = np.minimum(np.asarray(low, dtype=float), v)
    hi = np.maximum(np.asarray(high, dtype=float), v)
    a = np.abs(np.asarray(allowance, dtype=float))
    return np.minimum(lo - a, 2 * v - hi), np.maximum(hi + a, 2 * v - lo)


def _check_level(level: float) -> float:
    z_value(level)  # validates
    return float(level)


@dataclass(frozen=True)
class MeanEstimate:
    """The mean of a numeric campaign's clipped values, estimated from ``n`` reports."""

    mechanism: str
    n: int
    mean: float
    std_error: float
    worst_case_std_error: float
    bounds: tuple[float, float]

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Normal-approximation interval ``mean +- z * std_error``."""
        z = z_value(level)
        return (self.mean - z * self.std_error, self.mean + z * self.std_error)

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        low, high = self.ci(level)
        return {
            "kind": "mean",
            "mechanism": self.mechanism,
            "n": self.n,
            "mean": self.mean,
            "std_error": self.std_error,
            "worst_case_std_error": self.worst_case_std_error,
            "ci": {"level": level, "low": low, "high": high},
            "bounds": list(self.bounds),
        }


@dataclass(frozen=True)
class QuantileEstimate:
    """Quantile ``q`` of the distribution with a bootstrap percentile interval at ``level``."""

    q: float
    value: float
    low: float
    high: float
    level: float


def _quantile_of(edges: np.ndarray, freqs: np.ndarray, q: float) -> float:
    """Quantile ``q`` of a histogram with mass spread uniformly inside each bin."""
    cum = np.concatenate(([0.0], np.cumsum(freqs)))
    total = cum[-1]
    target = q * total
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(max(k, 1), len(freqs))
    mass = freqs[k - 1]
    if mass <= 0:
        return float(edges[k - 1])
    return float(edges[k - 1] + (target - cum[k - 1]) / mass * (edges[k] - edges[k - 1]))


def check_quantile(q: object) -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
        raise InvalidParameter(f"a quantile must be a number in [0, 1], got {q!r}")
    return float(q)


@dataclass(frozen=True, eq=False)
class DistributionEstimate:
    """An estimated histogram: ``frequencies[k]`` of the values lie in ``[edges[k], edges[k+1])``.

    ``centers[k]`` is the value bin ``k`` stands for (used by :attr:`mean`); ``replicates`` are
    bootstrap frequency vectors (rows), used for intervals; ``refinement_steps`` records how
    many plain EM steps followed EMS (Square Wave); ``relaxed`` (Square Wave with replicates)
    is the less smoothed fit whose distance from the estimate widens the intervals
    (:func:`widen_interval`). Frequencies are non-negative and sum to 1.
    """

    mechanism: str
    n: int
    edges: np.ndarray
    frequencies: np.ndarray
    centers: np.ndarray
    replicates: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: Plain EM steps after EMS (Square Wave: :func:`choose_refinement`; 0 for other estimates).
    refinement_steps: int = 0
    #: True when the mass of bin ``k`` sits *at* ``centers[k]`` (an integer-valued Square Wave
    #: campaign: bins are ``[v - 1/2, v + 1/2]`` around each integer ``v`` for display), not
    #: spread across the bin: then :meth:`cdf` is a step function and :meth:`quantile` the
    #: inverted CDF (the smallest ``v`` with ``F(v) >= q``).
    atoms: bool = False
    #: The estimate after :data:`RELAXED_STEPS` more plain EM steps (less smoothing bias, more
    #: noise), or None: then intervals are the bootstrap's alone (percentile intervals).
    relaxed: np.ndarray | None = None

    @property
    def mean(self) -> float:
        return float(self.frequencies @ self.centers)

    def cdf(self, x: float) -> float:
        """Estimated fraction of values below ``x`` (at or below ``x`` for atoms)."""
        return float(self.cdf_many(np.asarray([x], dtype=float))[0])

    def cdf_many(self, xs: np.ndarray) -> np.ndarray:
        """:meth:`cdf` at every point of ``xs`` (one pass)."""
        cum = np.concatenate(([0.0], np.cumsum(self.frequencies)))
        out: np.ndarray
        if self.atoms:
            out = cum[np.searchsorted(self.centers, xs, side="right")]
        else:
            out = np.interp(xs, self.edges, cum)
        return out

    def _quantile(self, freqs: np.ndarray, q: float) -> float:
        if not self.atoms:
            return _quantile_of(self.edges, freqs, q)
        cum = np.cumsum(freqs)
        k = int(np.searchsorted(cum, q * cum[-1] * (1 - 1e-12), side="left"))
        return float(self.centers[min(k, self.centers.size - 1)])

    def quantile(self, q: float, level: float = 0.95) -> QuantileEstimate:
        """Quantile ``q`` with its interval (a point interval if no replicates).

        The bootstrap percentile interval; with ``relaxed`` widened by :func:`widen_interval`
        for the smoothing bias the bootstrap does not carry, a grid estimate's ends then out to
        the edges of the bins they fall in (the grid is the estimate's resolution), cut to the
        bounds. With atoms the quantile is an integer, and so are the interval's ends: the
        replicate quantiles at or outside the interpolated percentiles (never narrower than
        them), moved by integers.
        """
        q = check_quantile(q)
        level = _check_level(level)
        value = self._quantile(self.frequencies, q)
        if self.replicates.shape[0] < 2:
            return QuantileEstimate(q, value, value, value, level)
        boot = np.array([self._quantile(row, q) for row in self.replicates])
        tails = ((1 - level) / 2, (1 + level) / 2)
        if self.atoms:
            low = np.quantile(boot, tails[0], method="lower")
            high = np.quantile(boot, tails[1], method="higher")
        else:
            low, high = np.quantile(boot, tails)
        low, high = min(float(low), value), max(float(high), value)
        if self.relaxed is not None:
            allowance = self._quantile(self.relaxed, q) - value
            wide = widen_interval(value, low, high, allowance)
            low, high = float(wide[0]), float(wide[1])
            if not self.atoms:
                last = self.frequencies.size
                k = int(np.searchsorted(self.edges, low, side="right")) - 1
                low = min(low, float(self.edges[min(max(k, 0), last)]))
                k = int(np.searchsorted(self.edges, high, side="left"))
                high = max(high, float(self.edges[min(max(k, 0), last)]))
            low = min(max(low, float(self.edges[0])), value)
            high = max(min(high, float(self.edges[-1])), value)
        return QuantileEstimate(q, value, low, high, level)

    def frequency_intervals(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Per-bin intervals (the histogram's whiskers): bootstrap percentile intervals; with
        ``relaxed`` widened by :func:`widen_interval` and cut to [0, 1]."""
        level = _check_level(level)
        if self.replicates.shape[0] < 2:
            return self.frequencies.copy(), self.frequencies.copy()
        low, high = np.quantile(self.replicates, [(1 - level) / 2, (1 + level) / 2], axis=0)
        if self.relaxed is not None:
            low, high = widen_interval(self.frequencies, low, high, self.relaxed - self.frequencies)
            low, high = np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
        return low, high

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        return {
            "kind": "distribution",
            "mechanism": self.mechanism,
            "n": self.n,
            "edges": self.edges.tolist(),
            "frequencies": self.frequencies.tolist(),
            "mean": self.mean,
            "quantiles": {str(q): vars(self.quantile(q, level)) for q in (0.5, 0.9, 0.99)},
            "atoms": (
                [
                    {"value": float(v), "frequency": float(f)}
                    for v, f in zip(self.centers, self.frequencies, strict=True)
                ]
                if self.atoms
                else []
            ),
        }


@dataclass(frozen=True)
class BandChannel:
    """The Square Wave channel without the matrix: ``P[j | i] = high`` on ``[i, i + width)``.

    ``low`` elsewhere; ``inputs`` rows, ``inputs - 1 + width`` outputs. Products with it cost
    O(inputs + outputs) through prefix sums instead of a dense matrix product.
    """

    high: float
    low: float
    width: int
    inputs: int

    @classmethod
    def of(cls, mech: SquareWave) -> BandChannel:
        band = mech.band
        return cls(
            band.high / band.denominator, band.low / band.denominator, band.width, band.positions
        )

    @property
    def outputs(self) -> int:
        return self.inputs - 1 + self.width

    def forward(self, f: np.ndarray) -> np.ndarray:
        """``f @ M`` for rows ``f`` over the inputs: the output distribution."""
        # Output j sums inputs [max(j - width + 1, 0), min(j + 1, inputs)): prefix sums padded
        # with width - 1 zeros in front and the total behind make both ends plain slices.
        w, rows = self.width, f.shape[0]
        cum = np.zeros((rows, self.inputs + 2 * w - 1))
        np.cumsum(f, axis=1, out=cum[:, w : w + self.inputs])
        total = cum[:, w + self.inputs - 1 : w + self.inputs]
        cum[:, w + self.inputs :] = total
        outputs = self.outputs
        return self.low * total + (self.high - self.low) * (
            cum[:, w : w + outputs] - cum[:, :outputs]
        )

    def backward(self, r: np.ndarray) -> np.ndarray:
        """``r @ M.T`` for rows ``r`` over the outputs."""
        cum = np.zeros((r.shape[0], self.outputs + 1))
        np.cumsum(r, axis=1, out=cum[:, 1:])
        band = cum[:, self.width : self.width + self.inputs] - cum[:, : self.inputs]
        return self.low * cum[:, -1:] + (self.high - self.low) * band

    def dense(self) -> np.ndarray:
        m = np.full((self.inputs, self.outputs), self.low)
        for i in range(self.inputs):
            m[i, i : i + self.width] = self.high
        return m


@dataclass(frozen=True, eq=False)
class IntegerChannel:
    """The channel from an integer value to a Square Wave report: the device's randomised
    rounding onto the grid (``v`` at grid position ``pos(v)`` goes to ``floor(pos)`` with
    probability ``1 - frac`` and to ``floor(pos) + 1`` with ``frac``), then the band. Inputs are
    the integers in the bounds; products cost two scatters/gathers plus the band's prefix sums.
    """

    band: BandChannel
    base: np.ndarray
    up: np.ndarray

    @classmethod
    def of(cls, mech: SquareWave) -> IntegerChannel:
        positions = np.array([mech.grid.position(v) for v in mech.support()])
        base = np.minimum(np.floor(positions).astype(np.int64), mech.grid.size - 1)
        return cls(BandChannel.of(mech), base, positions - base)

    @property
    def inputs(self) -> int:
        return int(self.base.size)

    def _to_grid(self, g: np.ndarray) -> np.ndarray:
        # Distinct integers have distinct floors (at most one integer per grid step, checked by
        # SquareWave), so each fancy-indexed += touches every column once.
        grid = np.zeros((g.shape[0], self.band.inputs))
        grid[:, self.base] += g * (1 - self.up)
        grid[:, self.base + 1] += g * self.up
        return grid

    def forward(self, g: np.ndarray) -> np.ndarray:
        """The output distribution of rows ``g`` over the integers."""
        return self.band.forward(self._to_grid(g))

    def backward(self, r: np.ndarray) -> np.ndarray:
        b = self.band.backward(r)
        out: np.ndarray = b[:, self.base] * (1 - self.up) + b[:, self.base + 1] * self.up
        return out


Channel = BandChannel | IntegerChannel | np.ndarray


def _operators(channel: Channel) -> tuple[Any, Any]:
    if isinstance(channel, np.ndarray):
        matrix = channel
        return (lambda f: f @ matrix), (lambda r: r @ matrix.T)
    return channel.forward, channel.backward


def ems(
    channel: Channel,
    counts: np.ndarray,
    *,
    init: np.ndarray | None = None,
    tol: float = EMS_TOLERANCE,
    max_iterations: int = EMS_MAX_ITERATIONS,
) -> np.ndarray:
    """EM with smoothing (Li et al., SIGMOD 2020) for input frequencies given output counts.

    ``channel`` is a :class:`BandChannel`, an :class:`IntegerChannel` (inputs: the integers of
    an integer-valued campaign; the kernel then acts on integer neighbours) or a dense matrix
    ``M[i, j] = P[output j | input i]``;
    ``counts`` is one histogram (1-D) or one per row (2-D, e.g. bootstrap replicates, run
    together). Each iteration: the EM update ``f_i <- f_i sum_j M_ij c_j / (n (f M)_j)``, then
    the smoothing step (binomial kernel ``[1, 2, 1] / 4``; ``[2, 1] / 3`` at the two ends), then
    renormalisation. Stops when every row's log-likelihood changes by less than ``tol``.
    """
    forward, backward = _operators(channel)
    d = channel.shape[0] if isinstance(channel, np.ndarray) else channel.inputs
    c = np.atleast_2d(np.asarray(counts, dtype=float))
    n = c.sum(axis=1, keepdims=True)
    if (n <= 0).any():
        raise InvalidParameter("EMS needs at least one report per histogram")
    f = np.full((c.shape[0], d), 1.0 / d) if init is None else np.tile(init, (c.shape[0], 1))
    previous = np.full(c.shape[0], -np.inf)
    # The output distribution of the current f: the likelihood of one iteration is the next
    # iteration's E-step input, computed once.
    p_out = np.maximum(forward(f), 1e-300)
    for _ in range(max_iterations):
        f = f * backward(c / p_out) / n
        smoothed = np.empty_like(f)
        smoothed[:, 1:-1] = (f[:, :-2] + 2 * f[:, 1:-1] + f[:, 2:]) / 4
        smoothed[:, 0] = (2 * f[:, 0] + f[:, 1]) / 3
        smoothed[:, -1] = (f[:, -2] + 2 * f[:, -1]) / 3
        f = smoothed / smoothed.sum(axis=1, keepdims=True)
        p_out = np.maximum(forward(f), 1e-300)
        loglik = (c * np.log(p_out)).sum(axis=1)
        if np.all(np.abs(loglik - previous) < tol):
            break
        previous = loglik
    return f[0] if np.ndim(counts) == 1 else f


def em_steps(channel: Channel, counts: np.ndarray, f: np.ndarray, steps: int) -> np.ndarray:
    """``steps`` plain EM updates (no smoothing) from ``f``, one row per row of ``counts``.

    Each step does not decrease the log-likelihood (EM's monotonicity); run long it converges
    to the unsmoothed maximum-likelihood estimate, which follows the reports' noise. How many
    steps the data support is :func:`choose_refinement`'s question.
    """
    forward, backward = _operators(channel)
    c = np.atleast_2d(np.asarray(counts, dtype=float))
    n = c.sum(axis=1, keepdims=True)
    g = np.atleast_2d(np.asarray(f, dtype=float)).copy()
    for _ in range(steps):
        g = g * backward(c / np.maximum(forward(g), 1e-300)) / n
        g /= g.sum(axis=1, keepdims=True)
    return g[0] if np.ndim(counts) == 1 else g


def log_likelihood(channel: Channel, counts: np.ndarray, f: np.ndarray) -> float:
    """``sum_j c_j log (f M)_j``: the log-likelihood of one output histogram under ``f``."""
    forward, _ = _operators(channel)
    p = forward(np.atleast_2d(np.asarray(f, dtype=float)))[0]
    return float(np.asarray(counts, dtype=float) @ np.log(np.maximum(p, 1e-300)))


def choose_refinement(
    channel: Channel,
    counts: np.ndarray,
    *,
    candidates: tuple[int, ...] = REFINEMENT_STEPS,
    seed: int = REFINEMENT_SPLIT_SEED,
) -> int:
    """How many plain EM steps after EMS the reports support, by two-fold held-out likelihood.

    EMS's smoothing step is a fixed kernel on grid neighbours: right for smooth densities, too
    strong for spikes (integer-valued telemetry: 47% of Adult ``hours-per-week`` is exactly 40),
    and which of the two a campaign holds is not known in advance. So the reports decide: the
    output histogram is split in two halves by binomial thinning (``c1 ~ Binomial(c, 1/2)``,
    ``c2 = c - c1``: exactly a uniform random split of the reports); on each half EMS runs and
    then plain EM, and after ``k`` steps for every ``k`` in ``candidates`` the other half's
    log-likelihood is recorded. The ``k`` with the largest sum wins (ties: the smaller ``k``).
    Only reports are used (no truth); the seed is fixed, so the choice is a function of the
    tally.
    """
    c = np.asarray(counts, dtype=np.int64)
    first = np.random.default_rng(seed).binomial(c, 0.5)
    halves = np.stack([first, c - first]).astype(float)
    if (halves.sum(axis=1) <= 0).any():
        return 0
    order = sorted(set(candidates))
    g = ems(channel, halves)
    scores = np.zeros(len(order))
    done = 0
    for at, k in enumerate(order):
        g = em_steps(channel, halves, g, k - done)
        done = k
        scores[at] = log_likelihood(channel, halves[1], g[0]) + log_likelihood(
            channel, halves[0], g[1]
        )
    return order[int(np.argmax(scores))]


def _estimate_mean(mech: MeanMechanism, tally: NumericTally) -> MeanEstimate:
    n, s1, s2 = mech.estimate_sums(tally)
    unit = mech.grid.span / mech.grid.size
    mean_index = s1 / n
    # Standard errors are taken in grid units and scaled once: a variance in units of x is
    # unit**2 times larger and overflows for wide bounds (e.g. +-1e300) where the error does not.
    worst_grid = float(mech.worst_case_variance_grid)
    if n > 1:
        sample_var = float((s2 - s1 * s1 / n) / (n - 1))
        # The sample variance collapses where the reports barely vary (values at a bound at a
        # high epsilon, a handful of reports): Duchi's reports then all fall on one side and
        # s**2 is 0 while the true error is not. The mechanism's exact per-report variance at
        # the estimate clamped to the grid, as a frequency oracle's at its clamped count, is a
        # floor that does not collapse; for Duchi and 1BitMean s**2 equals it whenever the
        # estimate lies inside the bounds, so it only acts where the sample variance fails.
        c0, c1, c2 = mech.variance_coefficients
        m = min(max(float(mean_index), 0.0), float(mech.grid.size))
        model_var = c0 + c1 * m + c2 * m * m
        std_error = math.sqrt(max(sample_var, model_var, 0.0) / n) * unit
    else:
        std_error = math.sqrt(worst_grid) * unit
    return MeanEstimate(
        mechanism=mech.name,
        n=n,
        mean=mech.grid.value(float(mean_index)),
        std_error=std_error,
        worst_case_std_error=math.sqrt(worst_grid / n) * unit,
        bounds=mech.bounds,
    )


def square_wave_linear_mean(mech: SquareWave, tally: NumericTally) -> MeanEstimate:
    """The unbiased linear estimate of a Square Wave campaign's mean, with its standard error.

    The band sampler's ``E[j | i] = a + beta i`` holds exactly (``Band.mean``, rationals), and
    the device's randomised rounding makes ``E[i]`` the clipped value's grid position, so
    ``(j - a) / beta`` averaged over reports is unbiased for the mean of the clipped values,
    for any data, epsilon and ``n``. ``std_error`` is from the sample variance of those
    per-report estimates (conservative for a fixed population, as for the mean mechanisms;
    ``n = 1``: the worst case over the grid, at an end since ``Var[j | i]`` is a quadratic
    largest there). It is the interval EMS's bootstrap cannot give where the reports carry
    little information (one report, epsilon near 0, mass at a bound: EMS's smoothing bias and
    a bootstrap spread near zero). Where ``beta`` is not positive (epsilon so small that the
    band's probability rounds to its width's share) the reports say nothing: infinite error.
    """
    band = mech.band
    a = band.mean(0)
    beta = band.mean(1) - a
    n = tally.n
    counts = np.asarray(mech.histogram(tally), dtype=float)
    unit = mech.grid.span / mech.grid.size
    if beta <= 0:
        middle = mech.grid.value(mech.grid.size / 2)
        return MeanEstimate(mech.name, n, middle, math.inf, math.inf, mech.bounds)
    per_report = (np.arange(counts.size) - float(a)) / float(beta)
    mean_index = float(counts @ per_report) / n
    worst = float(max(band.variance(0), band.variance(mech.grid.size)) / beta**2)
    if n > 1:
        sample_var = float(counts @ (per_report - mean_index) ** 2) / (n - 1)
    else:
        sample_var = worst
    return MeanEstimate(
        mechanism=mech.name,
        n=n,
        mean=mech.grid.value(mean_index),
        std_error=math.sqrt(sample_var / n) * unit,
        worst_case_std_error=math.sqrt(worst / n) * unit,
        bounds=mech.bounds,
    )


def grid_edges(mech: NumericMechanism) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, centers)`` of the bins around the grid points: midpoints, ends at the bounds."""
    points = np.array([mech.grid.value(i) for i in range(mech.grid.size + 1)])
    mids = (points[:-1] + points[1:]) / 2
    return np.concatenate(([mech.grid.low], mids, [mech.grid.high])), points


def integer_edges(mech: SquareWave) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, centers)`` of an integer-valued campaign: ``[v - 1/2, v + 1/2]`` around each
    integer ``v`` in the bounds (ends at the bounds); the centers are the integers (atoms)."""
    values = np.asarray(mech.support(), dtype=float)
    mids = values[:-1] + 0.5
    return np.concatenate(([mech.grid.low], mids, [mech.grid.high])), values


def _estimate_distribution(
    mech: SquareWave, tally: NumericTally, bootstrap: int, rng: Any
) -> DistributionEstimate:
    counts = mech.histogram(tally)
    channel: BandChannel | IntegerChannel = (
        IntegerChannel.of(mech) if mech.integer else BandChannel.of(mech)
    )
    smoothed = ems(channel, counts)
    steps = choose_refinement(channel, counts)
    freqs = em_steps(channel, counts, smoothed, steps)
    edges, centers = integer_edges(mech) if mech.integer else grid_edges(mech)
    replicates = np.zeros((0, freqs.size))
    relaxed = None
    if bootstrap > 0:
        gen = np.random.default_rng(rng)
        resampled = gen.multinomial(tally.n, counts / tally.n, size=bootstrap)
        replicates = em_steps(channel, resampled, ems(channel, resampled, init=smoothed), steps)
        relaxed = em_steps(channel, counts, freqs, RELAXED_STEPS)
    return DistributionEstimate(
        mech.name,
        tally.n,
        edges,
        freqs,
        centers,
        replicates,
        steps,
        atoms=mech.integer,
        relaxed=relaxed,
    )


def check_bootstrap(bootstrap: object) -> int:
    """``bootstrap`` if it is a replicate count in ``[0, MAX_BOOTSTRAP]``, else refused."""
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int):
        raise InvalidParameter(f"bootstrap must be an integer >= 0, got {bootstrap!r}")
    if not 0 <= bootstrap <= MAX_BOOTSTRAP:
        raise InvalidParameter(
            f"bootstrap must be an integer >= 0 and at most {MAX_BOOTSTRAP}, got {bootstrap!r}"
        )
    return bootstrap


def estimate_numeric(
    mech: NumericMechanism,
    tally: NumericTally,
    *,
    min_reports: int = 1,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    rng: Any = None,
) -> MeanEstimate | DistributionEstimate:
    """The typed estimate of a numeric campaign from its tally (see the module docstring).

    ``bootstrap`` replicates (distribution mechanisms) and ``rng`` (a seed for them) control
    the quantile intervals. Fewer than ``min_reports`` reports raise :class:`NotEnoughReports`.
    """
    if not isinstance(mech, NumericMechanism):
        raise InvalidParameter(f"expected a numeric mechanism, got {type(mech).__name__}")
    mech.check_tally(tally)
    if isinstance(min_reports, bool) or not isinstance(min_reports, int) or min_reports < 1:
        raise InvalidParameter(f"min_reports must be an integer >= 1, got {min_reports!r}")
    if tally.n < min_reports:
        raise NotEnoughReports(tally.n, min_reports)
    check_bootstrap(bootstrap)
    if isinstance(mech, MeanMechanism):
        return _estimate_mean(mech, tally)
    if isinstance(mech, SquareWave):
        return _estimate_distribution(mech, tally, bootstrap, rng)
    raise InvalidParameter(f"no estimator for numeric mechanism {mech.name!r}")
