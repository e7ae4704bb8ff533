"""Unary encoding: symmetric (basic one-time RAPPOR) and optimized (Wang et al. 2017)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import bitvector
from client_sdk.mechanisms.base import Payload, bit_vector_distribution
from client_sdk.mechanisms.bitvector_base import BitVectorMechanism
from client_sdk.mechanisms.grr import keep_threshold
from client_sdk.mechanisms.randomness import (
    SCALE,
    below,
    bernoulli,
    covering_epsilon,
    draw_lanes,
    exact_threshold,
    lane_digits,
    lane_offsets,
    largest_threshold,
    log_ratio,
    ratio_at_most,
    u32_array,
)
from client_sdk.mechanisms.validation import check_implied_epsilon

if TYPE_CHECKING:
    import numpy as np

_BLOCK = 1 << 22  # random draws per vectorised block (16 MiB of uint32)


class UnaryEncoding(BitVectorMechanism):
    """One-hot encode the value, then report bit i as 1 w.p. p if it is the true bit, else q.

    Privacy: changing the value changes two bits, so the largest ratio is
    ``p(1-q) / ((1-p) q) = e^realised_epsilon``; the true bit is *replaced* by a fresh
    Bernoulli(p), never OR-ed with the background noise.
    Utility: ``count_v = (C_v - n q)/(p - q)``, ``Var = n q(1-q)/(p-q)^2 + c_v (1-p-q)/(p-q)``.
    Wire report: k bits, packed and base64-encoded (see ``bitvector``). Decode O(nk/8).
    Timing: ``perturb`` compares every bit's draw with its threshold (``p`` at the true value,
    ``q`` elsewhere) by arithmetic, the same work whatever the coins say.
    """

    max_k = 4096
    threshold_p: int
    threshold_q: int

    def _set_thresholds(self, tp: int, tq: int) -> None:
        if not 0 < tq < tp < SCALE:
            raise InvalidParameter("unary encoding needs 0 < q < p < 1")
        self.threshold_p, self.threshold_q = tp, tq
        self._nbytes = (self.k + 7) // 8
        # Lanes 0..k-1 draw the background coins (q), lane k the true bit's coin (p).
        self._offsets = lane_offsets(self.k, tq) + ((SCALE - tp) << (72 * self.k))

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """Independent bits: the true one set w.p. ``Tp / 2**64``, every other w.p. ``Tq``."""
        return bit_vector_distribution(
            self.k, index, Fraction(self.threshold_p, SCALE), Fraction(self.threshold_q, SCALE)
        )

    @property
    def realised_epsilon(self) -> float:
        tp, tq = self.threshold_p, self.threshold_q
        return log_ratio(tp * (SCALE - tq), (SCALE - tp) * tq)

    @property
    def p_star(self) -> float:
        return self.threshold_p / SCALE

    @property
    def q_star(self) -> float:
        return self.threshold_q / SCALE

    @property
    def report_bits(self) -> int:
        return self.k

    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        k = self.k
        digits = lane_digits(draw_lanes(k + 1, gen), self._offsets)
        # The true bit is replaced by a fresh Bernoulli(p), never OR-ed with the background.
        digits[index] = digits[k]
        return bitvector.encode_bytes(int(digits[k - 1 :: -1], 2).to_bytes(self._nbytes, "little"))

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        n, k = indices.size, self.k
        out = np.empty((n, self._nbytes), dtype=np.uint8)
        step = max(1, _BLOCK // k)
        for start in range(0, n, step):
            idx = indices[start : start + step]
            rows = np.arange(idx.size)
            bits = below(gen, u32_array(gen, (idx.size, k)), self.threshold_q)
            bits[rows, idx] = bernoulli(gen, idx.size, self.threshold_p)
            out[start : start + idx.size] = bitvector.pack_rows(bits)
        return out


class SymmetricUnaryEncoding(UnaryEncoding):
    """SUE / basic one-time RAPPOR: ``p = e^(eps/2)/(e^(eps/2)+1)``, ``q = 1 - p``.

    ``p`` may be given instead of epsilon: ``p = 0.75`` (q = 0.25) is the unary encoding of
    'Programming Differential Privacy' ch. 13, with epsilon = ln 9. With ``p`` the stated
    epsilon is the one ``p``'s exact threshold realises, rounded up (never below
    ``realised_epsilon``).
    """

    name = "sue"

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        domain: Sequence[str] | int,
        p: float | None = None,
    ) -> None:
        if p is None:
            if epsilon is None:
                raise InvalidParameter("sue needs epsilon or a keep probability p")
            super().__init__(epsilon=epsilon, domain=domain)
            half = math.exp(self.epsilon / 2)
            eps = self.epsilon
            tp = largest_threshold(
                lambda t: ratio_at_most(t * t, (SCALE - t) ** 2, eps), half / (half + 1)
            )
            self._p = None
        else:
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.5 < p < 1:
                raise InvalidParameter(f"p must be a probability in (0.5, 1), got {p!r}")
            implied = 2 * math.log(p / (1 - p))
            check_implied_epsilon(p, implied)
            if epsilon is not None and not math.isclose(epsilon, implied, rel_tol=1e-9):
                raise InvalidParameter(
                    f"p={p} implies epsilon={implied!r}; got epsilon={epsilon!r}: give one of them"
                )
            super().__init__(epsilon=implied, domain=domain)
            tp = exact_threshold(p)
            self._p = float(p)
        self._set_thresholds(tp, SCALE - tp)
        if self._p is not None:
            self.epsilon = covering_epsilon(tp * tp, (SCALE - tp) ** 2)

    def params(self) -> dict[str, Any]:
        return {} if self._p is None else {"p": self._p}


class OptimizedUnaryEncoding(UnaryEncoding):
    """OUE (Wang et al., USENIX Security 2017): ``p = 1/2``, ``q = 1/(e^eps + 1)``.

    Minimises the variance of an absent item: ``Var = n 4e^eps/(e^eps-1)^2 + c_v``.
    """

    name = "oue"

    def __init__(self, *, epsilon: float, domain: Sequence[str] | int) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        # The ratio is (1-q)/q; the largest 1-q with (1-q)/q <= e^eps is a keep threshold.
        self._set_thresholds(SCALE // 2, SCALE - keep_threshold(self.epsilon, 1))
