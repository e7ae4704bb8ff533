"""Discovery: the Prefix Extending Method (Wang, Li, Jha, "Locally Differentially Private
Heavy Hitter Identification", IEEE TDSC 2019), over bytes, with sketch oracles per level.

The device pads its normalised string with NUL bytes to ``max_length`` = L and picks a prefix
level ``t`` uniformly in ``[0, L)`` (OS randomness, never tied to an identifier); it reports the
prefix of ``t + 1`` bytes through level ``t``'s own sketch oracle (hash tag ``ldp-pem-<t>``):
``[t, *oracle report]``. One report per device per window; the level is part of the report.

Privacy: the level is uniform and independent of the value, and each level's oracle is
``realised_epsilon``-LDP for any two prefixes, so the whole report is too (exact ratio test).

The collector (``aggregator.discover``) walks the levels: the candidates of level 0 are every
first byte; level ``t`` extends the ``keep`` best prefixes of level ``t - 1`` by every byte (NUL:
the string ended). A string of ``l < L`` bytes is fully identified by every level ``t >= l``
(its padded prefix is the string and NULs), so its count pools those levels by inverse
variance: short strings, the common case, waste fewer reports than in the original method.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.openended.base import OpenDomainMechanism
from client_sdk.mechanisms.openended.hashing import all_buckets, row_buckets
from client_sdk.mechanisms.openended.sketch import CmsSketch, HcmsSketch, Sketch
from client_sdk.mechanisms.randomness import draw, uniform_below, word

if TYPE_CHECKING:
    import numpy as np

ORACLES = ("cms", "hcms")
#: Largest (level, row, byte) histogram the tally builds in one ``bincount``.
_GROUPED_BINS = 1 << 22
#: Largest total of the level weights (the level is one uniform draw below it).
MAX_TOTAL_WEIGHT = 1 << 32


def check_level_weights(weights: object, levels: int) -> tuple[int, ...]:
    """``levels`` positive integer weights (None: all 1), their total at most 2**32."""
    if weights is None:
        return (1,) * levels
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise InvalidParameter("level_weights must be a list of positive integers, one per level")
    out = tuple(weights)
    if (
        len(out) != levels
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in out)
        or sum(out) > MAX_TOTAL_WEIGHT
    ):
        raise InvalidParameter(
            f"level_weights must be {levels} positive integers (one per byte of max_length) "
            f"totalling at most 2**32, got {weights!r}"
        )
    return out


class PrefixExtending(OpenDomainMechanism):
    """PEM over bytes: one prefix level per report, a sketch oracle per level.

    Defaults: ``oracle="cms"`` with ``flips="optimized"`` (the lowest variance per report),
    sketch 1024 x 16 per level. Tally: ``max_length`` sketch blocks.
    """

    name = "pem"
    discovers = True

    def __init__(
        self,
        *,
        epsilon: float,
        max_length: int,
        width: int = 1024,
        depth: int = 16,
        oracle: str = "cms",
        flips: str = "optimized",
        level_weights: Sequence[int] | None = None,
    ) -> None:
        super().__init__(epsilon=epsilon, max_length=max_length)
        self.level_weights = check_level_weights(level_weights, self.max_length)
        self._cumulative = list(itertools.accumulate(self.level_weights))
        self._total = self._cumulative[-1]
        if oracle not in ORACLES:
            raise InvalidParameter(f"oracle must be one of {ORACLES}, got {oracle!r}")
        self.oracle = oracle
        self.flips = flips
        self.sketches: list[Sketch] = []
        for t in range(self.max_length):
            tag = f"ldp-pem-{t}".encode()
            if oracle == "cms":
                self.sketches.append(
                    CmsSketch(epsilon=self.epsilon, width=width, depth=depth, tag=tag, flips=flips)
                )
            else:
                self.sketches.append(
                    HcmsSketch(epsilon=self.epsilon, width=width, depth=depth, tag=tag)
                )

    @property
    def levels(self) -> int:
        return self.max_length

    @property
    def width(self) -> int:
        return self.sketches[0].width

    @property
    def depth(self) -> int:
        return self.sketches[0].depth

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"width": self.width, "depth": self.depth, "oracle": self.oracle}
        if self.oracle == "cms":
            out["flips"] = self.flips
        if len(set(self.level_weights)) > 1:  # uniform: the config of earlier campaigns
            out["level_weights"] = list(self.level_weights)
        return out

    def level_probability(self, level: int) -> Fraction:
        """``P[a device reports level level]``: its weight over the total, exactly."""
        return Fraction(self.level_weights[level], self._total)

    def _level_of(self, u: int) -> int:
        """The level of a uniform integer ``u`` in ``[0, total weight)``."""
        return bisect.bisect_right(self._cumulative, u)

    @property
    def realised_epsilon(self) -> float:
        return self.sketches[0].realised_epsilon

    @property
    def report_bits(self) -> int:
        return self.sketches[0].report_bits + (self.levels - 1).bit_length()

    @property
    def tally_size(self) -> int:
        return self.levels * self.sketches[0].size

    def prefix(self, data: bytes, level: int) -> bytes:
        """The key level ``level`` hashes: the first ``level + 1`` bytes, NUL-padded."""
        return data.ljust(self.max_length, b"\x00")[: level + 1]

    def level_buckets(self, keys: list[bytes], level: int) -> np.ndarray:
        """``(len(keys), depth)`` buckets of level ``level``'s hash rows."""
        return all_buckets(keys, self.depth, self.width, self.sketches[level].tag)

    def block(self, tally_counts: np.ndarray, level: int) -> np.ndarray:
        size = self.sketches[0].size
        return tally_counts[level * size : (level + 1) * size]

    def _perturb_one(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        level = self._level_of(uniform_below(self._total, word(draw(1, gen), 0), gen))
        return [level, *self.sketches[level].perturb(self.prefix(data, level), gen)]

    def _perturb_batch(self, datas: list[bytes], gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        n = len(datas)
        draws = gen.integers(0, self._total, size=n, dtype=np.int64)
        levels = np.searchsorted(np.asarray(self._cumulative), draws, side="right")
        parts: list[np.ndarray] = []
        order = []
        for t in range(self.levels):
            idx = np.flatnonzero(levels == t)
            if idx.size == 0:
                continue
            sk = self.sketches[t]
            keys = [self.prefix(datas[i], t) for i in idx.tolist()]
            rows = gen.integers(0, self.depth, size=idx.size, dtype=np.int64)
            inner = sk.perturb_batch(rows, row_buckets(keys, rows, self.width, sk.tag), gen)
            parts.append(np.concatenate([np.full((idx.size, 1), t, dtype=inner.dtype), inner], 1))
            order.append(idx)
        if not parts:
            if self.oracle == "cms":
                return np.zeros((0, 3 + (self.width + 7) // 8), dtype=np.uint8)
            return np.zeros((0, 4), dtype=np.int64)
        out = np.empty((n, parts[0].shape[1]), dtype=parts[0].dtype)
        for idx, part in zip(order, parts, strict=True):
            out[idx] = part
        return out

    def encode_many(self, batch: np.ndarray) -> list[Any]:
        import numpy as np

        out: list[Any] = [None] * batch.shape[0]
        levels = batch[:, 0].astype(np.int64)
        for t in range(self.levels):
            idx = np.flatnonzero(levels == t)
            if idx.size:
                for i, inner in zip(
                    idx.tolist(), self.sketches[t].encode(batch[idx, 1:]), strict=True
                ):
                    out[i] = [t, *inner]
        return out

    def _check(self, payload: list[Any]) -> list[Any]:
        if not payload or type(payload[0]) is not int or not 0 <= payload[0] < self.levels:
            raise InvalidReport(
                f"a pem report is [level, *oracle report] with level an integer in "
                f"[0, {self.levels})"
            )
        return [payload[0], *self.sketches[payload[0]].check(payload[1:])]

    def _decode_fast(self, payloads: Sequence[object]) -> np.ndarray | None:
        import numpy as np

        from client_sdk.mechanisms.openended.sketch import int_column

        length = 3 if self.oracle == "cms" else 4
        levels = int_column(payloads, 0, length, 0, self.levels)
        if levels is None:
            return None
        inner = self.sketches[0].decode_fast(payloads, start=1)
        if inner is None:
            return None
        out = np.empty((inner.shape[0], 1 + inner.shape[1]), dtype=inner.dtype)
        out[:, 0] = levels
        out[:, 1:] = inner
        return out

    def _decode_checked(self, payloads: list[list[Any]]) -> np.ndarray:
        import numpy as np

        inner = self.sketches[0].decode([p[1:] for p in payloads])
        levels = np.asarray([p[0] for p in payloads], dtype=inner.dtype).reshape(-1, 1)
        return np.concatenate([levels, inner], axis=1)

    def _counts(self, batch: np.ndarray) -> np.ndarray:
        import numpy as np

        levels = batch[:, 0].astype(np.int64)
        first = self.sketches[0]
        groups_n = self.levels * self.depth
        if isinstance(first, CmsSketch) and groups_n * 256 <= _GROUPED_BINS:
            # Every level's rows at once: the group of a report is (level, row).
            groups = levels * self.depth + first.rows_of(batch[:, 1:])
            return first.grouped_counts(groups, groups_n, batch[:, 3:]).reshape(-1)
        return np.concatenate(
            [sk.block_counts(batch[levels == t, 1:]) for t, sk in enumerate(self.sketches)]
        )

    def output_distribution(self, value: str) -> dict[Hashable, Fraction]:
        data = self.normalise(value)
        out: dict[Hashable, Fraction] = {}
        for t, sk in enumerate(self.sketches):
            key = self.prefix(data, t)
            buckets = [sk.bucket_of(key, j) for j in range(self.depth)]
            for y, prob in sk.output_distribution(buckets).items():
                out[(t, y)] = prob * self.level_probability(t)
        return out

    def output_key(self, payload: object) -> Hashable:
        if not isinstance(payload, list) or not payload:
            raise InvalidReport("not a report")
        return (payload[0], self.sketches[payload[0]].output_key(payload[1:]))
