"""Frequency oracles for an open domain: ``cms`` (Count-Mean-Sketch) and ``hcms`` (Hadamard CMS).

Both estimate the count of any candidate string (``aggregator.estimate(mech, tally,
candidates=[...])``); neither can list the heavy hitters by itself (``pem`` does). The math is
in :mod:`.sketch`; here the device-facing contract.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms.openended.base import OpenDomainMechanism
from client_sdk.mechanisms.openended.hashing import all_buckets, row_buckets
from client_sdk.mechanisms.openended.sketch import CmsSketch, HcmsSketch, Sketch

if TYPE_CHECKING:
    import numpy as np


class SketchOracle(OpenDomainMechanism):
    """A frequency oracle over one public sketch (``width`` buckets, ``depth`` hash rows)."""

    sketch: Sketch

    @property
    def width(self) -> int:
        return self.sketch.width

    @property
    def depth(self) -> int:
        return self.sketch.depth

    @property
    def realised_epsilon(self) -> float:
        return self.sketch.realised_epsilon

    @property
    def tally_size(self) -> int:
        return self.sketch.size

    def buckets(self, datas: list[bytes]) -> np.ndarray:
        """``(len(datas), depth)``: every row's bucket of each normalised string."""
        return all_buckets(datas, self.depth, self.width, self.sketch.tag)

    def _perturb_one(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        return self.sketch.perturb(data, gen)

    def _perturb_batch(self, datas: list[bytes], gen: np.random.Generator) -> np.ndarray:
        import numpy as np

        rows = gen.integers(0, self.depth, size=len(datas), dtype=np.int64)
        buckets = row_buckets(datas, rows, self.width, self.sketch.tag)
        return self.sketch.perturb_batch(rows, buckets, gen)

    def encode_many(self, batch: np.ndarray) -> list[Any]:
        return self.sketch.encode(batch)

    def _check(self, payload: list[Any]) -> list[Any]:
        return self.sketch.check(payload)

    def _decode_fast(self, payloads: Sequence[object]) -> np.ndarray | None:
        return self.sketch.decode_fast(payloads)

    def _decode_checked(self, payloads: list[list[Any]]) -> np.ndarray:
        return self.sketch.decode(payloads)

    def _counts(self, batch: np.ndarray) -> np.ndarray:
        return self.sketch.block_counts(batch)

    def output_distribution(self, value: str) -> dict[Hashable, Fraction]:
        data = self.normalise(value)
        buckets = [self.sketch.bucket_of(data, j) for j in range(self.depth)]
        return self.sketch.output_distribution(buckets)

    def output_key(self, payload: object) -> Hashable:
        if not isinstance(payload, list):
            raise InvalidReport("not a report")
        return self.sketch.output_key(payload)

    def count_variance(self, n: int, counts: Any) -> Any:
        """Variance of Apple's unbiased count of each item (random-hash model), for ``n``
        reports and true ``counts``: ``(w/(w-1))^2 (n v_other + c (v_hold - v_other))``."""
        import numpy as np

        s, w = self.sketch, self.width
        c = np.asarray(counts, dtype=float)
        return (w / (w - 1)) ** 2 * (n * s.v_other + c * (s.v_hold - s.v_other))


class CountMeanSketch(SketchOracle):
    """Apple's Count-Mean-Sketch: a row's ``width`` bits, the true bucket's set w.p. ``p``.

    ``flips="symmetric"`` (Apple: each bit flipped w.p. ``1/(e^(eps/2)+1)``) or
    ``"optimized"`` (OUE's ``p = 1/2``, ``q = 1/(e^eps+1)``: about half the variance at eps 4).
    Report ``[row, base64 of width bits]``: ``width/8 + 2`` bytes. Defaults 1024 x 32 (Apple's).
    """

    name = "cms"

    def __init__(
        self,
        *,
        epsilon: float,
        max_length: int,
        width: int = 1024,
        depth: int = 32,
        flips: str = "symmetric",
    ) -> None:
        super().__init__(epsilon=epsilon, max_length=max_length)
        self.sketch = CmsSketch(
            epsilon=self.epsilon, width=width, depth=depth, tag=b"ldp-cms", flips=flips
        )

    def params(self) -> dict[str, Any]:
        assert isinstance(self.sketch, CmsSketch)
        return {"width": self.width, "depth": self.depth, "flips": self.sketch.flips}

    @property
    def report_bits(self) -> int:
        return self.sketch.report_bits


class HadamardCountMeanSketch(SketchOracle):
    """Apple's Hadamard Count-Mean-Sketch: one randomised Hadamard sign per report.

    Report ``[row, column, bit]``: ``1 + log2 width + log2 depth`` bits. The collector's sketch
    (``2 depth width`` counts) is the mergeable tally; decode is one Walsh-Hadamard transform
    per row. Defaults: width 2**16 (collisions cost nothing in report size), depth 16.
    """

    name = "hcms"

    def __init__(
        self, *, epsilon: float, max_length: int, width: int = 1 << 16, depth: int = 16
    ) -> None:
        super().__init__(epsilon=epsilon, max_length=max_length)
        self.sketch = HcmsSketch(epsilon=self.epsilon, width=width, depth=depth, tag=b"ldp-hcms")

    def params(self) -> dict[str, Any]:
        return {"width": self.width, "depth": self.depth}

    @property
    def report_bits(self) -> int:
        return self.sketch.report_bits
