"""The two sketch frequency oracles over hashed buckets: Apple's CMS and Hadamard CMS.

A sketch has ``depth`` public hash functions ``h_0 .. h_(depth-1)`` into ``width`` buckets
(:mod:`.hashing`). A device picks its row ``j`` uniformly (OS randomness) and randomises the
one-hot encoding of ``h_j(s)`` over the ``width`` buckets:

* :class:`CmsSketch` (Apple, "Learning with privacy at scale", 2017): every bucket's bit is
  sent, the true bucket's bit is 1 w.p. ``p``, every other w.p. ``q``. ``flips="symmetric"`` is
  Apple's choice (``p = 1 - q = e^(eps/2)/(e^(eps/2)+1)``); ``flips="optimized"`` is OUE's
  (``p = 1/2``, ``q = 1/(e^eps+1)``, the smallest variance). Privacy ratio
  ``p (1-q) / ((1-p) q)``. Report: the row and ``width`` bits.
* :class:`HcmsSketch` (Apple's Hadamard CMS): the device also picks a Hadamard column ``l`` and
  sends one bit: the sign ``H[l, h_j(s)] = (-1)^popcount(l & h_j(s))`` kept w.p. ``p = e^eps /
  (e^eps + 1)``. Privacy ratio ``p / (1-p)``. Report: row, column, bit (about 2 bytes).

Both: the row (and column) are drawn independently of the value, so the privacy ratio is the
bit randomiser's; every probability is an integer threshold over 2**64.

Estimation (the collector): ``scores(block)`` is a ``(depth, width)`` array with
``X_d = sum_j scores[j, h_j(d)]`` and ``E[X_d] = sum_x c_x r(x, d)``, ``r(x, d)`` the fraction
of rows where ``x`` and ``d`` collide (``r(d, d) = 1``). Under random hashing ``r = 1/width``
for ``x != d``, so ``(X_d - n/width) * width / (width - 1)`` is unbiased for ``c_d`` (Apple's
estimator); the aggregator also solves the candidates' collisions exactly (``solve``).
Per report, the contribution to ``X_d`` has variance ``v_hold`` (device holds d) or ``v_other``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from fractions import Fraction
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms import bitvector
from client_sdk.mechanisms.base import bit_vector_distribution
from client_sdk.mechanisms.grr import keep_threshold
from client_sdk.mechanisms.openended.hashing import bucket
from client_sdk.mechanisms.randomness import (
    SCALE,
    below,
    bernoulli,
    coin,
    draw,
    draw_lanes,
    lane_digits,
    lane_offsets,
    largest_threshold,
    log_ratio,
    ratio_at_most,
    u32_array,
    uniform_below,
    word,
)

if TYPE_CHECKING:
    import numpy as np

_BLOCK = 1 << 22  # random 32-bit draws per vectorised block
FLIPS = ("symmetric", "optimized")


def check_sketch(width: object, depth: object, *, max_width: int = 1 << 16) -> tuple[int, int]:
    """``(width, depth)``: width a power of two in [2, max_width], depth in [1, 4096]."""
    if (
        isinstance(width, bool)
        or not isinstance(width, int)
        or not 2 <= width <= max_width
        or width & (width - 1)
    ):
        raise InvalidParameter(
            f"sketch width must be a power of two in [2, {max_width}], got {width!r}"
        )
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 4096:
        raise InvalidParameter(f"sketch depth must be an integer in [1, 4096], got {depth!r}")
    return width, depth


def int_column(
    payloads: Sequence[object], index: int, length: int, lo: int, hi: int
) -> np.ndarray | None:
    """Field ``index`` of every payload as int64 if each payload is a list of ``length`` fields
    and that field is an int in ``[lo, hi)``; else None. The loops run in C (``map``)."""
    import numpy as np

    lists = cast("Sequence[list[Any]]", payloads)
    if not lists or set(map(type, lists)) != {list} or set(map(len, lists)) != {length}:
        return None
    column = list(map(itemgetter(index), lists))
    if set(map(type, column)) != {int}:
        return None
    try:
        values = np.array(column, dtype=np.int64)
    except OverflowError:
        return None
    if values.min() < lo or values.max() >= hi:
        return None
    return values


def _int(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


class Sketch:
    """What both sketch oracles share: parameters, hashing, the estimate's building blocks."""

    width: int
    depth: int
    tag: bytes
    #: Integers of one sketch's tally block.
    size: int

    def __init__(self, *, epsilon: float, width: int, depth: int, tag: bytes) -> None:
        self.epsilon = epsilon
        self.width, self.depth = check_sketch(width, depth, max_width=self.max_width)
        self.tag = tag

    max_width = 1 << 16

    def bucket_of(self, data: bytes, row: int) -> int:
        return bucket(data, row, self.width, self.tag)

    @property
    def realised_epsilon(self) -> float:
        raise NotImplementedError

    @property
    def v_hold(self) -> float:
        raise NotImplementedError

    @property
    def v_other(self) -> float:
        raise NotImplementedError

    @property
    def null_bernoulli(self) -> tuple[float, float]:
        """``(pi, step)``: one report's contribution to ``X_d`` for a string ``d`` nobody holds
        is ``step * B`` plus a constant, ``B ~ Bernoulli(pi)`` (under random hashing; its
        variance ``step**2 pi (1 - pi)`` is :attr:`v_other`). The exact law of a null count
        (a binomial) for significance tests, whose tails are heavier than a Gaussian's where a
        level holds few reports and ``pi`` is small."""
        raise NotImplementedError

    @property
    def report_bits(self) -> int:
        raise NotImplementedError

    def perturb(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        """One report (a JSON list) for the hashed bytes ``data``."""
        raise NotImplementedError

    def perturb_batch(
        self, rows: np.ndarray, buckets: np.ndarray, gen: np.random.Generator
    ) -> np.ndarray:
        """Batch array of reports for devices in ``rows`` whose value hashes to ``buckets``."""
        raise NotImplementedError

    def encode(self, batch: np.ndarray) -> list[list[Any]]:
        raise NotImplementedError

    def check(self, payload: Sequence[object]) -> list[Any]:
        raise NotImplementedError

    def decode(self, payloads: Sequence[Sequence[object]]) -> np.ndarray:
        raise NotImplementedError

    def block_counts(self, batch: np.ndarray) -> np.ndarray:
        """The tally counts (``size`` integers) of a batch array."""
        raise NotImplementedError

    def decode_fast(self, payloads: Sequence[object], start: int = 0) -> np.ndarray | None:
        """The batch array of well-formed payloads (their fields from index ``start`` on: a
        prefix level may come first), vectorised; None if any looks unusual (the caller then
        checks them one by one and names the first bad one). Every loop over the payloads runs
        in C (``map``, ``itemgetter``, ``binascii``), none in Python."""
        return None

    def reports_in(self, block: np.ndarray) -> int:
        """How many reports a block of tally counts holds."""
        raise NotImplementedError

    def scores(self, block: np.ndarray) -> np.ndarray:
        """``(depth, width)`` floats: ``X_d = sum_j scores[j, h_j(d)]`` (module docstring)."""
        raise NotImplementedError

    def output_distribution(self, buckets: Sequence[int]) -> dict[Hashable, Fraction]:
        raise NotImplementedError

    def output_key(self, payload: Sequence[Any]) -> Hashable:
        raise NotImplementedError


class CmsSketch(Sketch):
    """Apple's Count-Mean-Sketch (see the module docstring). Report ``[row, base64 bits]``."""

    max_width = 4096

    def __init__(
        self, *, epsilon: float, width: int, depth: int, tag: bytes, flips: str = "symmetric"
    ) -> None:
        super().__init__(epsilon=epsilon, width=width, depth=depth, tag=tag)
        if flips not in FLIPS:
            raise InvalidParameter(f"flips must be one of {FLIPS}, got {flips!r}")
        self.flips = flips
        if flips == "symmetric":
            half = math.exp(epsilon / 2)
            t1 = largest_threshold(
                lambda t: ratio_at_most(t * t, (SCALE - t) ** 2, epsilon), half / (half + 1)
            )
            t0 = SCALE - t1
        else:
            t1, t0 = SCALE // 2, SCALE - keep_threshold(epsilon, 1)
        self.t1, self.t0 = t1, t0
        self.nbytes = (self.width + 7) // 8
        self._base = lane_offsets(self.width, t0)
        self._delta = t0 - t1  # moves one lane's threshold from t0 to t1
        self.size = self.depth * (self.width + 1)

    @property
    def p(self) -> float:
        return self.t1 / SCALE

    @property
    def q(self) -> float:
        return self.t0 / SCALE

    @property
    def realised_epsilon(self) -> float:
        return log_ratio(self.t1 * (SCALE - self.t0), (SCALE - self.t1) * self.t0)

    @property
    def v_hold(self) -> float:
        p, q = self.p, self.q
        return p * (1 - p) / (p - q) ** 2

    @property
    def v_other(self) -> float:
        p, q, r = self.p, self.q, 1 / self.width
        return (r * p * (1 - p) + (1 - r) * q * (1 - q)) / (p - q) ** 2 + r * (1 - r)

    @property
    def null_bernoulli(self) -> tuple[float, float]:
        # The bit of d's bucket: p when the device's own bucket collides with it (1/width).
        p, q, r = self.p, self.q, 1 / self.width
        return q + r * (p - q), 1 / (p - q)

    @property
    def report_bits(self) -> int:
        return self.width + max(0, math.ceil(math.log2(self.depth)))

    # -- device -----------------------------------------------------------------------------

    def perturb(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        row = uniform_below(self.depth, word(draw(1, gen), 0), gen)
        b = self.bucket_of(data, row)
        # Every bucket's coin in one big addition; the true bucket's lane uses t1 (randomness.py).
        digits = lane_digits(draw_lanes(self.width, gen), self._base + (self._delta << (72 * b)))
        bits = int(bytes(digits[::-1]), 2).to_bytes(self.nbytes, "little")
        return [row, bitvector.encode_bytes(bits)]

    def perturb_batch(
        self, rows: np.ndarray, buckets: np.ndarray, gen: np.random.Generator
    ) -> np.ndarray:
        """uint8 array ``(n, 2 + nbytes)``: the row (2 bytes, little-endian), then the bits."""
        import numpy as np

        n, w = rows.size, self.width
        out = np.empty((n, 2 + self.nbytes), dtype=np.uint8)
        out[:, 0] = rows & 255
        out[:, 1] = rows >> 8
        step = max(1, _BLOCK // w)
        for start in range(0, n, step):
            b = buckets[start : start + step]
            bits = below(gen, u32_array(gen, (b.size, w)), self.t0)
            bits[np.arange(b.size), b] = bernoulli(gen, b.size, self.t1)
            out[start : start + b.size, 2:] = bitvector.pack_rows(bits)
        return out

    # -- wire -------------------------------------------------------------------------------

    def encode(self, batch: np.ndarray) -> list[list[Any]]:
        rows = (batch[:, 0].astype(int) + 256 * batch[:, 1].astype(int)).tolist()
        return [[r, s] for r, s in zip(rows, bitvector.encode_rows(batch[:, 2:]), strict=True)]

    def check(self, payload: Sequence[object]) -> list[Any]:
        """``[row, bits]`` in canonical form, or :class:`InvalidReport`."""
        if len(payload) != 2 or not _int(payload[0], 0, self.depth):
            raise InvalidReport(
                f"a cms report is [row, base64 bits] with row an integer in [0, {self.depth})"
            )
        bitvector.decode_one(payload[1], self.width)
        return [payload[0], payload[1]]

    def decode(self, payloads: Sequence[Sequence[object]]) -> np.ndarray:
        """Batch array of checked ``[row, bits]`` payloads."""
        import numpy as np

        rows = np.fromiter((p[0] for p in payloads), dtype=np.int64, count=len(payloads))
        bits = bitvector.decode_rows([p[1] for p in payloads], self.width)
        out = np.empty((len(payloads), 2 + self.nbytes), dtype=np.uint8)
        out[:, 0] = rows & 255
        out[:, 1] = rows >> 8
        out[:, 2:] = bits
        return out

    def decode_fast(self, payloads: Sequence[object], start: int = 0) -> np.ndarray | None:
        import numpy as np

        rows = int_column(payloads, start, start + 2, 0, self.depth)
        if rows is None:
            return None
        lists = cast("Sequence[list[Any]]", payloads)  # int_column checked them
        bits = bitvector.decode_rows_fast(list(map(itemgetter(start + 1), lists)), self.width)
        if bits is None:
            return None
        out = np.empty((len(payloads), 2 + self.nbytes), dtype=np.uint8)
        out[:, 0] = rows & 255
        out[:, 1] = rows >> 8
        out[:, 2:] = bits
        return out

    def rows_of(self, batch: np.ndarray) -> np.ndarray:
        rows: np.ndarray = batch[:, 0].astype("int64") + 256 * batch[:, 1].astype("int64")
        return rows

    # -- tally and estimate -----------------------------------------------------------------

    def block_counts(self, batch: np.ndarray) -> np.ndarray:
        """Per row: its number of reports, then the set bits per bucket (``depth * (width+1)``)."""
        return self.grouped_counts(self.rows_of(batch), self.depth, batch[:, 2:]).reshape(-1)

    def grouped_counts(self, groups: np.ndarray, n_groups: int, packed: np.ndarray) -> np.ndarray:
        """``(n_groups, width + 1)`` int64: per group its reports, then its set bits per bucket.

        One ``bincount`` of (group, byte value) per byte column and a 256 x 8 bit table: O(n)
        per byte column whatever the number of groups, no unpacking, no loop over reports.
        """
        import numpy as np

        out = np.zeros((n_groups, self.width + 1), dtype=np.int64)
        out[:, 0] = np.bincount(groups, minlength=n_groups)
        # byte value -> its 8 bits; float64 so that the product runs in BLAS (exact: every
        # partial sum is an integer below 2**53)
        table = bitvector._bit_table().astype(np.float64)
        base = groups.astype(np.int64) * 256
        bits = np.zeros((n_groups, self.nbytes * 8), dtype=np.float64)
        for col in range(self.nbytes):
            hist = np.bincount(base + packed[:, col], minlength=n_groups * 256)
            bits[:, 8 * col : 8 * col + 8] = hist.reshape(n_groups, 256).astype(np.float64) @ table
        out[:, 1:] = bits[:, : self.width].astype(np.int64)
        return out

    def reports_in(self, block: np.ndarray) -> int:
        return int(block.reshape(self.depth, self.width + 1)[:, 0].sum())

    def scores(self, block: np.ndarray) -> np.ndarray:
        m = block.reshape(self.depth, self.width + 1).astype(float)
        p, q = self.p, self.q
        out: np.ndarray = (m[:, 1:] - m[:, :1] * q) / (p - q)
        return out

    def output_distribution(self, buckets: Sequence[int]) -> dict[Hashable, Fraction]:
        """``P[(row, bits) | the value's bucket in each row]`` exactly (small sketches)."""
        p, q = Fraction(self.t1, SCALE), Fraction(self.t0, SCALE)
        out: dict[Hashable, Fraction] = {}
        for j, b in enumerate(buckets):
            for bits, prob in bit_vector_distribution(self.width, b, p, q).items():
                out[(j, bits)] = prob / self.depth
        return out

    def output_key(self, payload: Sequence[Any]) -> Hashable:
        raw = bitvector.decode_one(payload[1], self.width)
        bits = tuple((raw[i // 8] >> (i % 8)) & 1 for i in range(self.width))
        return (payload[0], bits)


def walsh_hadamard_rows(table: np.ndarray) -> np.ndarray:
    """``W[j, b] = sum_l table[j, l] (-1)^popcount(l & b)`` per row, O(depth w log w)."""
    import numpy as np

    a = np.asarray(table, dtype=np.int64).copy()
    depth, size = a.shape
    h = 1
    while h < size:
        blocks = a.reshape(depth, -1, 2, h)
        a = np.stack(
            [blocks[:, :, 0, :] + blocks[:, :, 1, :], blocks[:, :, 0, :] - blocks[:, :, 1, :]],
            axis=2,
        ).reshape(depth, size)
        h *= 2
    return a


class HcmsSketch(Sketch):
    """Apple's Hadamard Count-Mean-Sketch (see the module docstring). Report ``[row, col, bit]``."""

    def __init__(self, *, epsilon: float, width: int, depth: int, tag: bytes) -> None:
        super().__init__(epsilon=epsilon, width=width, depth=depth, tag=tag)
        self.threshold = keep_threshold(epsilon, 1)
        self.size = 2 * self.depth * self.width

    @property
    def g(self) -> float:
        """``E[sign sent * true sign] = 2p - 1``."""
        return 2 * self.threshold / SCALE - 1

    @property
    def realised_epsilon(self) -> float:
        return log_ratio(self.threshold, SCALE - self.threshold)

    @property
    def v_hold(self) -> float:
        return 1 / self.g**2 - 1

    @property
    def v_other(self) -> float:
        return 1 / self.g**2 - 1 / self.width**2

    @property
    def null_bernoulli(self) -> tuple[float, float]:
        # The sent sign times d's Hadamard sign: +1 w.p. 1/2 (another bucket, uniform column),
        # or w.p. p when the buckets collide (1/width); the score is that sign over g.
        r = 1 / self.width
        return 0.5 + r * self.g / 2, 2 / self.g

    @property
    def report_bits(self) -> int:
        return 1 + math.ceil(math.log2(self.width)) + max(0, math.ceil(math.log2(self.depth)))

    def perturb(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        raw = draw(3, gen)
        row = uniform_below(self.depth, word(raw, 0), gen)
        col = uniform_below(self.width, word(raw, 1), gen)
        keep = coin(raw, 2, self.threshold)
        plus = 1 - ((col & self.bucket_of(data, row)).bit_count() & 1)  # 1: H[col, h] = +1
        return [row, col, plus ^ 1 ^ keep]

    def perturb_batch(
        self, rows: np.ndarray, buckets: np.ndarray, gen: np.random.Generator
    ) -> np.ndarray:
        import numpy as np

        n = rows.size
        col = gen.integers(0, self.width, size=n, dtype=np.int64)
        keep = bernoulli(gen, n, self.threshold).astype(np.int64)
        plus = 1 - (np.bitwise_count(col & buckets).astype(np.int64) & 1)
        return np.stack([rows.astype(np.int64), col, plus ^ 1 ^ keep], axis=1)

    def encode(self, batch: np.ndarray) -> list[list[Any]]:
        out: list[list[Any]] = batch.tolist()
        return out

    def check(self, payload: Sequence[object]) -> list[Any]:
        if (
            len(payload) != 3
            or not _int(payload[0], 0, self.depth)
            or not _int(payload[1], 0, self.width)
            or not _int(payload[2], 0, 2)
        ):
            raise InvalidReport(
                f"an hcms report is [row, column, bit]: row in [0, {self.depth}), "
                f"column in [0, {self.width}), bit 0 or 1"
            )
        return list(payload)

    def decode(self, payloads: Sequence[Sequence[object]]) -> np.ndarray:
        import numpy as np

        return np.asarray([list(p) for p in payloads], dtype=np.int64).reshape(-1, 3)

    def rows_of(self, batch: np.ndarray) -> np.ndarray:
        return batch[:, 0]

    def decode_fast(self, payloads: Sequence[object], start: int = 0) -> np.ndarray | None:
        import numpy as np

        limits = ((0, self.depth), (0, self.width), (0, 2))
        cols = [
            int_column(payloads, start + i, start + 3, lo, hi) for i, (lo, hi) in enumerate(limits)
        ]
        if any(c is None for c in cols):
            return None
        return np.stack(cols, axis=1)  # type: ignore[arg-type]

    def block_counts(self, batch: np.ndarray) -> np.ndarray:
        """Per (row, column): the reports whose bit is 1, then all reports (``2 depth width``)."""
        import numpy as np

        cells = batch[:, 0] * self.width + batch[:, 1]
        cells_n = self.depth * self.width
        ones = np.bincount(cells[batch[:, 2] == 1], minlength=cells_n)
        total = np.bincount(cells, minlength=cells_n)
        return np.concatenate([ones, total]).astype(np.int64)

    def reports_in(self, block: np.ndarray) -> int:
        return int(block[self.depth * self.width :].sum())

    def scores(self, block: np.ndarray) -> np.ndarray:
        half = self.depth * self.width
        ones = block[:half].reshape(self.depth, self.width)
        total = block[half:].reshape(self.depth, self.width)
        out: np.ndarray = walsh_hadamard_rows(2 * ones - total) / self.g
        return out

    def output_distribution(self, buckets: Sequence[int]) -> dict[Hashable, Fraction]:
        """``P[(row, col, bit) | the value's bucket in each row]`` exactly."""
        p = Fraction(self.threshold, SCALE)
        out: dict[Hashable, Fraction] = {}
        share = Fraction(1, self.depth * self.width)
        for (j, b), col in itertools.product(enumerate(buckets), range(self.width)):
            plus = 1 - ((col & b).bit_count() & 1)
            for bit in (0, 1):
                out[(j, col, bit)] = share * (p if bit == plus else 1 - p)
        return out

    def output_key(self, payload: Sequence[Any]) -> Hashable:
        return tuple(payload)
