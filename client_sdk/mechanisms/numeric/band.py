"""The exact "band" sampler behind the Piecewise and Square Wave mechanisms.

Input: a grid index ``i`` in ``[0, P)``. Output: an integer ``j`` in ``[0, M)``,
``M = P - 1 + W``. The *band* of ``i`` is ``[i, i + W)``; the other ``O = P - 1`` outputs are
outside it. With probability ``T / 2**64`` (a 64-bit threshold) the output is uniform in the band,
otherwise uniform outside it; both uniform draws are exact (rejection sampling). So

    P[j | i] = T / (2**64 W)            for j in the band of i   ("high")
    P[j | i] = (2**64 - T) / (2**64 O)  otherwise                 ("low")

Privacy proof (why the extreme inputs suffice): every output has, for every input, one of only
two probabilities, high or low, so the largest ratio over all inputs and outputs is
``high / low = T O / ((2**64 - T) W)`` (high >= low here). ``T`` is the largest threshold with
that ratio <= e^epsilon. Input 0 and input ``P - 1`` attain it (output 0 is high for the first and
low for the second whenever ``W < M``).

Moments (exact, for the estimators): ``E[j | i]`` is affine in ``i`` and ``Var[j | i]`` is a
quadratic in ``i``; both are computed in rational arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.device import accept_below, randbelow
from client_sdk.mechanisms.randomness import SCALE, largest_threshold, log_ratio, ratio_at_most


def _sum_to(n: int) -> int:
    """``0 + 1 + ... + (n - 1)``."""
    return n * (n - 1) // 2


def _squares_to(n: int) -> int:
    """``0**2 + ... + (n - 1)**2``."""
    return (n - 1) * n * (2 * n - 1) // 6


class Band:
    """``P`` input positions, band width ``W``, band probability ``threshold / 2**64``."""

    def __init__(self, positions: int, width: int, epsilon: float) -> None:
        if not 2 <= positions or not 1 <= width:
            raise InvalidParameter(
                f"a band needs >= 2 positions and width >= 1, got {positions}, {width}"
            )
        self.positions = positions
        self.width = width
        self.outside = positions - 1
        self.size = self.outside + width
        e = math.exp(epsilon)
        w, o = width, self.outside
        self.threshold = largest_threshold(
            lambda t: ratio_at_most(t * o, (SCALE - t) * w, epsilon), w * e / (w * e + o)
        )

    # -- privacy ----------------------------------------------------------------------------

    @property
    def high(self) -> int:
        """Weight of a band output over the denominator ``2**64 W O``."""
        return self.threshold * self.outside

    @property
    def low(self) -> int:
        """Weight of an outside output over the same denominator."""
        return (SCALE - self.threshold) * self.width

    @property
    def denominator(self) -> int:
        return SCALE * self.width * self.outside

    @property
    def realised_epsilon(self) -> float:
        return log_ratio(self.high, self.low)

    def weights(self, i: int) -> list[int]:
        out = [self.low] * self.size
        out[i : i + self.width] = [self.high] * self.width
        return out

    # -- sampling ---------------------------------------------------------------------------

    def sample(self, i: int, u: int, v: int) -> int:
        """One output for input ``i`` from two uniform 64-bit words (rejection redraws: OS)."""
        if u < self.threshold:
            r = accept_below(v, self.width)
            return i + (r if r is not None else randbelow(self.width))
        r = accept_below(v, self.outside)
        if r is None:
            r = randbelow(self.outside)
        return r + self.width if r >= i else r

    def sample_many(self, indices: Any, gen: Any) -> Any:
        """Outputs for an int64 array of inputs, exactly as :meth:`sample`.

        Per element two uniform 32-bit words (one 64-bit draw split in halves): the first is
        the high half of the band word ``u`` (``u < T``, the low 32 bits of ``u`` drawn only on
        a tie, :func:`~client_sdk.mechanisms.randomness.below`), the second the uniform
        position, by Lemire's multiply-and-reject method (exactly uniform on ``[0, W)`` or
        ``[0, O)``; rejects with probability below ``m / 2**32``). Written branch-free
        (arithmetic on the 0/1 band indicator instead of ``np.where``, whose data-dependent
        branches cost more than the rest together): see ``bench/numeric.py`` for the rate.
        """
        import numpy as np

        from client_sdk.mechanisms.randomness import below

        n = indices.size
        halves = gen.bit_generator.random_raw(n).view(np.uint32)
        inside = below(gen, halves[:n], self.threshold)
        w, o = self.width, self.outside
        flag = inside.astype(np.uint64)  # 1 in the band, 0 outside
        # bound = W in the band, O outside: O + flag * (W - O), in wrapping uint64 arithmetic.
        bound = flag * np.uint64((w - o) % (1 << 64))
        bound += np.uint64(o)
        position = uniform_below(
            gen, halves[n:], bound, reject_below=(flag, (1 << 32) % w, (1 << 32) % o)
        )
        # Band: i + position. Outside: position, shifted past the band when position >= i.
        out = indices * flag.view(np.int64)
        past = position >= indices
        past &= ~inside
        out += position
        out += past.view(np.uint8) * np.int64(w)
        return out

    # -- moments ----------------------------------------------------------------------------

    def mean(self, i: int) -> Fraction:
        """``E[j | i]`` exactly."""
        p = Fraction(self.threshold, SCALE)
        band_sum = _sum_to(i + self.width) - _sum_to(i)
        rest = _sum_to(self.size) - band_sum
        return p * Fraction(band_sum, self.width) + (1 - p) * Fraction(rest, self.outside)

    def second_moment(self, i: int) -> Fraction:
        """``E[j**2 | i]`` exactly."""
        p = Fraction(self.threshold, SCALE)
        band_sq = _squares_to(i + self.width) - _squares_to(i)
        rest = _squares_to(self.size) - band_sq
        return p * Fraction(band_sq, self.width) + (1 - p) * Fraction(rest, self.outside)

    def variance(self, i: int) -> Fraction:
        m = self.mean(i)
        return self.second_moment(i) - m * m


def uniform_below(gen: Any, words: Any, bound: Any, reject_below: Any) -> Any:
    """Exactly uniform ``[0, bound)`` per element (int64) from uniform 32-bit ``words``.

    Lemire (ACM TOMS 2019): ``(u * m) >> 32`` is uniform once products whose low word falls
    below ``2**32 mod m`` are rejected; rejected elements are redrawn until none is left
    (probability below ``m / 2**32`` each). ``reject_below`` is that threshold per element
    (uint64 array), or ``(flag, t1, t0)``: ``t1`` where the uint64 0/1 ``flag`` is 1, ``t0``
    where it is 0. Only elements below the larger threshold are examined one by one.
    """
    import numpy as np

    if isinstance(reject_below, tuple):
        flag, t1, t0 = reject_below
        limit = max(t1, t0)

        def thresholds(at: Any) -> Any:
            return np.where(flag[at] == 1, np.uint64(t1), np.uint64(t0))

    else:
        limit = int(reject_below.max()) if reject_below.size else 0

        def thresholds(at: Any) -> Any:
            return reject_below[at]

    product = words * bound  # uint32 * uint64 -> uint64
    out = (product >> np.uint64(32)).view(np.int64)
    if limit == 0:
        return out
    # Candidates: low word below the largest threshold (rare); then the exact test.
    maybe = np.flatnonzero(product.astype(np.uint32) < np.uint32(limit))
    if not maybe.size:
        return out
    low = product[maybe] & np.uint64(0xFFFFFFFF)
    redo = maybe[low < thresholds(maybe)]
    while redo.size:
        fresh = gen.bit_generator.random_raw(redo.size) >> np.uint64(32)
        product = fresh * bound[redo]
        ok = (product & np.uint64(0xFFFFFFFF)) >= thresholds(redo)
        out[redo[ok]] = (product[ok] >> np.uint64(32)).view(np.int64)
        redo = redo[~ok]
    return out


class BandOutputs:
    """A mechanism whose output distribution is a :class:`Band` (Piecewise, Square Wave):
    its privacy, output size and exact output weights are the band's."""

    band: Band

    @property
    def realised_epsilon(self) -> float:
        return self.band.realised_epsilon

    @property
    def output_size(self) -> int:
        return self.band.size

    def output_weights(self, i: int) -> tuple[int, list[int]]:
        return self.band.denominator, self.band.weights(i)
