"""Mean mechanisms for a bounded number: Duchi et al., 1BitMean, Piecewise, Hybrid.

All run on the input grid ``i in [0, D]`` (``D = grid``, default 2**16; value
``low + (high - low) i / D``) and report an integer. Each report ``y`` gives an unbiased estimate
``i_hat = (y - a) / beta`` of its (rounded) grid input, with ``a`` and ``beta`` computed exactly
from the thresholds that run, so the mean of the ``i_hat`` is unbiased for the mean of the
clipped values (rounding is unbiased, :mod:`.grid`). ``Var[i_hat | i]`` is an exact quadratic in
``i`` (``variance_grid``); ``variance(x)`` adds the rounding variance and converts to the units
of ``x``. See docs/MECHANISMS.md §19.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.band import Band, BandOutputs
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.grid import DEFAULT_GRID
from client_sdk.mechanisms.numeric.tally import NumericTally
from client_sdk.mechanisms.randomness import (
    SCALE,
    exact_threshold,
    largest_threshold,
    log_ratio,
    ratio_at_most,
)

#: Below this epsilon the Hybrid mechanism is pure Duchi (Wang et al., ICDE 2019: eps* ~ 0.61).
HYBRID_EPSILON_STAR = 0.61


class MeanMechanism(NumericMechanism):
    """A numeric mechanism whose estimator is the mean of per-report unbiased estimates."""

    kind = "mean"

    @abstractmethod
    def estimate_sums(self, tally: NumericTally) -> tuple[int, Fraction, Fraction]:
        """``(n, sum of i_hat, sum of i_hat**2)`` over the reports, exactly (grid units)."""

    @abstractmethod
    def variance_grid(self, i: int) -> Fraction:
        """``Var[i_hat | grid input i]`` exactly, in grid units squared."""

    @cached_property
    def variance_coefficients(self) -> tuple[float, float, float]:
        """``(c0, c1, c2)`` with ``Var[i_hat | i] = c0 + c1 i + c2 i**2`` (exactly quadratic)."""
        v0, v1, v2 = (self.variance_grid(i) for i in (0, 1, 2))
        c2 = (v2 - 2 * v1 + v0) / 2
        c1 = v1 - v0 - c2
        return float(v0), float(c1), float(c2)

    def _exact_coefficients(self) -> tuple[Fraction, Fraction, Fraction]:
        v0, v1, v2 = (self.variance_grid(i) for i in (0, 1, 2))
        c2 = (v2 - 2 * v1 + v0) / 2
        return v0, v1 - v0 - c2, c2

    @cached_property
    def worst_case_variance_grid(self) -> Fraction:
        """``max_i Var[i_hat | i]`` over the grid (a quadratic: endpoints or its vertex)."""
        _, c1, c2 = self._exact_coefficients()
        candidates = {0, self.grid.size}
        if c2 < 0:
            vertex = -c1 / (2 * c2)
            for i in (math.floor(vertex), math.ceil(vertex)):
                if 0 <= i <= self.grid.size:
                    candidates.add(i)
        return max(self.variance_grid(i) for i in candidates)

    @property
    def _unit_squared(self) -> float:
        """``(span / grid size)**2``, the grid step squared in units of ``x**2``: ``inf`` when
        it is beyond floats (bounds near +-1e300), where ``**`` raised OverflowError."""
        unit = self.grid.span / self.grid.size
        return unit * unit

    @property
    def worst_case_variance(self) -> float:
        """Largest per-report variance of the estimate over grid inputs, in units of ``x**2``
        (``inf`` when that exceeds the float range)."""
        return float(self.worst_case_variance_grid) * self._unit_squared

    @property
    def unit_worst_case_variance(self) -> float:
        """The same on the scale ``t in [-1, 1]`` of the papers (n * Var of the mean)."""
        return float(self.worst_case_variance_grid) * (2 / self.grid.size) ** 2

    def variance(self, x: float) -> float:
        """Per-report variance of the estimate for a device holding ``x`` (units of ``x**2``).

        Includes the randomised rounding: ``E[Var[i_hat | i]] + Var[i]``.
        """
        pos = self.grid.position(float(x))
        frac = pos - math.floor(pos)
        c0, c1, c2 = self.variance_coefficients
        rounding = frac * (1 - frac)
        grid_var = c0 + c1 * pos + c2 * (pos * pos + rounding) + rounding
        return grid_var * self._unit_squared

    def variances(self, values: Any) -> Any:
        """:meth:`variance` of every value of an array (NumPy)."""
        import numpy as np

        pos = self.grid.positions(values)
        frac = pos - np.floor(pos)
        c0, c1, c2 = self.variance_coefficients
        rounding = frac * (1 - frac)
        grid_var = c0 + c1 * pos + c2 * (pos * pos + rounding) + rounding
        return grid_var * self._unit_squared

    def mean_variance(self, values: Any) -> float:
        """Exact variance of the estimated mean of ``values`` (one report each)."""
        v = self.variances(values)
        return float(v.sum()) / float(v.size) ** 2


class Duchi(MeanMechanism):
    """Duchi, Jordan, Wainwright (FOCS 2013 / JASA 2018), one dimension.

    Report one bit, ``P[1 | i] = (T_lo + i * delta) / 2**64`` with ``T_lo + D * delta = T_hi``
    and ``T_lo = 2**64 - T_hi``: affine in the input as the paper's
    ``1/2 + t (e^eps-1)/(2(e^eps+1))``.
    Privacy: ``P[1 | i]`` grows and ``P[0 | i]`` shrinks with ``i``, so the worst ratio is between
    the extreme inputs: ``T_hi / T_lo <= e^epsilon`` (``T_hi`` the largest threshold with that,
    lowered to make ``delta`` an integer). Utility: ``Var[i_hat | i] = pi (1 - pi) / beta**2``,
    ``beta = delta / 2**64``; on ``t in [-1, 1]`` this is the paper's ``B**2 - t**2``.
    The paper's report is ``+-B``; ours is the bit (the same information, an exact integer).
    """

    name = "duchi"
    tally_fields = ("ones",)

    def __init__(self, *, epsilon: float, bounds: Any, grid: int = DEFAULT_GRID) -> None:
        super().__init__(epsilon=epsilon, bounds=bounds, grid=grid)
        d = self.grid.size
        e = math.exp(self.epsilon)
        high = largest_threshold(lambda t: ratio_at_most(t, SCALE - t, self.epsilon), e / (1 + e))
        # Largest T <= high with 2T = 2**64 (mod D): then delta = (2T - 2**64) / D is an integer.
        g = math.gcd(2, d)
        m = d // g
        target = ((SCALE // g) * pow(2 // g, -1, m)) % m if m > 1 else 0
        high -= (high - target) % m if m > 1 else 0
        if 2 * high - SCALE < d:
            raise InvalidParameter(f"epsilon={self.epsilon!r} is too small for a grid of {d}")
        self.threshold_high = high
        self.threshold_low = SCALE - high
        self.delta = (2 * high - SCALE) // d

    def threshold(self, i: int) -> int:
        return self.threshold_low + i * self.delta

    @property
    def realised_epsilon(self) -> float:
        return log_ratio(self.threshold_high, self.threshold_low)

    @property
    def output_size(self) -> int:
        return 2

    def output_weights(self, i: int) -> tuple[int, list[int]]:
        t = self.threshold(i)
        return SCALE, [SCALE - t, t]

    def _perturb_grid(self, i: int, words: tuple[int, ...]) -> int:
        return int(words[0] < self.threshold(i))

    def _perturb_grid_batch(self, indices: Any, gen: Any) -> Any:
        import numpy as np

        raw = gen.bit_generator.random_raw(indices.size)
        thresholds = np.uint64(self.threshold_low) + indices.astype(np.uint64) * np.uint64(
            self.delta
        )
        return (raw < thresholds).astype(np.int64)

    def _block_sums(self, batch: Any) -> tuple[int, ...]:
        return (int(batch.sum()),)

    @property
    def _affine(self) -> tuple[Fraction, Fraction]:
        """``(a, beta)``: ``E[bit | i] = a + beta i``."""
        return Fraction(self.threshold_low, SCALE), Fraction(self.delta, SCALE)

    def estimate_sums(self, tally: NumericTally) -> tuple[int, Fraction, Fraction]:
        n, (ones,) = self.check_tally(tally).n, tally.values
        if ones > n:
            raise InvalidParameter(f"a duchi tally has at most n={n} ones, got {ones}")
        a, beta = self._affine
        s1 = (ones - n * a) / beta
        s2 = (ones * (1 - a) ** 2 + (n - ones) * a * a) / beta**2
        return n, s1, s2

    def variance_grid(self, i: int) -> Fraction:
        a, beta = self._affine
        pi = a + beta * i
        return pi * (1 - pi) / beta**2


class OneBitMean(Duchi):
    """Microsoft's 1BitMean (Ding, Kulkarni, Yekhanin, NeurIPS 2017) for ``x in [low, high]``.

    Send 1 w.p. ``1/(e^eps+1) + ((x-low)/(high-low)) (e^eps-1)/(e^eps+1)``: the same channel as
    :class:`Duchi` after the affine change of variable (docs/MECHANISMS.md §19), so the sampler,
    thresholds, estimator and variance are shared; kept as its own name because campaigns
    name it. Its memoised, α-point-rounded form for repeated collection is
    :class:`~client_sdk.mechanisms.numeric.alpha_point.AlphaPointMean`.
    """

    name = "1bitmean"


class Piecewise(BandOutputs, MeanMechanism):
    """The Piecewise mechanism (Wang et al., ICDE 2019) on exact grids.

    Continuous PM reports ``y in [-C, C]`` with density ``p`` on a band of length ``C - 1``
    centred at ``(C+1) t / 2`` and ``p / e^eps`` elsewhere. Here: input ``i in [0, D]``, output
    ``j in [0, D + W)``, band ``[i, i + W)`` with ``W = round(D e^{-eps/2})`` (the band-to-range
    ratio ``(C-1)/(C+1) = e^{-eps/2}``), band probability ``T / 2**64`` (:class:`Band`: exact, worst
    ratio ``T D / ((2**64 - T) W) <= e^eps``). ``E[j | i] = a + beta i`` exactly, so
    ``i_hat = (j - a) / beta`` is unbiased; ``Var`` is convex in ``i`` (``beta(1-beta) > 0``) and
    largest at the extremes, as the paper's
    ``t**2/(e^{eps/2}-1) + (e^{eps/2}+3)/(3(e^{eps/2}-1)**2)``.
    """

    name = "piecewise"
    tally_fields = ("sum", "sum_sq")

    def __init__(self, *, epsilon: float, bounds: Any, grid: int = DEFAULT_GRID) -> None:
        super().__init__(epsilon=epsilon, bounds=bounds, grid=grid)
        d = self.grid.size
        width = max(1, min(d, round(d * math.exp(-self.epsilon / 2))))
        self.band = Band(d + 1, width, self.epsilon)
        a = self.band.mean(0)
        self._a, self._beta = a, self.band.mean(1) - a

    def _perturb_grid(self, i: int, words: tuple[int, ...]) -> int:
        return self.band.sample(i, words[0], words[1])

    def _perturb_grid_batch(self, indices: Any, gen: Any) -> Any:
        return self.band.sample_many(indices, gen)

    def _block_sums(self, batch: Any) -> tuple[int, ...]:
        return int(batch.sum()), int((batch * batch).sum())

    def _largest_tally_term(self) -> int:
        return (self.output_size - 1) ** 2  # a report's square, in the int64 sum of squares

    def estimate_sums(self, tally: NumericTally) -> tuple[int, Fraction, Fraction]:
        n, (s, sq) = self.check_tally(tally).n, tally.values
        return n, *_affine_sums(n, s, sq, self._a, self._beta)

    def variance_grid(self, i: int) -> Fraction:
        return self.band.variance(i) / self._beta**2


def _affine_sums(n: int, s: int, sq: int, a: Fraction, beta: Fraction) -> tuple[Fraction, Fraction]:
    """Sums of ``(y - a)/beta`` and its square from ``n``, ``sum y`` and ``sum y**2``."""
    return (s - n * a) / beta, (sq - 2 * a * s + n * a * a) / beta**2


class Hybrid(MeanMechanism):
    """The Hybrid mechanism (Wang et al., ICDE 2019): Piecewise w.p. alpha, else Duchi.

    ``alpha = 1 - e^{-eps/2}`` (as a 64-bit threshold) when ``eps > 0.61``, else 0 (pure Duchi).
    Reports: ``[0, M)`` are Piecewise outputs, ``M`` and ``M + 1`` Duchi's bits
    (``M = piecewise.output_size``). Privacy: each output belongs to one branch, so its ratio is
    that branch's (the branch probability cancels): ``realised_epsilon`` is the larger of the two.
    Utility: ``E[i_hat**2 | i] = alpha E_PM + (1-alpha) E_Duchi``; with the paper's alpha the
    ``t**2`` terms cancel and the worst case is the paper's closed form.
    """

    name = "hybrid"
    tally_fields = ("pm_n", "pm_sum", "pm_sum_sq", "duchi_ones")

    def __init__(self, *, epsilon: float, bounds: Any, grid: int = DEFAULT_GRID) -> None:
        super().__init__(epsilon=epsilon, bounds=bounds, grid=grid)
        self.piecewise = Piecewise(epsilon=epsilon, bounds=bounds, grid=grid)
        self.duchi = Duchi(epsilon=epsilon, bounds=bounds, grid=grid)
        self.threshold = (
            exact_threshold(-math.expm1(-self.epsilon / 2))
            if self.epsilon > HYBRID_EPSILON_STAR
            else 0
        )
        self._m = self.piecewise.output_size

    @property
    def alpha(self) -> Fraction:
        return Fraction(self.threshold, SCALE)

    @property
    def realised_epsilon(self) -> float:
        if self.threshold == 0:
            return self.duchi.realised_epsilon
        return max(self.piecewise.realised_epsilon, self.duchi.realised_epsilon)

    @property
    def output_size(self) -> int:
        return self._m + 2

    def output_weights(self, i: int) -> tuple[int, list[int]]:
        den_pm, w_pm = self.piecewise.output_weights(i)
        _, w_d = self.duchi.output_weights(i)
        t = self.threshold
        pm = [t * w * SCALE for w in w_pm]
        duchi = [(SCALE - t) * w * den_pm for w in w_d]
        return SCALE * den_pm * SCALE, pm + duchi

    def _perturb_grid(self, i: int, words: tuple[int, ...]) -> int:
        if words[0] < self.threshold:
            return self.piecewise._perturb_grid(i, words[1:])
        return self._m + self.duchi._perturb_grid(i, words[1:])

    def _perturb_grid_batch(self, indices: Any, gen: Any) -> Any:
        import numpy as np

        from client_sdk.mechanisms.randomness import bernoulli

        duchi = self._m + self.duchi._perturb_grid_batch(indices, gen)
        if self.threshold == 0:
            return duchi
        use_pm = bernoulli(gen, indices.size, self.threshold)
        return np.where(use_pm, self.piecewise._perturb_grid_batch(indices, gen), duchi)

    def _largest_tally_term(self) -> int:
        return (self._m - 1) ** 2  # a Piecewise report's square, in the int64 sum of squares

    def _block_sums(self, batch: Any) -> tuple[int, ...]:
        pm = batch[batch < self._m]
        return (
            int(pm.size),
            int(pm.sum()),
            int((pm * pm).sum()),
            int((batch == self._m + 1).sum()),
        )

    def estimate_sums(self, tally: NumericTally) -> tuple[int, Fraction, Fraction]:
        n = self.check_tally(tally).n
        pm_n, s, sq, ones = tally.values
        if pm_n + ones > n:
            raise InvalidParameter(f"a hybrid tally's pm_n + duchi_ones exceeds n={n}")
        _, p1, p2 = self.piecewise.estimate_sums(NumericTally(pm_n, (s, sq)))
        _, d1, d2 = self.duchi.estimate_sums(NumericTally(n - pm_n, (ones,)))
        return n, p1 + d1, p2 + d2

    def variance_grid(self, i: int) -> Fraction:
        a = self.alpha
        # Both branches are unbiased, so the mixture's variance is the mixture of variances.
        return a * self.piecewise.variance_grid(i) + (1 - a) * self.duchi.variance_grid(i)


#: The mean mechanisms ``auto`` compares, in order of preference on ties.
MEAN_MECHANISMS: dict[str, type[MeanMechanism]] = {
    "duchi": Duchi,
    "piecewise": Piecewise,
    "hybrid": Hybrid,
    "1bitmean": OneBitMean,
}


@dataclass(frozen=True)
class ExpectedValues:
    """What a campaign declares about the values its devices hold: their mean and standard
    deviation, in units of x, of the values clipped to the bounds (from a pilot, a previous
    campaign, domain knowledge). Public configuration, never a device's value: ``auto`` uses it
    to choose the mechanism (:func:`choose_mean`), the resolved config holds only the choice.
    """

    mean: float
    sd: float

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "sd": self.sd}


def check_expected_values(expected: object, bounds: tuple[float, float]) -> ExpectedValues:
    """``expected`` as :class:`ExpectedValues`: a mapping ``{"mean": m, "sd": s}`` of finite
    numbers (or an :class:`ExpectedValues`) with ``low <= m <= high``, ``s >= 0`` and ``s**2 <=
    (m - low) * (high - m)``, the largest variance of a value in the bounds with mean ``m``
    (Bhatia-Davis). Raises :class:`InvalidParameter` naming the rule."""
    if isinstance(expected, ExpectedValues):
        expected = expected.to_dict()
    if not isinstance(expected, Mapping) or set(expected) != {"mean", "sd"}:
        raise InvalidParameter(
            "expected values of a numeric campaign must be {'mean': m, 'sd': s} (the mean and "
            f"standard deviation of the clipped values), got {expected!r}"
        )
    numbers = [expected["mean"], expected["sd"]]
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in numbers) or not all(
        math.isfinite(v) for v in numbers
    ):
        raise InvalidParameter(f"expected mean and sd must be finite numbers, got {expected!r}")
    low, high = bounds
    mean, sd = float(expected["mean"]), float(expected["sd"])
    if not low <= mean <= high:
        raise InvalidParameter(f"expected mean {mean!r} is outside the bounds [{low}, {high}]")
    largest = math.sqrt(max(0.0, (mean - low) * (high - mean)))
    if sd < 0 or sd > largest * (1 + 1e-12):
        raise InvalidParameter(
            f"expected sd must be in [0, {largest:.6g}] for a mean of {mean:g} in the bounds "
            f"[{low}, {high}] (no values in them vary more), got {sd!r}"
        )
    return ExpectedValues(mean, sd)


def expected_variance(
    mech: MeanMechanism, expected: ExpectedValues, *, unit: bool = False
) -> float:
    """Per-report variance of ``mech``'s estimate averaged over values of the declared mean and
    standard deviation, in units of ``x**2``: ``Var[i_hat | i]`` is an exact quadratic in the
    grid position, so its average needs the first two moments only (``c0 + c1 E[i] + c2
    E[i**2]``). The randomised rounding's share, ``(1 + c2) frac (1 - frac)`` per report (at
    most ``(1 + c2) / 4`` grid units squared, against ``c2 i**2`` with ``i`` up to the grid
    size), depends on where the values fall between grid points, which two moments do not
    say; it is left out, so it could decide only a near-exact tie.

    ``unit=True``: the same for the value rescaled to [0, 1] (``(x - low) / (high - low)``),
    what the multi-attribute criterion adds up (docs/MECHANISMS.md §22); finite for every
    bounds, where ``(high - low)**2`` may overflow."""
    grid = mech.grid
    scale = grid.size / (grid.high - grid.low)
    first = (expected.mean - grid.low) * scale
    second = first * first + (expected.sd * scale) ** 2
    c0, c1, c2 = mech.variance_coefficients
    per_step = c0 + c1 * first + c2 * second
    return per_step / grid.size**2 if unit else per_step * mech._unit_squared


#: What ``auto`` chooses among (:func:`choose_mean`), in tie order.
AUTO_MEAN_CANDIDATES = ("duchi", "piecewise", "hybrid")


@dataclass(frozen=True)
class MeanCandidate:
    name: str
    worst_case_variance: float  # per report, units of x**2
    #: Per report, units of x**2, over the declared values (None when none were declared).
    expected_variance: float | None = None


@dataclass(frozen=True)
class MeanChoice:
    """What ``auto`` chose for a mean campaign and the comparison behind it."""

    chosen: MeanMechanism
    candidates: tuple[MeanCandidate, ...]
    #: The declared values the choice averaged over; None: the worst case decided.
    expected: ExpectedValues | None = None

    @property
    def criterion(self) -> str:
        """What was minimised, in words."""
        if self.expected is None:
            return "the worst-case per-report variance over the bounds"
        return (
            "the per-report variance averaged over values of mean "
            f"{self.expected.mean:g} and sd {self.expected.sd:g} (declared)"
        )


def choose_mean(
    *,
    epsilon: float,
    bounds: Any,
    grid: int = DEFAULT_GRID,
    candidates: Sequence[str] | None = None,
    expected: object = None,
) -> MeanChoice:
    """The mean mechanism with the smallest per-report variance at ``epsilon``: the worst case
    over all inputs in the bounds, or, when the campaign declares ``expected`` values
    (``{"mean": m, "sd": s}``, :func:`check_expected_values`), the average over them
    (:func:`expected_variance`), which is the mean's variance the analyst gets when the
    declaration is right. Computed from the thresholds that run; deterministic, so a config
    resolves to the same mechanism everywhere. Ties go to the earlier of ``candidates``.
    """
    names = tuple(candidates or AUTO_MEAN_CANDIDATES)
    built = [MEAN_MECHANISMS[n](epsilon=epsilon, bounds=bounds, grid=grid) for n in names]
    declared = None if expected is None else check_expected_values(expected, built[0].bounds)
    spreads = [None if declared is None else expected_variance(m, declared) for m in built]
    rows = tuple(
        MeanCandidate(m.name, m.worst_case_variance, v) for m, v in zip(built, spreads, strict=True)
    )
    if declared is None:
        best = min(range(len(built)), key=lambda k: built[k].worst_case_variance_grid)
    else:
        best = min(range(len(built)), key=lambda k: spreads[k])  # type: ignore[arg-type,return-value]
    return MeanChoice(built[best], rows, declared)
