"""The error analysts get: the criterion that chooses subset size, OLH's g and ``auto``.

For a pure protocol (``p*``, ``q*``) the unbiased count of value v has the exact
fixed-population variance ``n (v0 + beta f_v)`` (docs/MECHANISMS.md §0), ``f_v`` the
frequency of v. The analyst reads all k values, so the criterion is the count variance per
report **averaged over the k values**, for frequencies ``f`` (uniform unless the campaign
declares an expected distribution), of the estimate the default post-processing returns:

* GRR, RR and SS: every report supports the same number of values, so the raw counts already
  sum to n and the mean is ``v0 + beta/k`` (for *every* ``f``: the mean is linear in ``f``
  and ``sum f = 1``).
* OUE, SUE, OLH and HR: the number of supported values per report varies, the raw counts do not
  sum to n, and their errors are uncorrelated across values (independent bits for unary
  encoding; for OLH and HR up to the three-way dependence of the hash family or the Hadamard
  rows, which is below 1e-3 of the variance). Every default post-processing enforces the sum,
  which removes the error along the all-ones direction: the variance-weighted projection of
  ``D = diag(v0 + beta f)`` onto ``sum = n`` has trace ``sum D - sum D^2 / sum D``; the
  criterion is that trace over k. This is where the expected distribution matters.

Choosing by ``v0`` alone (an absent value's variance) is wrong near the GRR/SS crossover: at
epsilon 2, k 14 it gives d = 1 (mean 0.609) where d = 2 has mean 0.565.

Pure Python and deterministic: a device rebuilding a mechanism from the same config arrives at
the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.validation import finite_float

#: Mechanisms whose every report supports the same number of values (raw counts sum to n).
FIXED_SUM = frozenset({"rr", "grr", "ss"})


def check_expected(expected: Sequence[float] | None, k: int) -> tuple[float, ...] | None:
    """``expected`` normalised to sum 1, or None (uniform); a clear error when malformed."""
    if expected is None:
        return None
    if isinstance(expected, (str, bytes)):
        raise InvalidParameter("expected distribution must be a list of numbers")
    try:
        finite = [finite_float(x) for x in expected]
    except TypeError:
        raise InvalidParameter("expected distribution must be a list of numbers") from None
    if len(finite) != k:
        raise InvalidParameter(
            f"expected distribution has {len(finite)} weights but the domain has {k} values"
        )
    values = [x for x in finite if x is not None and x >= 0]
    if len(values) != k or sum(values) <= 0:
        raise InvalidParameter("expected distribution weights must be finite, >= 0 and not all 0")
    total = sum(values)
    return tuple(x / total for x in values)


def expected_mean_variance(
    p: float,
    q: float,
    k: int,
    *,
    fixed_sum: bool,
    expected: Sequence[float] | None = None,
) -> float:
    """Count variance per report, averaged over the k values, after the sum constraint.

    ``p``/``q`` are ``p*``/``q*``; ``fixed_sum`` says whether the raw counts always sum to n;
    ``expected`` the frequencies (uniform when None, already checked). Multiply by n for the
    mean count variance of n reports.
    """
    v0 = q * (1 - q) / (p - q) ** 2
    beta = (1 - p - q) / (p - q)
    if expected is None:
        # Uniform: k equal terms, summed by the same float additions as the general case, but
        # without a Python loop per term (OLH's g search at epsilon 8, k 5000 calls this 9,000
        # times: 5 s before, 0.2 s now).
        same = v0 + beta * (1.0 / k)
        per_value = [same] * k
        squares = [same * same] * k
    else:
        per_value = [v0 + beta * fv for fv in expected]
        squares = [d * d for d in per_value]
    total = sum(per_value)
    if fixed_sum or total <= 0:
        return total / k
    return (total - sum(squares) / total) / k


def subset_probabilities(epsilon: float, k: int, d: int) -> tuple[float, float]:
    """Ideal ``(p*, q*)`` of subset selection with subset size ``d``."""
    e = math.exp(epsilon)
    p = d * e / (d * e + k - d)
    q = (p * (d - 1) + (1 - p) * d) / (k - 1)
    return p, q


def olh_probabilities(epsilon: float, g: int) -> tuple[float, float]:
    """Ideal ``(p*, q*)`` of local hashing into ``g`` buckets (``q* = 1/g``)."""
    e = math.exp(epsilon)
    return e / (e + g - 1), 1.0 / g


def best_subset_size(epsilon: float, k: int) -> int:
    """The d in ``[1, k-1]`` with the smallest mean variance (ties: the smaller d)."""
    if k < 3:
        return 1
    return min(
        range(1, k),
        key=lambda d: (
            round(
                expected_mean_variance(*subset_probabilities(epsilon, k, d), k, fixed_sum=True), 12
            ),
            d,
        ),
    )


#: OLH's g is searched in ``[2, OLH_G_SEARCH * (e^eps + 1)]`` (the optimum is near e^eps + 1).
OLH_G_SEARCH = 3
OLH_MAX_G = 1 << 16


def best_hash_range(
    epsilon: float, k: int | None = None, expected: Sequence[float] | None = None
) -> int:
    """The g with the smallest mean variance for domain size ``k`` (ties: the smaller g).

    Without ``k`` the domain is taken as large (``beta/k`` negligible), which is ``v0``.
    """
    top = min(OLH_MAX_G, max(3, math.ceil(OLH_G_SEARCH * (math.exp(epsilon) + 1))))

    def score(g: int) -> float:
        p, q = olh_probabilities(epsilon, g)
        if k is None:
            return q * (1 - q) / (p - q) ** 2
        return expected_mean_variance(p, q, k, fixed_sum=False, expected=expected)

    return min(range(2, top + 1), key=lambda g: (round(score(g), 12), g))
