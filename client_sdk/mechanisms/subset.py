"""Subset selection (Wang et al. 2016 arXiv 1607.08025; Ye & Barg 2018)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import bitvector
from client_sdk.mechanisms.base import Payload
from client_sdk.mechanisms.bitvector_base import BitVectorMechanism
from client_sdk.mechanisms.criterion import best_subset_size, subset_probabilities
from client_sdk.mechanisms.randomness import (
    SCALE,
    at_least,
    bernoulli,
    coin,
    draw,
    largest_threshold,
    log_ratio,
    ratio_at_most,
    select,
    uniform_below,
    word,
)

if TYPE_CHECKING:
    import numpy as np

_BLOCK = 1 << 22


def subset_v0(epsilon: float, k: int, d: int) -> float:
    """Per-report variance of an absent item for subset size ``d`` (ideal probabilities)."""
    p, q = subset_probabilities(epsilon, k, d)
    return q * (1 - q) / (p - q) ** 2


def optimal_subset_size(epsilon: float, k: int) -> int:
    """The subset size with the smallest mean count variance over the k values.

    Chosen by :func:`client_sdk.mechanisms.criterion.best_subset_size` (the error analysts
    get), not by ``subset_v0`` (an absent value's variance), which picks d = 1 at epsilon 2,
    k 14 where d = 2 is 7% better on average.
    """
    return best_subset_size(epsilon, k)


class SubsetSelection(BitVectorMechanism):
    """Report a random subset of ``d`` values that contains the true one w.p. ``p``.

    Privacy: ``p = d e^eps / (d e^eps + k - d)``; a subset holding x has probability
    ``p / C(k-1, d-1)``, one without it ``(1-p) / C(k-1, d)``, so the largest ratio is
    ``p/(1-p) * (k-d)/d = e^realised_epsilon``.
    Utility: ``p* = p``, ``q* = (p(d-1) + (1-p)d)/(k-1)``; asymptotically optimal for l2 loss.
    Wire report: the subset as a k-bit vector (packed, base64) with exactly d ones.
    Timing: ``perturb`` always draws d of the other values (a partial Fisher-Yates shuffle) and
    lets the coin choose, by arithmetic, whether the last slot holds the true value or the d-th
    other; every slot costs one byte update. Its running time does not tell the coin.
    """

    name = "ss"
    max_k = 4096

    def __init__(
        self, *, epsilon: float, domain: Sequence[str] | int, d: int | None = None
    ) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        if d is None:
            d = optimal_subset_size(self.epsilon, self.k)
        elif isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < self.k:
            raise InvalidParameter(
                f"subset size d must be an integer in [1, {self.k - 1}], got {d!r}"
            )
        self.d = d
        e, k, eps = math.exp(self.epsilon), self.k, self.epsilon
        self.threshold = largest_threshold(
            lambda t: ratio_at_most(t * (k - d), (SCALE - t) * d, eps), d * e / (d * e + k - d)
        )

    def params(self) -> dict[str, Any]:
        return {"d": self.d}

    @property
    def exact_support_size(self) -> int:
        return self.d

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """A d-subset (as its bits): with the true value w.p. ``T / 2**64`` spread uniformly
        over the subsets holding it, else uniformly over those that do not."""
        p, k, d = Fraction(self.threshold, SCALE), self.k, self.d
        with_x, without_x = math.comb(k - 1, d - 1), math.comb(k - 1, d)
        out: dict[Hashable, Fraction] = {}
        for subset in itertools.combinations(range(k), d):
            bits = tuple(int(i in subset) for i in range(k))
            out[bits] = p / with_x if index in subset else (1 - p) / without_x
        return out

    @property
    def realised_epsilon(self) -> float:
        t = self.threshold
        return log_ratio(t * (self.k - self.d), (SCALE - t) * self.d)

    @property
    def p_star(self) -> float:
        return self.threshold / SCALE

    @property
    def q_star(self) -> float:
        p, d = self.p_star, self.d
        return (p * (d - 1) + (1 - p) * d) / (self.k - 1)

    @property
    def report_bits(self) -> int:
        return min(self.k, self.d * math.ceil(math.log2(self.k)))

    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        k, d = self.k, self.d
        raw = draw(d + 1, gen)
        include = coin(raw, d, self.threshold)
        # The first d draws of a uniform random ordering of the k - 1 others, by a partial
        # Fisher-Yates shuffle over a sparse map (O(d), whatever k). Its first d - 1 form a
        # uniform (d-1)-subset, all d a uniform d-subset.
        moved: dict[int, int] = {}
        chosen = []
        for j in range(d):
            r = j + uniform_below(k - 1 - j, word(raw, j), gen)
            pick = moved.get(r, r)
            moved[r] = moved.get(j, j)
            chosen.append(pick + at_least(pick, index))  # skip the true value's position
        chosen[-1] = select(include, index, chosen[-1])
        out = bytearray((k + 7) // 8)
        for position in chosen:
            out[position >> 3] |= 1 << (position & 7)
        return bitvector.encode_bytes(bytes(out))

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        n, k, d = indices.size, self.k, self.d
        out = np.empty((n, (k + 7) // 8), dtype=np.uint8)
        step = max(1, _BLOCK // k)
        for start in range(0, n, step):
            idx = indices[start : start + step]
            rows = np.arange(idx.size)
            include = bernoulli(gen, idx.size, self.threshold)
            # Random keys: the d smallest form a uniform subset; the true value's key forces
            # it in (-1) or out (2) according to the coin.
            keys = gen.random((idx.size, k))
            keys[rows, idx] = np.where(include, -1.0, 2.0)
            chosen = np.argpartition(keys, d - 1, axis=1)[:, :d]
            bits = np.zeros((idx.size, k), dtype=bool)
            bits[rows[:, None], chosen] = True
            out[start : start + idx.size] = bitvector.pack_rows(bits)
        return out

    def check_payload(self, payload: object) -> Payload:
        ones = int.from_bytes(self._check_bits(payload), "little").bit_count()
        if ones != self.d:
            raise self._bad(f"a subset report has exactly {self.d} values, got {ones}")
        return payload  # type: ignore[return-value]

    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        import numpy as np

        batch = super().decode_many(payloads)
        counts = bitvector.popcounts(batch)
        wrong = np.flatnonzero(counts != self.d)
        if wrong.size:
            i = int(wrong[0])
            raise self._bad(
                f"a subset report has exactly {self.d} values, got {int(counts[i])}", index=i
            )
        return batch
