"""Amplification by shuffling: the central (ε, δ) that n shuffled ε0-LDP reports satisfy.

Guarantee (docs/MECHANISMS.md §21): if n devices each send one report of an ε0-LDP randomizer,
and a shuffler that cannot read them permutes them and strips every piece of metadata, the
multiset the collector receives is (ε, δ)-DP against the replacement of any one device's value,
with ε = ``amplified_epsilon(epsilon0, n, delta)``. The bound is the numerical analysis of
Feldman, McMillan and Talwar ("Hiding among the clones", FOCS 2021): the shuffled output is a
post-processing of a pair of distributions (P, Q) over the count of "clones" of the one changed
device, and ε is the smallest value for which the hockey-stick divergence D_{e^ε}(P || Q) is at
most δ. This module computes that divergence exactly (to floating point) for every clone count
that carries probability mass, and adds the mass it skips as if its divergence were 1, so the
result is an upper bound on the analysis' ε, reported on a fixed grid (relative step 2^(1/1024),
about 0.07 %) so that it is monotone in every argument.

Not covered: a device sending several reports into one shuffle composes them (count it m
times, not as m devices); a shuffler that can read reports, or a collector that can see who
sent which report, voids the guarantee.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from client_sdk.errors import InvalidParameter

__all__ = [
    "DEFAULT_DELTA_CAP",
    "METHOD",
    "ShuffleAmplification",
    "amplified_epsilon",
    "central_over_windows",
    "default_delta",
    "shuffle_amplification",
]

#: Name of the analysis in results (Feldman, McMillan, Talwar, FOCS 2021, numerical bound).
METHOD: Final = "fmt21-numerical"
#: The default δ is min(DEFAULT_DELTA_CAP, n^-DEFAULT_DELTA_EXPONENT): always below 1/n.
DEFAULT_DELTA_CAP: Final = 1e-8
DEFAULT_DELTA_EXPONENT: Final = 1.1

# ε is reported as the smallest point 2^(j / _GRID) of a fixed grid whose δ is small enough:
# the grid does not depend on the arguments, so the answer is monotone in each of them.
_GRID: Final = 1024
_J_MIN: Final = -40 * _GRID  # ε ≈ 9.1e-13: below this the answer is reported as this point
# The clone counts left out of the sum carry at most _TAIL_SHARE · δ of probability.
_TAIL_SHARE: Final = 1e-6
_SMALL: Final = 1024
_LOG_FACTORIAL: Final = np.array([math.lgamma(i + 1.0) for i in range(_SMALL)])
_HALF_LOG_2PI: Final = 0.5 * math.log(2.0 * math.pi)
_LN2: Final = math.log(2.0)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, kw_only=True)
class ShuffleAmplification:
    """The central guarantee of one shuffled release.

    ``n`` reports from distinct devices, each ``epsilon0``-LDP, shuffled: the release is
    (``epsilon``, ``delta``)-DP against replacing one device's value. ``method`` names the
    analysis (:data:`METHOD`, or ``"none"`` when n < 2 and nothing is amplified).
    """

    epsilon: float
    delta: float
    n: int
    epsilon0: float
    method: str


def default_delta(n: int) -> float:
    """The δ used when none is given: min(1e-8, n^-1.1), always below 1/n."""
    n = _check_n(n)
    return min(DEFAULT_DELTA_CAP, math.pow(n, -DEFAULT_DELTA_EXPONENT))


def amplified_epsilon(epsilon0: float, n: int, delta: float | None = None) -> float:
    """The central ε that ``n`` shuffled ``epsilon0``-LDP reports satisfy at ``delta``.

    An upper bound on the Feldman-McMillan-Talwar numerical ε (docs/MECHANISMS.md §21), never
    above ``epsilon0``; non-increasing in ``n`` and ``delta``, non-decreasing in ``epsilon0``.
    ``delta`` defaults to :func:`default_delta` (n).
    """
    return shuffle_amplification(epsilon0, n, delta=delta).epsilon


def shuffle_amplification(
    epsilon0: float, n: int, *, delta: float | None = None
) -> ShuffleAmplification:
    """The typed form of :func:`amplified_epsilon`: ε with the δ, n and ε0 it holds for."""
    eps0 = _check_epsilon0(epsilon0)
    n = _check_n(n)
    d = default_delta(n) if delta is None else _check_delta(delta)
    if n < 2:
        return ShuffleAmplification(epsilon=eps0, delta=d, n=n, epsilon0=eps0, method="none")
    bound = _CloneBound(n, eps0, d)
    at_zero = bound.delta(0.0)
    if at_zero <= d:  # already (0, δ)-DP
        return ShuffleAmplification(epsilon=0.0, delta=d, n=n, epsilon0=eps0, method=METHOD)
    j_hi = _search(
        bound.delta,
        d,
        at_zero=at_zero,
        slack=bound.slack,
        j_lo=_J_MIN,
        j_hi=math.ceil(_GRID * math.log2(eps0)),
        guess=_gaussian_guess(n, eps0, d),
    )
    eps = min(eps0, 2.0 ** (j_hi / _GRID))
    return ShuffleAmplification(epsilon=eps, delta=d, n=n, epsilon0=eps0, method=METHOD)


def _search(
    delta_of: Callable[[float], float],
    target: float,
    *,
    at_zero: float,
    slack: float,
    j_lo: int,
    j_hi: int,
    guess: float,
) -> int:
    """The smallest grid index j in (j_lo, j_hi] with δ(2^(j/_GRID)) <= target.

    Assumes δ(ε) > target below the grid (``at_zero`` = δ(0) > target) and δ(ε_hi) <= target,
    and that δ falls with ε; ``slack`` is the part of δ that does not depend on ε. First a
    secant search on ln δ against ε² (the shape of a Gaussian tail) inside a shrinking
    bracket, with bisection whenever the secant leaves it; then the grid points next to its
    answer settle the index exactly. The index is the one plain bisection over the grid would
    give, found in fewer evaluations of δ.
    """
    cache: dict[int, bool] = {}

    def ok(j: int) -> bool:
        if j not in cache:
            cache[j] = delta_of(2.0 ** (j / _GRID)) <= target
        return cache[j]

    # Continuous phase on y = ε²: bracket [y_lo, y_hi] with f(y_lo) > 0 >= f(y_hi). The secant
    # works on the divergence without the constant tail charge, which would flatten ln δ.
    floor = slack if slack < target else 0.0
    y_lo, y_hi = 0.0, 4.0 ** (j_hi / _GRID)
    prev: tuple[float, float] | None = None  # the point before the last, for the secant
    last = (0.0, math.log((at_zero - floor) / (target - floor)))
    first = True
    for _ in range(80):
        if y_hi - y_lo <= y_hi * 1e-5:
            break
        if first and 0.0 < guess**2 < y_hi:
            y = guess**2
        elif y_lo == 0.0:
            y = y_hi / 16.0
        elif y_hi > 4.0 * y_lo:
            y = math.sqrt(y_lo * y_hi)
        else:
            y = 0.5 * (y_lo + y_hi)
        if not first and prev is not None and last[1] != prev[1]:
            cand = last[0] - last[1] * (last[0] - prev[0]) / (last[1] - prev[1])
            if y_lo < cand < y_hi:
                y = cand
        first = False
        value = delta_of(math.sqrt(y))
        if value <= target:
            y_hi = y
        else:
            y_lo = y
        if value <= floor:
            continue  # no finite ln δ to interpolate with
        moved = abs(y - last[0])
        prev, last = last, (y, math.log((value - floor) / (target - floor)))
        if moved <= y * 1e-5:
            break
    # Grid phase: gallop from the estimate to two adjacent grid points that straddle it.
    guess = math.ceil(_GRID * 0.5 * math.log2(max(last[0], 1e-300)))
    j = min(j_hi, max(j_lo + 1, guess))
    step = 1
    if ok(j):
        hi, lo = j, j - 1
        while lo > j_lo and ok(lo):
            hi = lo
            lo = max(j_lo, hi - step)
            step *= 2
        lo = max(lo, j_lo)
    else:
        lo, hi = j, j + 1
        while hi < j_hi and not ok(hi):
            lo = hi
            hi = min(j_hi, lo + step)
            step *= 2
        hi = min(hi, j_hi)
    while hi - lo > 1:  # ok(hi), not ok(lo) (or lo is the floor)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _gaussian_guess(n: int, epsilon0: float, delta: float) -> float:
    """A starting point only: the ε of the Gaussian limit of the clone pair at its mean count.

    Given c clones the changed device moves a Bin(c, 1/2) count by 2α − 1 on average, a shift
    of μ = 2(2α − 1)/√c standard deviations; μ-Gaussian DP has δ(ε) = Φ(−ε/μ + μ/2) −
    e^ε Φ(−ε/μ − μ/2). The search verifies every value it uses, so this only saves time.
    """
    c = max(1.0, (n - 1) * math.exp(-epsilon0))
    mu = 2.0 * math.tanh(epsilon0 / 2.0) / math.sqrt(c)

    def gdp(eps: float) -> float:
        phi = 0.5 * math.erfc((eps / mu - mu / 2.0) / math.sqrt(2.0))
        return phi - math.exp(eps) * 0.5 * math.erfc((eps / mu + mu / 2.0) / math.sqrt(2.0))

    lo, hi = 0.0, epsilon0
    if gdp(hi) > delta:
        return epsilon0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if gdp(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def central_over_windows(epsilon0: float, counts: Sequence[int]) -> tuple[float, float]:
    """The central (ε, δ) of an estimate over several windows of one shuffled campaign.

    Each window is its own shuffled release of ``counts[i]`` reports (one per device), with
    δ_i = :func:`default_delta` (n_i); a device reports in every window, so the releases compose
    and the sums are stated (basic composition: valid, not tight). Empty windows add nothing.
    """
    eps = delta = 0.0
    for n in counts:
        if n >= 1:
            result = _cached(float(epsilon0), int(n))
            eps += result.epsilon
            delta += result.delta
    return eps, delta


@functools.lru_cache(maxsize=1024)
def _cached(epsilon0: float, n: int) -> ShuffleAmplification:
    return shuffle_amplification(epsilon0, n)


class _CloneBound:
    """δ(ε) = D_{e^ε}(P || Q) for the clone pair of n devices at ε0 (plus the skipped mass).

    C ~ Bin(n − 1, e^−ε0) devices are "clones" of the changed one; each clone copies one of its
    two possible values with probability 1/2, so given C = c the count A of the first value is
    Bin(c, 1/2), and the changed device adds 1 to it with probability α = e^ε0 / (e^ε0 + 1)
    under P (1 − α under Q). P and Q are mirror images (a ↔ c + 1 − a), so the divergence is the
    same in both directions; it is the expectation over C of the conditional divergences.
    """

    def __init__(self, n: int, epsilon0: float, delta: float) -> None:
        self.epsilon0 = epsilon0
        self.alpha = 1.0 / (1.0 + math.exp(-epsilon0))
        m = n - 1
        p = math.exp(-epsilon0)
        tau = _TAIL_SHARE * delta
        c_lo, low_tail = _lower_window(m, p, tau)
        c_hi, high_tail = _upper_window(m, p, tau)
        self.slack = low_tail + high_tail  # those clone counts are charged divergence 1
        self.c: IntArray = np.arange(c_lo, c_hi + 1, dtype=np.int64)
        cf = self.c.astype(np.float64)
        self.c_plus_1: FloatArray = cf + 1.0
        # ln c! − c ln 2: the part of ln P[Bin(c, 1/2) = k] that does not depend on k.
        self.log_c_half: FloatArray = _log_factorial(self.c) - cf * _LN2
        log_pmf = (
            _log_factorial(np.array([m], dtype=np.int64))[0]
            - _log_factorial(self.c)
            - _log_factorial(m - self.c)
            + cf * math.log(p)
            + (m - cf) * math.log1p(-p)
        )
        self.pmf: FloatArray = np.exp(log_pmf)

    def delta(self, epsilon: float) -> float:
        """Upper bound on D_{e^ε}(P || Q) (exact up to rounding and the skipped tail mass)."""
        if epsilon >= self.epsilon0:
            return 0.0
        a, e = self.alpha, math.exp(epsilon)
        # P(a)/Q(a) falls with a; it exceeds e^ε exactly when a < β (c + 1).
        rho = e * math.expm1(self.epsilon0 - epsilon) / math.expm1(self.epsilon0 + epsilon)
        beta = rho / (1.0 + rho)
        c = self.c
        k = np.minimum(np.floor(beta * self.c_plus_1).astype(np.int64), c)
        b = np.exp(self.log_c_half - _log_factorial(k) - _log_factorial(c - k))  # P[Bin = k]
        f = self._lower_cdf(c, k, b)  # P[Bin(c, 1/2) <= k_c]
        # Σ_{a <= k} P(a) − e^ε Q(a) with F(k − 1) = F(k) − b(k).
        d = (e * a - (1.0 - a)) * b - math.expm1(epsilon) * f
        d = np.clip(d, 0.0, 1.0)
        return float(np.dot(self.pmf, d)) + self.slack

    @staticmethod
    def _lower_cdf(c: IntArray, k: IntArray, b: FloatArray) -> FloatArray:
        """F_c(k_c) = P[Bin(c, 1/2) <= k_c] for consecutive c, by one recurrence.

        F_{c+1}(k) = F_c(k) − b_c(k) / 2 and F_{c+1}(k + 1) = F_{c+1}(k) + b_{c+1}(k + 1); k_c
        rises by 0 or 1 per step since β < 1/2. The first value is summed directly.
        """
        c0, k0 = int(c[0]), int(k[0])
        # Hoeffding: P[Bin(c, 1/2) < c/2 − 6√c] <= e^-72, left out of the first sum.
        start = max(0, math.floor(c0 / 2.0 - 6.0 * math.sqrt(c0)) - 1)
        if k0 >= start:
            a = np.arange(start, k0 + 1, dtype=np.int64)
            f0 = float(np.exp(_log_binom_half(np.full_like(a, c0), a)).sum())
        else:
            f0 = 0.0
        rises = (np.diff(k) > 0).astype(np.float64)
        steps = -0.5 * b[:-1] + rises * b[1:]
        f = np.empty(len(c), dtype=np.float64)
        f[0] = f0
        np.cumsum(steps, out=f[1:])
        f[1:] += f0
        return np.clip(f, 0.0, 1.0)


def _log_factorial(x: IntArray) -> FloatArray:
    """ln x! elementwise: a table below 1024, Stirling's series (error < 1e-17) above."""
    if x.size and int(x.min()) >= _SMALL:
        return _stirling(x.astype(np.float64))
    out = np.empty(x.shape, dtype=np.float64)
    small = x < _SMALL
    out[small] = _LOG_FACTORIAL[x[small]]
    out[~small] = _stirling(x[~small].astype(np.float64))
    return out


def _stirling(x: FloatArray) -> FloatArray:
    """ln x! for x >= 1024 by Stirling's series; the first omitted term is below 1e-23."""
    inv = 1.0 / x
    inv2 = inv * inv
    return (
        (x + 0.5) * np.log(x)
        - x
        + _HALF_LOG_2PI
        + inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 1260.0))
    )


def _log_binom_half(c: IntArray, a: IntArray) -> FloatArray:
    """ln P[Bin(c, 1/2) = a]."""
    return _log_factorial(c) - _log_factorial(a) - _log_factorial(c - a) - c * _LN2


def _kl(x: float, p: float) -> float:
    """KL(Bernoulli(x) || Bernoulli(p)), the Chernoff exponent of a binomial tail."""
    out = 0.0
    if x > 0.0:
        out += x * math.log(x / p)
    if x < 1.0:
        out += (1.0 - x) * math.log((1.0 - x) / (1.0 - p))
    return out


def _lower_window(m: int, p: float, tau: float) -> tuple[int, float]:
    """Smallest clone count kept and a Chernoff bound (<= tau) on P[C below it]."""

    def bound(a: int) -> float:  # P[Bin(m, p) <= a] for a < m p
        return math.exp(-m * _kl(a / m, p))

    lo, hi = -1, math.floor(m * p)  # bound(lo) <= tau (vacuous at -1), bound(hi) > tau
    if bound(hi) <= tau:
        return hi + 1, bound(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bound(mid) <= tau:
            lo = mid
        else:
            hi = mid
    return lo + 1, bound(lo) if lo >= 0 else 0.0


def _upper_window(m: int, p: float, tau: float) -> tuple[int, float]:
    """Largest clone count kept and a Chernoff bound (<= tau) on P[C above it]."""

    def bound(a: int) -> float:  # P[Bin(m, p) >= a] for a > m p
        return math.exp(-m * _kl(a / m, p))

    lo, hi = math.ceil(m * p), m + 1  # bound(lo) > tau, bound(hi) <= tau (vacuous at m + 1)
    if lo > m:
        return m, 0.0
    if bound(lo) <= tau:
        return lo - 1, bound(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bound(mid) <= tau:
            hi = mid
        else:
            lo = mid
    return hi - 1, bound(hi) if hi <= m else 0.0


def _check_epsilon0(epsilon0: object) -> float:
    if isinstance(epsilon0, bool) or not isinstance(epsilon0, int | float):
        raise InvalidParameter(f"epsilon0 must be a finite number > 0, got {epsilon0!r}")
    value = float(epsilon0)
    if not math.isfinite(value) or value <= 0.0:
        raise InvalidParameter(f"epsilon0 must be a finite number > 0, got {epsilon0!r}")
    return value


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or int(n) < 1:
        raise InvalidParameter(f"n must be an integer >= 1 (the number of reports), got {n!r}")
    return int(n)


def _check_delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise InvalidParameter(f"delta must be a number in (0, 1), got {delta!r}")
    value = float(delta)
    if not (0.0 < value < 1.0):
        raise InvalidParameter(f"delta must be a number in (0, 1), got {delta!r}")
    return value
