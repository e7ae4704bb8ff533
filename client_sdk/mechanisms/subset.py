"""Subset selection (Wang et al. 2016 arXiv 1607.08025; Ye & Barg 2018)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Hashable, Iterable, Sequence
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

    from client_sdk.mechanisms.tally import Tally

_BLOCK = 1 << 22

#: Largest domain whose report patterns are keyed by a k-bit code (2^16 codes); shared with
#: the pattern MLE of unary encoding (``aggregator.pattern``).
MAX_PATTERN_K = 16
#: Largest number of d-subsets ``C(k, d)`` a subset-selection tally keeps counts of (one int
#: per subset per window): every d up to k = 13, d <= 5 at k = 14 and d <= 4 at k = 15-16 (and
#: the mirror sizes k - d): on Adult, every SS ``auto`` picks for occupation and education but
#: education's at epsilon 0.5 (d = 6, 8,008 subsets).
MAX_PATTERN_CELLS = 2048


def keeps_patterns(k: int, d: int) -> bool:
    """Whether an SS tally over ``k`` values with subsets of ``d`` may keep its pattern counts:
    ``d >= 2`` (with d = 1 the support counts are the patterns), ``k <= MAX_PATTERN_K`` and
    ``C(k, d) <= MAX_PATTERN_CELLS``."""
    return 2 <= d < k <= MAX_PATTERN_K and math.comb(k, d) <= MAX_PATTERN_CELLS


@functools.lru_cache(maxsize=64)
def subset_members(k: int, d: int) -> np.ndarray:
    """``C(k, d) x k`` 0/1 matrix (int64): row r marks the r-th d-subset of ``range(k)`` in
    ``itertools.combinations`` order (a pattern tally's layout). Read-only, cached."""
    import numpy as np

    rows = list(itertools.combinations(range(k), d))
    out = np.zeros((len(rows), k), dtype=np.int64)
    for r, subset in enumerate(rows):
        out[r, list(subset)] = 1
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def _rank_of_code(k: int, d: int) -> np.ndarray:
    """Per k-bit code (bit v: value v is in the subset), its row in :func:`subset_members`;
    -1 for codes with other than d bits. ``k <= MAX_PATTERN_K``: at most 2^16 entries."""
    import numpy as np

    table = np.full(1 << k, -1, dtype=np.int64)
    codes = subset_members(k, d) @ (np.int64(1) << np.arange(k, dtype=np.int64))
    table[codes] = np.arange(codes.size)
    table.setflags(write=False)
    return table


def pattern_counts(batch: np.ndarray, k: int, d: int) -> np.ndarray:
    """How many rows of a packed batch (``ceil(k/8)`` bytes, bit v of the little-endian row:
    value v) are each d-subset, in :func:`subset_members` order; rows already checked to hold
    exactly d bits (``decode_many``)."""
    import numpy as np

    codes = np.zeros(batch.shape[0], dtype=np.int64)
    for j in range(batch.shape[1]):
        codes |= batch[:, j].astype(np.int64) << (8 * j)
    return np.bincount(_rank_of_code(k, d)[codes], minlength=math.comb(k, d)).astype(np.int64)


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
        self,
        *,
        epsilon: float,
        domain: Sequence[str] | int,
        d: int | None = None,
        patterns: bool = False,
    ) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        if d is None:
            d = optimal_subset_size(self.epsilon, self.k)
        elif isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < self.k:
            raise InvalidParameter(
                f"subset size d must be an integer in [1, {self.k - 1}], got {d!r}"
            )
        self.d = d
        if not isinstance(patterns, bool):
            raise InvalidParameter(f"patterns must be true or false, got {patterns!r}")
        if patterns and not keeps_patterns(self.k, d):
            raise InvalidParameter(
                f"pattern counts are kept for 2 <= d, k <= {MAX_PATTERN_K} and C(k, d) <= "
                f"{MAX_PATTERN_CELLS}; k = {self.k}, d = {d} has C(k, d) = {math.comb(self.k, d)}"
            )
        #: Whether the tally also counts each reported subset (:class:`PatternTally`): set by
        #: ``auto`` where :func:`keeps_patterns` allows; collector-side only, the reports and
        #: their privacy are the same either way.
        self.patterns = patterns
        e, k, eps = math.exp(self.epsilon), self.k, self.epsilon
        self.threshold = largest_threshold(
            lambda t: ratio_at_most(t * (k - d), (SCALE - t) * d, eps), d * e / (d * e + k - d)
        )

    def params(self) -> dict[str, Any]:
        # "patterns" only when set: the configs (and digests) of campaigns created before it
        # existed stay what they were.
        return {"d": self.d, "patterns": True} if self.patterns else {"d": self.d}

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

    # -- the tally: support counts, and the subsets' counts where kept ------------------------

    def tally(self, reports: np.ndarray | Iterable[object]) -> Tally:
        """The tally of a batch array or of wire payloads; a :class:`PatternTally` when the
        mechanism keeps patterns."""
        if not self.patterns:
            return super().tally(reports)
        from client_sdk.mechanisms.randomness import require_numpy

        require_numpy()
        import numpy as np

        from client_sdk.mechanisms.tally import PatternTally

        batch = reports if isinstance(reports, np.ndarray) else self.decode_many(list(reports))
        return PatternTally.of_patterns(self.k, self.d, pattern_counts(batch, self.k, self.d))

    def empty_tally(self) -> Tally:
        if not self.patterns:
            return super().empty_tally()
        import numpy as np

        from client_sdk.mechanisms.tally import PatternTally

        return PatternTally.of_patterns(
            self.k, self.d, np.zeros(math.comb(self.k, self.d), dtype=np.int64)
        )

    def tally_from(self, n: int, vector: Sequence[int]) -> Tally:
        """Rebuild a tally from ``(n, vector())``: k support counts, then (when the mechanism
        keeps patterns) ``C(k, d)`` pattern counts; checks the layout."""
        if not self.patterns:
            return super().tally_from(n, vector)
        import numpy as np

        from client_sdk.mechanisms.tally import PatternTally

        k, cells = self.k, math.comb(self.k, self.d)
        if len(vector) != k + cells:
            raise InvalidParameter(
                f"an ss tally with patterns has {k} support counts and {cells} pattern counts, "
                f"got {len(vector)} numbers"
            )
        values = np.asarray(vector)
        return PatternTally(n, values[:k], values[k:], self.d)
