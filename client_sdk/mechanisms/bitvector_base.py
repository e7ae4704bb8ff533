"""Mechanisms whose report is a k-bit vector: unary encoding, subset selection, RAPPOR.

The report supports exactly the values whose bit is set; wire form, parser, tally and support
test are defined once here (see ``bitvector`` for the encoding).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import bitvector
from client_sdk.mechanisms.base import Mechanism, Payload

if TYPE_CHECKING:
    import numpy as np


class BitVectorMechanism(Mechanism):
    """A mechanism reporting ``ceil(k/8)`` packed bytes, base64 on the wire."""

    def encode_many(self, batch: np.ndarray) -> list[Payload]:
        return list[Payload](bitvector.encode_rows(batch))

    def _check_bits(self, payload: object) -> bytes:
        """The report's bytes, or :class:`InvalidReport` naming the mechanism."""
        try:
            return bitvector.decode_one(payload, self.k)
        except InvalidReport as exc:
            raise self._bad(exc.reason) from None

    def check_payload(self, payload: object) -> Payload:
        self._check_bits(payload)
        return payload  # type: ignore[return-value]

    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        return bitvector.decode_rows(payloads, self.k)

    def support_counts(self, batch: np.ndarray) -> np.ndarray:
        return bitvector.column_sums(batch, self.k)

    def supports(self, batch: np.ndarray, index: int) -> np.ndarray:
        return bitvector.bit(batch, index)

    def output_key(self, payload: object) -> Hashable:
        """The report's bits as a tuple (bit i: the report supports value i)."""
        return tuple(int(b) for b in self.support_counts(self.decode_many([payload])))
