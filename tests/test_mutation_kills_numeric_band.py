"""The band sampler's batch path on chosen words: Lemire's rejection exactly (issue 21).

``Band.sample_many`` splits each 64-bit draw into a band half (low 32 bits) and a position half
(high 32 bits); the position is ``(u * m) >> 32``, rejected when the product's low word is below
``2**32 mod m`` and then redrawn from the high half of a fresh word. A wrong rejection threshold
biases outputs by at most ``m / 2**32``, which no sample shows; with the words chosen (a
bit generator that returns them) the output is known exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.mechanisms.numeric.band import Band, uniform_below


class _Words(np.random.PCG64):
    """A PCG64 whose ``random_raw`` returns the given 64-bit words, in order."""

    def __init__(self, words: list[int]) -> None:
        super().__init__(0)
        self.words = list(words)

    def random_raw(self, size: Any = None, output: bool = True) -> Any:
        n = 1 if size is None else int(np.prod(size))
        assert n <= len(self.words), "the sampler drew more words than expected"
        out = np.array(self.words[:n], dtype=np.uint64)
        del self.words[:n]
        return out if size is not None else int(out[0])


def _gen(words: list[int]) -> np.random.Generator:
    return np.random.Generator(_Words(words))


# 4 positions, width 1: 3 outside outputs (odd, so 2**32 mod 3 = 1 and words are rejected).
BAND = Band(4, 1, 1.0)
OUTSIDE = 0xFFFFFFFF  # a band half above the threshold's high word: not in the band
INV3 = pow(3, -1, 2**32)  # INV3 * 3 = 1 (mod 2**32): the product's low word is 1


def test_the_band_word_and_threshold_used() -> None:
    assert BAND.outside == 3 and BAND.width == 1 and BAND.size == 4
    assert BAND.threshold >> 32 < OUTSIDE


def test_a_position_word_at_the_rejection_edge_is_kept() -> None:
    # Low word 1 = 2**32 mod 3: not below it, so kept: position (INV3 * 3) >> 32 = 2, past the
    # band of input 0 (shifted by the width 1) -> output 3; input 3's band is [3, 4) -> 2.
    assert BAND.sample_many(np.array([0]), _gen([(INV3 << 32) | OUTSIDE])).tolist() == [3]
    assert BAND.sample_many(np.array([3]), _gen([(INV3 << 32) | OUTSIDE])).tolist() == [2]


def test_a_rejected_position_word_is_replaced_by_the_high_half_of_a_fresh_word() -> None:
    # Position word 0: product 0, low word 0 < 1, rejected. The fresh word's high half 2**31
    # gives 3 * 2**31 = 0x1_8000_0000: low word 2**31 (kept), position 1 -> output 2 for input 0.
    gen = _gen([(0 << 32) | OUTSIDE, (1 << 31) << 32])
    assert BAND.sample_many(np.array([0]), gen).tolist() == [2]
    # Two rejections in a row, then 0xFFFFFFFF: position (3 * 0xFFFFFFFF) >> 32 = 2.
    gen = _gen([(0 << 32) | OUTSIDE, 0, 0xFFFFFFFF << 32])
    assert BAND.sample_many(np.array([1]), gen).tolist() == [3]


def test_uniform_below_thresholds_per_element() -> None:
    words = np.array([0, INV3, 5, 0xFFFFFFFF], dtype=np.uint32)
    bound = np.full(4, 3, dtype=np.uint64)
    reject = np.array([0, 1, 1, 1], dtype=np.uint64)  # element 0 never rejected
    got = uniform_below(_gen([]), words, bound, reject)
    assert got.tolist() == [0, 2, 0, 2]
    got = uniform_below(_gen([]), words, bound, reject_below=(np.ones(4, np.uint64), 0, 1))
    assert got.tolist() == [0, 2, 0, 2]
