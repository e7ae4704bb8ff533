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
    ) -> None:
        super().__init__(epsilon=epsilon, max_length=max_length)
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
        return out

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
        level = uniform_below(self.levels, word(draw(1, gen), 0), gen)
        return [level, *self.sketches[level].perturb(self.prefix(data, level), gen)]

    def _perturb_batch(self, datas: list[bytes], gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        n = len(datas)
        levels = gen.integers(0, self.levels, size=n, dtype=np.int64)
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

        if not all(type(p) is list and p and type(p[0]) is int for p in payloads):
            return None
        try:
            levels = np.fromiter((p[0] for p in payloads), dtype=np.int64, count=len(payloads))  # type: ignore[index]
        except OverflowError:
            return None
        if levels.min() < 0 or levels.max() >= self.levels:
            return None
        inner = self.sketches[0].decode_fast([p[1:] for p in payloads])  # type: ignore[index]
        if inner is None:
            return None
        return np.concatenate([levels.astype(inner.dtype).reshape(-1, 1), inner], axis=1)

    def _decode_checked(self, payloads: list[list[Any]]) -> np.ndarray:
        import numpy as np

        inner = self.sketches[0].decode([p[1:] for p in payloads])
        levels = np.asarray([p[0] for p in payloads], dtype=inner.dtype).reshape(-1, 1)
        return np.concatenate([levels, inner], axis=1)

    def _counts(self, batch: np.ndarray) -> np.ndarray:
        import numpy as np

        levels = batch[:, 0].astype(np.int64)
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
                out[(t, y)] = prob / self.levels
        return out

    def output_key(self, payload: object) -> Hashable:
        if not isinstance(payload, list) or not payload:
            raise InvalidReport("not a report")
        return (payload[0], self.sketches[payload[0]].output_key(payload[1:]))
