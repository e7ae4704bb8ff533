"""Hadamard response (Acharya, Sun, Zhang, AISTATS 2019), basic high-privacy form."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from client_sdk.mechanisms.base import Mechanism, Payload
from client_sdk.mechanisms.grr import keep_threshold
from client_sdk.mechanisms.index_wire import check_index, decode_indices
from client_sdk.mechanisms.randomness import (
    SCALE,
    bernoulli,
    coin,
    draw,
    log_ratio,
    uniform_below,
    word,
)

if TYPE_CHECKING:
    import numpy as np


def walsh_hadamard(hist: np.ndarray) -> np.ndarray:
    """``W[r] = sum_y hist[y] (-1)^popcount(r & y)`` for a length-2^m vector, in O(K log K)."""
    import numpy as np

    a = np.asarray(hist, dtype=np.int64).copy()
    size, h = a.size, 1
    while h < size:
        blocks = a.reshape(-1, 2, h)
        a = np.stack(
            [blocks[:, 0, :] + blocks[:, 1, :], blocks[:, 0, :] - blocks[:, 1, :]], axis=1
        ).reshape(size)
        h *= 2
    return a


class HadamardResponse(Mechanism):
    """Value x owns the half ``C_x = {y : popcount((x+1) & y) even}`` of ``[0, K)``.

    ``K`` is the smallest power of two > k, so any k works. The device reports a uniform element
    of ``C_x`` w.p. ``p = e^eps/(e^eps+1)``, else of its complement.
    Privacy: ``P[y|x]`` is ``2p/K`` or ``2(1-p)/K``; largest ratio ``p/(1-p) = e^realised_epsilon``.
    Utility: ``p* = p``, ``q* = 1/2`` exactly (two distinct rows share K/4 elements);
    ``V0 = (e^eps+1)^2/(e^eps-1)^2``. Report: ``log2 K`` bits (an int). Decode O(n + K log K).
    Timing: ``perturb`` always computes the flip and applies it by arithmetic (XOR with 0 or
    with the row's lowest bit), so its running time does not tell which half it reported.
    """

    name = "hr"

    def __init__(self, *, epsilon: float, domain: Sequence[str] | int) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self.K = 1 << self.k.bit_length()  # smallest power of two >= k + 1
        self.threshold = keep_threshold(self.epsilon, 1)

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """Row ``index + 1`` of the Sylvester-Hadamard matrix: its ``K/2`` +1 columns share
        ``T / 2**64``, the ``K/2`` others ``1 - T / 2**64``."""
        p, half = Fraction(self.threshold, SCALE), self.K // 2
        return {
            y: (p if bin((index + 1) & y).count("1") % 2 == 0 else 1 - p) / half
            for y in range(self.K)
        }

    @property
    def realised_epsilon(self) -> float:
        t = self.threshold
        return log_ratio(t, SCALE - t)

    @property
    def p_star(self) -> float:
        return self.threshold / SCALE

    @property
    def q_star(self) -> float:
        return 0.5

    @property
    def report_bits(self) -> int:
        return self.K.bit_length() - 1

    def in_half(self, index: int, y: int) -> bool:
        """Whether output ``y`` lies in value ``index``'s half ``C_index``."""
        return (((index + 1) & y).bit_count() & 1) == 0

    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        row = index + 1
        raw = draw(2, gen)
        inside = coin(raw, 0, self.threshold)
        y = uniform_below(self.K, word(raw, 1), gen)
        # Parity odd and want inside, or even and want outside: flip the row's lowest bit.
        flip = 1 - (((row & y).bit_count() + inside) & 1)
        return y ^ ((row & -row) * flip)

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        rows = indices + 1
        inside = bernoulli(gen, indices.size, self.threshold)
        y = gen.integers(0, self.K, size=indices.size, dtype=np.int64)
        odd = (np.bitwise_count(rows & y) & 1).astype(bool)
        flip = odd == inside
        return np.where(flip, y ^ (rows & -rows), y)

    def encode_many(self, batch: np.ndarray) -> list[Payload]:
        payloads: list[Payload] = batch.tolist()
        return payloads

    def check_payload(self, payload: object) -> Payload:
        return check_index(payload, self.K, self._bad)

    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        return decode_indices(payloads, self.K, self.check_payload)

    def supports(self, batch: np.ndarray, index: int) -> np.ndarray:
        import numpy as np

        even: np.ndarray = (np.bitwise_count(batch & (index + 1)) & 1) == 0
        return even

    def support_counts(self, batch: np.ndarray) -> np.ndarray:
        import numpy as np

        n = batch.size
        hist = np.bincount(batch, minlength=self.K)
        w = walsh_hadamard(hist)
        return ((n + w[1 : self.k + 1]) // 2).astype(np.int64)
