"""Central-model baselines on the true histogram, at the same epsilon as the local mechanism.

A trusted curator who sees every true value adds noise once to each count of the histogram.

* **Laplace**: ``count_v + Lap(Delta_1 / epsilon)``; epsilon-DP. Per-count variance
  ``2 (Delta_1/epsilon)^2``, mean absolute error ``Delta_1/epsilon``.
* **Gaussian**: ``count_v + N(0, sigma^2)``; (epsilon, delta)-DP with ``delta = 1/n^2`` by default.
  ``sigma`` comes from the analytic Gaussian mechanism (Balle & Wang, ICML 2018), the smallest
  sigma with ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) <= delta``, found by bisection;
  the classic ``sqrt(2 ln(1.25/delta)) D / eps`` (Dwork & Roth, Thm A.1, valid only for
  epsilon < 1) is :func:`classic_gaussian_sigma`.

Neighbouring data sets differ by adding or removing one person (``"add-remove"``, default):
one count changes by 1, so ``Delta_1 = Delta_2 = 1``. Under ``"replace"`` (one person's value
changes, the neighbour relation LDP protects) two counts change: ``Delta_1 = 2``,
``Delta_2 = sqrt(2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulator.errors import InvalidSetting

Neighbours = Literal["add-remove", "replace"]

#: Bisection stops when the bracket is this small relative to sigma.
SIGMA_RELATIVE_TOLERANCE = 1e-12


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise InvalidSetting(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise InvalidSetting(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def _check_delta(delta: float) -> float:
    if not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise InvalidSetting(f"delta must be a number in (0, 1), got {delta!r}")
    return float(delta)


def sensitivities(neighbours: Neighbours = "add-remove") -> tuple[float, float]:
    """``(Delta_1, Delta_2)`` of a histogram under the ``neighbours`` relation."""
    if neighbours == "add-remove":
        return 1.0, 1.0
    if neighbours == "replace":
        return 2.0, math.sqrt(2.0)
    raise InvalidSetting(f"neighbours must be 'add-remove' or 'replace', got {neighbours!r}")


def default_delta(n: int) -> float:
    """The default delta of the Gaussian baseline: ``1/n^2`` (n the number of people)."""
    if n < 2:
        raise InvalidSetting(f"the default delta 1/n^2 needs n >= 2, got n={n}")
    return 1.0 / (n * n)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The exact delta of ``N(0, sigma^2)`` noise at ``epsilon`` (Balle & Wang 2018, Thm 8)."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    tail = _phi(-a - b)
    second = math.exp(epsilon + math.log(tail)) if tail > 0 else 0.0
    return _phi(a - b) - second


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma (up to a relative 1e-12, rounded up) making Gaussian noise (eps, delta)-DP.

    Valid for every epsilon > 0, unlike the classic formula. Bisection on the exact condition
    ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) <= delta``, whose left side decreases
    in ``s``; the returned sigma always satisfies it.
    """
    epsilon, delta = _check_epsilon(epsilon), _check_delta(delta)
    if not sensitivity > 0:
        raise InvalidSetting(f"sensitivity must be > 0, got {sensitivity!r}")
    lo, hi = 0.0, sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        lo, hi = hi, hi * 2
    while hi - lo > SIGMA_RELATIVE_TOLERANCE * hi:
        mid = (lo + hi) / 2
        if analytic_gaussian_delta(mid, epsilon, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon``; proved only for ``epsilon < 1``."""
    epsilon, delta = _check_epsilon(epsilon), _check_delta(delta)
    if epsilon >= 1:
        raise InvalidSetting(
            f"the classic Gaussian calibration holds only for epsilon < 1, got {epsilon}; "
            "use analytic_gaussian_sigma"
        )
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / epsilon


@dataclass(frozen=True)
class CentralBaseline:
    """A central mechanism's noise for one epsilon: name, per-count SD and expected |error|."""

    name: str  # "laplace" or "gaussian"
    epsilon: float
    scale: float  # Laplace b or Gaussian sigma
    delta: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in ("laplace", "gaussian"):
            raise InvalidSetting(f"name must be 'laplace' or 'gaussian', got {self.name!r}")

    @property
    def std(self) -> float:
        """Standard deviation of the noise on each count."""
        return self.scale * math.sqrt(2) if self.name == "laplace" else self.scale

    @property
    def variance(self) -> float:
        return self.std**2

    @property
    def mean_abs_error(self) -> float:
        """E|noise| per count: ``b`` for Laplace, ``sigma sqrt(2/pi)`` for Gaussian."""
        return self.scale if self.name == "laplace" else self.scale * math.sqrt(2 / math.pi)

    def release(self, counts: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """Noisy counts (floats, not clamped) of the true histogram ``counts``."""
        counts = np.asarray(counts, dtype=float)
        if self.name == "laplace":
            return counts + rng.laplace(0.0, self.scale, size=counts.shape)
        return counts + rng.normal(0.0, self.scale, size=counts.shape)

    def to_dict(self) -> dict[str, float | str]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "scale": self.scale,
            "std": self.std,
            "mean_abs_error": self.mean_abs_error,
        }


def laplace_baseline(epsilon: float, *, neighbours: Neighbours = "add-remove") -> CentralBaseline:
    """Laplace noise of scale ``Delta_1/epsilon`` on each count: epsilon-DP for the histogram."""
    l1, _ = sensitivities(neighbours)
    return CentralBaseline("laplace", _check_epsilon(epsilon), l1 / epsilon)


def gaussian_baseline(
    epsilon: float, *, n: int, delta: float | None = None, neighbours: Neighbours = "add-remove"
) -> CentralBaseline:
    """Analytic Gaussian noise on each count: (epsilon, delta)-DP, ``delta = 1/n^2`` by default."""
    _, l2 = sensitivities(neighbours)
    delta = default_delta(n) if delta is None else _check_delta(delta)
    sigma = analytic_gaussian_sigma(epsilon, delta, l2)
    return CentralBaseline("gaussian", float(epsilon), sigma, delta)


@dataclass(frozen=True)
class ShuffleComparison:
    """The honest comparison for reports sent through a shuffler (docs/SHUFFLE.md).

    ``n`` shuffled reports of an ``epsilon0``-LDP mechanism satisfy the central
    ``(epsilon, delta)`` of :func:`aggregator.amplification.amplified_epsilon` (δ its default,
    min(1e-8, n^-1.1)); that guarantee is against the *replacement* of one device's value, so
    the central baselines it is set against protect the same: Laplace at ``epsilon`` (pure,
    Δ1 = 2) and the analytic Gaussian at ``(epsilon, delta)`` (Δ2 = √2). A central curator
    with that budget would add this much noise; the local estimate is unchanged by shuffling.
    """

    epsilon0: float
    n: int
    epsilon: float
    delta: float
    laplace: CentralBaseline
    gaussian: CentralBaseline

    def to_dict(self) -> dict[str, object]:
        return {
            "epsilon0": self.epsilon0,
            "n": self.n,
            "central_epsilon": self.epsilon,
            "central_delta": self.delta,
            "laplace": self.laplace.to_dict(),
            "gaussian": self.gaussian.to_dict(),
        }


def shuffle_comparison(epsilon0: float, n: int) -> ShuffleComparison:
    """Central Laplace and Gaussian at the amplified (ε, δ) of ``n`` shuffled ε0 reports.

    Where the amplified ε is 0 (``epsilon0`` near 0, large ``n``) both baselines have infinite
    noise (``scale`` and ``std`` inf): no central release at that budget has finite error.
    """
    from aggregator.amplification import amplified_epsilon
    from aggregator.amplification import default_delta as shuffle_delta

    delta = shuffle_delta(n)
    epsilon = amplified_epsilon(_check_epsilon(epsilon0), n, delta)
    if epsilon == 0.0:
        # Tiny epsilon0 and many reports: already (0, delta)-DP once shuffled. No Laplace
        # release is 0-DP with finite noise, so the baselines' noise is unbounded (their RMSE
        # infinite, the local/central ratios 0): nothing central beats the local estimate here.
        return ShuffleComparison(
            epsilon0=float(epsilon0),
            n=int(n),
            epsilon=0.0,
            delta=delta,
            laplace=CentralBaseline("laplace", 0.0, math.inf),
            gaussian=CentralBaseline("gaussian", 0.0, math.inf, delta),
        )
    return ShuffleComparison(
        epsilon0=float(epsilon0),
        n=int(n),
        epsilon=epsilon,
        delta=delta,
        laplace=laplace_baseline(epsilon, neighbours="replace"),
        gaussian=gaussian_baseline(epsilon, n=n, delta=delta, neighbours="replace"),
    )
