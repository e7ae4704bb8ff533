"""Composition bounds for many pure epsilon-LDP reports of one device (the budget's arithmetic).

Every function returns an epsilon that *holds*: for reports with per-report epsilons ``eps_j``
the reports together are (result, delta)-DP (delta = 0 for :func:`basic`). The ledger takes the
smallest of them (:func:`compose`), which is then also valid.

* basic (sequential) composition: ``sum eps_j`` (pure);
* advanced composition (Dwork, Rothblum, Vadhan, FOCS 2010; heterogeneous form, Dwork & Roth
  Thm 3.20): ``sqrt(2 ln(1/delta) sum eps_j^2) + sum eps_j (e^eps_j - 1)``;
* optimal composition of k-fold eps-DP (Kairouz, Oh, Viswanath, ICML 2015, Thm 3.3): for
  ``i = 0..floor(k/2)`` the composition is ``((k - 2i) eps, delta_i)``-DP with
  ``delta_i = sum_{l<i} C(k,l) (e^{(k-l) eps} - e^{(k-2i+l) eps}) / (1 + e^eps)^k``; the
  smallest ``(k - 2i) eps`` with ``delta_i <= delta`` is the exact optimum. For reports of
  different epsilons it is applied with ``eps = max eps_j`` (an eps_j-DP report is also
  max-DP), which stays valid.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping

from client_sdk.errors import InvalidParameter


def check_delta(delta: float) -> float:
    """``delta`` if it lies in (0, 1), else :class:`InvalidParameter`."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise InvalidParameter(f"delta must lie in (0, 1), got {delta!r}")
    return float(delta)


def basic(counts: Mapping[float, int]) -> float:
    """Sequential composition: ``sum eps_j`` (``counts`` maps an epsilon to how many reports)."""
    return math.fsum(eps * n for eps, n in counts.items())


def advanced(counts: Mapping[float, int], delta: float) -> float:
    """Advanced composition, heterogeneous form; equals DRV's formula for equal epsilons."""
    check_delta(delta)
    if not any(counts.values()):
        return 0.0
    squares = math.fsum(eps * eps * n for eps, n in counts.items())
    drift = math.fsum(eps * math.expm1(eps) * n for eps, n in counts.items())
    return math.sqrt(2 * math.log(1 / delta) * squares) + drift


def kairouz_delta(k: int, epsilon: float, i: int, *, stop: float = math.inf) -> float:
    """``delta_i`` of Kairouz-Oh-Viswanath Thm 3.3: the delta at which k-fold eps-DP is
    ``((k - 2i) eps)``-DP. Evaluated in log space (``lgamma``) so large ``k`` does not overflow.
    The terms are positive, so the sum stops early once it exceeds ``stop``."""
    if not 0 <= i <= k // 2:
        raise InvalidParameter(f"i must lie in 0..{k // 2}, got {i}")
    log_norm = k * math.log1p(math.exp(epsilon)) if epsilon < 700 else k * epsilon
    lgk = math.lgamma(k + 1)
    total = 0.0
    for l in range(i):  # noqa: E741 - the paper's name
        log_c = lgk - math.lgamma(l + 1) - math.lgamma(k - l + 1)
        # e^{(k-l)eps} - e^{(k-2i+l)eps} = e^{(k-l)eps} (1 - e^{(2l-2i)eps})
        total += math.exp(log_c + (k - l) * epsilon - log_norm) * -math.expm1(
            (2 * l - 2 * i) * epsilon
        )
        if total > stop:
            break
    return total


@functools.lru_cache(maxsize=4096)
def kairouz(k: int, epsilon: float, delta: float) -> float:
    """The optimal epsilon of k-fold ``epsilon``-DP composition at ``delta`` (KOV 2015).

    One pass over i with prefix sums: with ``a_l = C(k,l) e^{(k-l)eps} / (1+e^eps)^k``,
    ``delta_i = A_i - D_i`` where ``A_{i+1} = A_i + a_l`` and ``D_{i+1} = e^{-2 eps}(D_i + a_i)``
    (both at most 1, so the difference keeps its absolute precision); the answer is then
    checked against the direct sum (:func:`kairouz_delta`). O(k) instead of O(k^2).
    """
    check_delta(delta)
    if k <= 0 or epsilon <= 0:
        return 0.0
    shrink = math.exp(-2 * epsilon)
    log_a = -k * math.log1p(math.exp(-epsilon))  # log a_0
    a_sum = d_sum = 0.0
    best, below, above = 0, 0.0, math.inf  # delta_best <= delta < delta_{best+1}
    for i in range(1, k // 2 + 1):
        a = math.exp(log_a)  # a_{i-1}
        a_sum += a
        d_sum = shrink * (d_sum + a)
        if a_sum - d_sum > delta:
            above = a_sum - d_sum
            break
        best, below = i, a_sum - d_sum
        log_a += math.log(k - (i - 1)) - math.log(i) - epsilon
    # Rounding is about k * 1e-16 absolute; only a boundary that close is checked directly.
    if delta - below > 1e-9 and above - delta > 1e-9:
        return (k - 2 * best) * epsilon
    while best > 0 and kairouz_delta(k, epsilon, best, stop=delta) > delta:
        best -= 1
    while best < k // 2 and kairouz_delta(k, epsilon, best + 1, stop=delta) <= delta:
        best += 1
    return (k - 2 * best) * epsilon


def compose(
    counts: Mapping[float, int], delta: float, *, limit: float = -math.inf
) -> tuple[float, str]:
    """The smallest valid bound and its name (``basic``, ``advanced`` or ``optimal``).

    Cheap bounds first; with ``limit``, stops at the first bound within it (the budget check
    only needs to know that *some* valid bound fits).
    """
    k = sum(counts.values())
    if k == 0:
        return 0.0, "basic"
    best, name = basic(counts), "basic"
    if best <= limit:
        return best, name
    adv = advanced(counts, delta)
    if adv < best:
        best, name = adv, "advanced"
    if best <= limit:
        return best, name
    opt = kairouz(k, max(e for e, n in counts.items() if n), delta)
    if opt < best:
        best, name = opt, "optimal"
    return best, name


def tally(epsilons: Iterable[float]) -> dict[float, int]:
    """``{epsilon: count}`` of a sequence of per-report epsilons."""
    out: dict[float, int] = {}
    for eps in epsilons:
        out[eps] = out.get(eps, 0) + 1
    return out
