"""Generalized randomized response (k-RR, direct encoding) and binary randomized response."""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.base import Mechanism, Payload
from client_sdk.mechanisms.index_wire import check_index, decode_indices
from client_sdk.mechanisms.randomness import (
    SCALE,
    bernoulli,
    covering_epsilon,
    exact_threshold,
    largest_threshold,
    log_ratio,
    ratio_at_most,
    uniform_below,
)
from client_sdk.mechanisms.validation import check_domain, check_implied_epsilon

if TYPE_CHECKING:
    import numpy as np


_TWO_SCALE = 2 * SCALE


def keep_threshold(epsilon: float, others: int) -> int:
    """Largest T with ``T * others / (2**64 - T) <= e^epsilon``: keep w.p. T/2**64."""
    e = math.exp(epsilon)
    return largest_threshold(
        lambda t: ratio_at_most(t * others, SCALE - t, epsilon), e / (e + others)
    )


class GeneralizedRR(Mechanism):
    """k-ary randomized response (Wang et al., USENIX Security 2017).

    Privacy: report the true value w.p. ``p = e^eps/(e^eps+k-1)``, else a uniformly random other
    value; the largest ratio ``p/q`` is ``e^realised_epsilon``.
    Utility: ``Var[count_v] = n (e^eps+k-2)/(e^eps-1)^2 + c_v (k-2)/(e^eps-1)``.
    Wire report: the output's domain index (int). Decode O(n + k).
    Timing: ``perturb`` always draws the other value and selects by arithmetic, so its running
    time does not tell whether the true value was kept.
    """

    name = "grr"
    #: One output value per report: the tally is the multinomial output histogram.
    exact_channel = True

    def __init__(self, *, epsilon: float, domain: Sequence[str] | int) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self.threshold = keep_threshold(self.epsilon, self.k - 1)
        self._limit = SCALE - SCALE % (self.k - 1)  # largest multiple of k - 1 up to 2**64

    @property
    def exact_support_size(self) -> int:
        return 1

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """The true value w.p. ``T / 2**64``, each other value w.p. ``(1 - T/2**64) / (k-1)``."""
        p = Fraction(self.threshold, SCALE)
        return {y: p if y == index else (1 - p) / (self.k - 1) for y in range(self.k)}

    @property
    def realised_epsilon(self) -> float:
        t = self.threshold
        return log_ratio(t * (self.k - 1), SCALE - t)

    @property
    def p_star(self) -> float:
        return self.threshold / SCALE

    @property
    def q_star(self) -> float:
        return (SCALE - self.threshold) / SCALE / (self.k - 1)

    @property
    def report_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.k)))

    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        # randomness.draw/coin/at_least/select written inline: this is the hottest device path.
        raw = os.urandom(16) if gen is None else gen.bytes(16)  # randomness.draw(2, gen)
        w = int.from_bytes(raw[8:], "little")
        # w % (k - 1) is exactly uniform below the limit; the rare redraw depends on w alone.
        other = w % (self.k - 1) if w < self._limit else uniform_below(self.k - 1, w, gen)
        other += (other + _TWO_SCALE - index) >> 65  # skip index: uniform over the k - 1 others
        marked = int.from_bytes(raw[:8] + b"\x01", "little")  # 2**64 + u, fixed size
        keep = 2 - ((marked + SCALE - self.threshold) >> 64)  # [u < threshold], no comparison
        return (other, index)[keep]

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        n = indices.size
        keep = bernoulli(gen, n, self.threshold)
        other = gen.integers(0, self.k - 1, size=n, dtype=np.int64)
        other += other >= indices
        return np.where(keep, indices, other)

    def encode_many(self, batch: np.ndarray) -> list[Payload]:
        payloads: list[Payload] = batch.tolist()
        return payloads

    def check_payload(self, payload: object) -> Payload:
        return check_index(payload, self.k, self._bad)

    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        return decode_indices(payloads, self.k, self.check_payload)

    def support_counts(self, batch: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.bincount(batch, minlength=self.k).astype(np.int64)

    def supports(self, batch: np.ndarray, index: int) -> np.ndarray:
        hit: np.ndarray = batch == index
        return hit

    def channel(self) -> np.ndarray:
        """``P[y | x]`` as a k x k matrix (row x, column y), exactly as sampled."""
        import numpy as np

        m = np.full((self.k, self.k), self.q_star)
        np.fill_diagonal(m, self.p_star)
        return m


class RandomizedResponse(GeneralizedRR):
    """Binary randomized response: keep the true answer w.p. ``p = e^eps/(1+e^eps)``, else flip.

    Warner (1965). ``p`` may be given instead of epsilon; ``p = 3/4`` is the two-coin variant of
    'Programming Differential Privacy' ch. 13 (truthful on heads, else a second coin decides),
    which has the same output distribution and epsilon = ln 3. With ``p`` the stated epsilon is
    the one ``p``'s exact threshold realises, rounded up (never below ``realised_epsilon``).
    Utility: ``Var[count] = n e^eps/(e^eps-1)^2`` (does not depend on the true count).
    """

    name = "rr"
    max_k = 2

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        domain: Sequence[str] | int = ("no", "yes"),
        p: float | None = None,
    ) -> None:
        if p is None:
            if epsilon is None:
                raise InvalidParameter("rr needs epsilon or a keep probability p")
            super().__init__(epsilon=epsilon, domain=domain)
            self._p = None
            return
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.5 < p < 1:
            raise InvalidParameter(f"p must be a probability in (0.5, 1), got {p!r}")
        implied = math.log(p / (1 - p))
        check_implied_epsilon(p, implied)
        if epsilon is not None and not math.isclose(epsilon, implied, rel_tol=1e-9):
            raise InvalidParameter(
                f"p={p} implies epsilon={implied!r}; got epsilon={epsilon!r}: give one of them"
            )
        check_domain(domain, max_k=2, mechanism=self.name)
        super().__init__(epsilon=implied, domain=domain)
        self._p = float(p)
        self.threshold = exact_threshold(p)
        self.epsilon = covering_epsilon(self.threshold, SCALE - self.threshold)

    def params(self) -> dict[str, Any]:
        return {} if self._p is None else {"p": self._p}
