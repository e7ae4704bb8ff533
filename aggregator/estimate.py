"""Unbiased frequency estimates with standard errors and confidence intervals.

The aggregator never re-derives a mechanism constant: ``p_star``, ``q_star`` and the variance
formula come from the mechanism that produced the reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from aggregator.errors import NotEnoughReports
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism, NumericMechanism, Tally

if TYPE_CHECKING:
    from aggregator.multi import MultiEstimate
    from aggregator.numeric import DistributionEstimate, MeanEstimate
    from aggregator.openended import CandidateEstimates
    from client_sdk.mechanisms.multi import MultiMechanism, MultiTally
    from client_sdk.mechanisms.numeric import MeanMechanism, NumericTally, SquareWave
    from client_sdk.mechanisms.openended import OpenDomainMechanism
    from client_sdk.mechanisms.openended.tally import SketchTally


def z_value(level: float) -> float:
    """Two-sided standard-normal quantile for a confidence ``level`` in (0, 1)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise InvalidParameter(f"confidence level must be a number in (0, 1), got {level!r}")
    p = 0.5 + level / 2
    # Within 2**-53 of 1, 0.5 + level/2 rounds to 1, which has no quantile.
    return NormalDist().inv_cdf(p) if p < 1 else -NormalDist().inv_cdf((1 - level) / 2)


#: The lowest level a significance test (heavy hitters, ``base-cut``, open-domain discovery)
#: is computed at: ``2**-53``. Below it ``1 - level`` rounds to 1.0 in floating point, and a
#: test at alpha 1 is not defined; at it alpha is ``1 - 2**-53``, the float nearest below 1,
#: which is as close to the true ``1 - level`` as a float can be. Intervals use the level as
#: given (:func:`z_value` handles any level in (0, 1)).
MIN_TEST_LEVEL = 2.0**-53


def significance_level(level: float) -> float:
    """The level a significance test is computed at: ``max(level, MIN_TEST_LEVEL)``, so that
    its ``alpha = 1 - level`` is below 1 for every ``level`` in (0, 1) (``1 - 1e-17`` is 1.0).
    The same rule for every kind of campaign; answers echo the level asked for."""
    return max(level, MIN_TEST_LEVEL)


def upper_z(tail: float) -> float:
    """The standard-normal z with ``P(Z > z) = tail``, for ``tail`` in (0, 1).

    ``inv_cdf(1 - tail)``, except where ``1 - tail`` rounds to 1 (``tail`` below 2**-53: a
    confidence level within 2**-53 of 1), which has no quantile: then ``-inv_cdf(tail)``.
    """
    p = 1 - tail
    return NormalDist().inv_cdf(p) if p < 1 else -NormalDist().inv_cdf(tail)


def bonferroni_z(level: float, tests: int) -> float:
    """One-sided z for ``tests`` tests at family confidence ``level`` in (0, 1):
    ``P(Z > z) = (1 - level) / tests``. With one test and a level below 2**-53, ``1 - level``
    rounds to 1: the z is then ``inv_cdf(level)``."""
    tail = (1 - level) / tests
    return upper_z(tail) if tail < 1 else NormalDist().inv_cdf(level)


def binomial_critical_z(n: int, pi: float, tail: float) -> float:
    """The exact one-sided critical value of a ``Binomial(n, pi)`` count, in standard
    deviations above its mean: counts at or above ``mean + z sd`` have probability at most
    ``tail``. The count is an integer, so ``z`` is taken halfway between the last count that
    fails and the first that passes. When no count passes (too few reports), the value just
    above the largest possible count, ``n``: a finite threshold nothing reaches. ``inf`` only
    when there is nothing to count (``n <= 0``).

    The support count of a value nobody holds is such a binomial (``pi = q*``), and so is a null
    sketch count, scaled (``Sketch.null_bernoulli``): with few reports and a small ``pi`` its
    upper tail is far heavier than a Gaussian's (at 300 reports, ``pi = 0.018`` and
    ``tail = 7e-6`` the Gaussian critical value is passed with probability 1.8e-4).
    """
    if n <= 0 or not 0 < pi < 1:
        return math.inf
    mean, sd = n * pi, math.sqrt(n * pi * (1 - pi))
    k0 = math.floor(mean)
    k1 = min(n, math.ceil(mean + 40 * sd + 60))
    ks = np.arange(k0, k1 + 1)
    log_first = (
        math.lgamma(n + 1) - math.lgamma(k0 + 1) - math.lgamma(n - k0 + 1)
        + k0 * math.log(pi) + (n - k0) * math.log1p(-pi)
    )  # fmt: skip
    steps = np.log((n - ks[:-1]) / (ks[:-1] + 1)) + math.log(pi) - math.log1p(-pi)
    log_pmf = log_first + np.concatenate(([0.0], np.cumsum(steps)))
    top = log_pmf.max()
    survival = np.cumsum(np.exp(log_pmf - top)[::-1])[::-1] * math.exp(top)
    passing = np.flatnonzero(survival <= tail)
    first = float(ks[passing[0]]) if passing.size else n + 1.0
    return (first - 0.5 - mean) / sd


@dataclass(frozen=True, eq=False)
class Estimate:
    """Per domain value: unbiased count, frequency, standard error; computed from one tally.

    ``counts`` are unbiased for the true counts of the ``n`` reporting devices (fixed-population
    model). ``std_errors`` use the closed-form variance ``n v0 + beta c`` with ``c`` the estimate
    clamped to ``[0, n]``; ``plugin_std_errors`` use the empirical support rate
    ``C (n - C) / (n (p* - q*)^2)``. ``theoretical_std_error`` is ``sqrt(n v0)``, the error of an
    item nobody holds.
    """

    mechanism: Mechanism
    tally: Tally
    counts: np.ndarray = field(repr=False)
    std_errors: np.ndarray = field(repr=False)
    plugin_std_errors: np.ndarray = field(repr=False)

    @property
    def n(self) -> int:
        return self.tally.n

    @property
    def labels(self) -> tuple[str, ...]:
        return self.mechanism.domain

    @property
    def frequencies(self) -> np.ndarray:
        return self.counts / self.n

    @property
    def frequency_std_errors(self) -> np.ndarray:
        return self.std_errors / self.n

    @property
    def theoretical_std_error(self) -> float:
        return float(np.sqrt(self.n * self.mechanism.v0))

    def ci(self, level: float = 0.95, *, plugin: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Normal-approximation interval for each count at confidence ``level``."""
        se = self.plugin_std_errors if plugin else self.std_errors
        half = z_value(level) * se
        return self.counts - half, self.counts + half

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        """JSON-safe summary with one row per domain value."""
        lo, hi = self.ci(level)
        mech = self.mechanism
        return {
            "n": self.n,
            "mechanism": mech.name,
            "epsilon": mech.epsilon,
            "realised_epsilon": mech.realised_epsilon,
            "level": level,
            "theoretical_std_error": self.theoretical_std_error,
            "values": [
                {
                    "value": label,
                    "count": float(self.counts[i]),
                    "frequency": float(self.frequencies[i]),
                    "std_error": float(self.std_errors[i]),
                    "plugin_std_error": float(self.plugin_std_errors[i]),
                    "ci_low": float(lo[i]),
                    "ci_high": float(hi[i]),
                }
                for i, label in enumerate(self.labels)
            ],
        }


def debias(mechanism: Mechanism, tally: Tally) -> np.ndarray:
    """Unbiased counts ``(C_v - n q*) / (p* - q*)``."""
    p, q = mechanism.p_star, mechanism.q_star
    return (tally.support - tally.n * q) / (p - q)


@overload
def estimate(mechanism: Mechanism, tally: Tally, *, min_reports: int = 1) -> Estimate: ...


@overload
def estimate(
    mechanism: MultiMechanism, tally: MultiTally, *, min_reports: int = 1
) -> MultiEstimate: ...


@overload
def estimate(
    mechanism: OpenDomainMechanism,
    tally: SketchTally,
    *,
    min_reports: int = 1,
    candidates: Sequence[str],
    level: float = 0.95,
) -> CandidateEstimates: ...


@overload
def estimate(
    mechanism: MeanMechanism,
    tally: NumericTally,
    *,
    min_reports: int = 1,
    bootstrap: int | None = None,
    rng: Any = None,
) -> MeanEstimate: ...


@overload
def estimate(
    mechanism: SquareWave,
    tally: NumericTally,
    *,
    min_reports: int = 1,
    bootstrap: int | None = None,
    rng: Any = None,
) -> DistributionEstimate: ...


@overload
def estimate(
    mechanism: NumericMechanism,
    tally: NumericTally,
    *,
    min_reports: int = 1,
    bootstrap: int | None = None,
    rng: Any = None,
) -> MeanEstimate | DistributionEstimate: ...


def estimate(
    mechanism: Mechanism | NumericMechanism | MultiMechanism | OpenDomainMechanism,
    tally: Any,
    *,
    min_reports: int = 1,
    bootstrap: int | None = None,
    rng: Any = None,
    candidates: Sequence[str] | None = None,
    level: float | None = None,
) -> Estimate | MeanEstimate | DistributionEstimate | MultiEstimate | CandidateEstimates:
    """The mechanism's own estimate from ``tally``, which must come from its reports.

    Frequency oracles (``kind == "frequency"``): an :class:`Estimate` (per value: unbiased
    count, standard error). Numeric mechanisms: ``aggregator.numeric.estimate_numeric``, a
    ``MeanEstimate`` (``kind == "mean"``) or a ``DistributionEstimate``; ``bootstrap``
    replicates (default ``aggregator.numeric.DEFAULT_BOOTSTRAP``) and ``rng`` set its quantile
    intervals. Multi-attribute mechanisms (``kind == "multi"``): a ``MultiEstimate`` with each
    attribute's own estimate (``aggregator.multi``). Raises :class:`NotEnoughReports` when
    ``tally.n < min_reports`` (and always for
    no reports). Open-domain mechanisms (``kind == "open_domain"``, docs/MECHANISMS.md "Open-ended
    values"): ``candidates=[strings]`` is required and a ``CandidateEstimates`` (``.counts`` in
    the candidates' order) is returned, its intervals at ``level`` (default 0.95).
    """
    if getattr(mechanism, "kind", None) == "open_domain":
        from aggregator.openended import estimate_candidates

        if bootstrap is not None or rng is not None:
            raise InvalidParameter("bootstrap and rng apply only to numeric mechanisms")
        if candidates is None:
            raise InvalidParameter(
                f"{getattr(mechanism, 'name', '?')!r} has no domain: give candidates=[strings] "
                "(or aggregator.discover(mech, tally, top=k) to find the heavy hitters)"
            )
        return estimate_candidates(
            mechanism,  # type: ignore[arg-type]
            tally,
            candidates,
            level=0.95 if level is None else level,
            min_reports=min_reports,
        )
    if candidates is not None or level is not None:
        raise InvalidParameter("candidates and level apply only to open-domain mechanisms")
    if getattr(mechanism, "kind", None) == "multi":  # several attributes: docs/MECHANISMS.md §22
        from aggregator.multi import estimate_multi
        from client_sdk.mechanisms.multi import MultiMechanism

        if not isinstance(mechanism, MultiMechanism):
            raise InvalidParameter(f"not a multi-attribute mechanism: {type(mechanism).__name__}")
        if bootstrap is not None or rng is not None:
            raise InvalidParameter("bootstrap and rng apply only to numeric mechanisms")
        return estimate_multi(mechanism, tally, min_reports=min_reports)
    if not isinstance(mechanism, Mechanism | NumericMechanism):
        raise InvalidParameter(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if mechanism.kind != "frequency":  # the mechanism's own estimator: mean or distribution
        from aggregator.numeric import DEFAULT_BOOTSTRAP, estimate_numeric

        return estimate_numeric(
            mechanism,
            tally,
            min_reports=max(1, min_reports),
            bootstrap=DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap,
            rng=rng,
        )
    if bootstrap is not None or rng is not None:
        raise InvalidParameter("bootstrap and rng apply only to numeric mechanisms")
    if not isinstance(mechanism, Mechanism):
        raise InvalidParameter(f"mechanism must be a Mechanism, got {type(mechanism).__name__}")
    if not isinstance(tally, Tally):
        raise InvalidParameter(f"tally must be a Tally, got {type(tally).__name__}")
    if tally.k != mechanism.k:
        raise InvalidParameter(
            f"tally has {tally.k} counts but the mechanism's domain has {mechanism.k} values"
        )
    if tally.n < max(1, min_reports):
        raise NotEnoughReports(tally.n, max(1, min_reports))
    n = tally.n
    counts = debias(mechanism, tally)
    clamped = np.clip(counts, 0, n)
    var = mechanism.count_variance(n, clamped)
    gap = mechanism.p_star - mechanism.q_star
    c = tally.support.astype(float)
    plugin_var = c * (n - c) / (n * gap**2)
    return Estimate(
        mechanism=mechanism,
        tally=tally,
        counts=counts,
        std_errors=np.sqrt(np.maximum(var, 0.0)),
        plugin_std_errors=np.sqrt(plugin_var),
    )
