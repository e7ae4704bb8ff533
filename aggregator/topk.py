"""Heavy hitters: the values whose count is significantly above zero (docs/MECHANISMS.md §12).

Rule: report value v iff its raw unbiased count exceeds ``T = z_(1-alpha/k) sigma0`` with
``sigma0 = sqrt(n q*(1-q*)) / (p*-q*)``, the standard error of a count nobody holds. With no
value present, all k estimates stay below T with probability at least ``1 - alpha``
(Bonferroni over the k candidates; ``z`` is the normal quantile raised to the exact binomial
critical value of a null support count where that is larger), so a listed value is a discovery
at family-wise level ``alpha``. The raw (unbiased) counts are tested, never post-processed ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aggregator.estimate import Estimate
from aggregator.postprocess import significance_z
from client_sdk.errors import InvalidParameter

#: Confidence level of the significance test when the caller gives none (alpha = 0.05).
DEFAULT_TOPK_LEVEL = 0.95


@dataclass(frozen=True)
class HeavyHitter:
    """One significant value: its domain index, label, raw count and standard error."""

    index: int
    value: str
    count: float
    std_error: float


@dataclass(frozen=True)
class TopK:
    """Values significantly above zero, largest count first, and the threshold used."""

    level: float
    alpha: float
    z: float
    sigma0: float
    threshold: float
    items: tuple[HeavyHitter, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "alpha": self.alpha,
            "z": self.z,
            "sigma0": self.sigma0,
            "threshold": self.threshold,
            "values": [
                {"value": h.value, "count": h.count, "std_error": h.std_error} for h in self.items
            ],
        }


def heavy_hitters(
    est: Estimate, *, level: float = DEFAULT_TOPK_LEVEL, limit: int | None = None
) -> TopK:
    """Values whose raw count is above ``z_(1-alpha/k) sigma0``, alpha = 1 - level, ordered.

    ``limit`` keeps at most that many (the largest). Ties in count keep domain order.
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise InvalidParameter(f"level must be a number in (0, 1), got {level!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidParameter(f"limit must be a positive integer or None, got {limit!r}")
    mech = est.mechanism
    alpha = 1 - level
    p, q = mech.p_star, mech.q_star
    sigma0 = math.sqrt(est.n * q * (1 - q)) / (p - q)
    z = significance_z(mech, est.n, alpha)
    threshold = z * sigma0  # significance_threshold's value, its z computed once
    order = sorted(
        (i for i in range(mech.k) if est.counts[i] > threshold),
        key=lambda i: (-float(est.counts[i]), i),
    )
    if limit is not None:
        order = order[:limit]
    items = tuple(
        HeavyHitter(i, mech.domain[i], float(est.counts[i]), float(est.std_errors[i]))
        for i in order
    )
    return TopK(level=level, alpha=alpha, z=z, sigma0=sigma0, threshold=threshold, items=items)
