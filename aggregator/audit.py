"""The audit path: recompute tallies from stored reports; they must equal the running tallies.

Invariant 4 of the architecture: the tally of a window always equals what recomputing from its
stored reports gives. :func:`audit_windows` checks it window by window.

:func:`recompute_tally` is ``mech.tally(payloads)`` with a vectorised fast path for bit-vector
reports (unary encoding, subset selection): the base64 text of all reports is decoded at once
with a lookup table instead of one ``base64.b64decode`` per report. It accepts exactly what the
mechanism's own parser accepts (same length, alphabet, zero padding bits, and for SS the subset
size); on anything else it hands the batch to ``mech.tally``, which raises the mechanism's
precise :class:`InvalidReport`. Tests pin that both paths agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client_sdk.mechanisms import (
    Mechanism,
    Payload,
    SubsetSelection,
    Tally,
    UnaryEncoding,
    bitvector,
)

_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
#: ASCII code -> 6-bit value, 255 for anything outside the base64 alphabet ('=' included).
_LUT = np.full(256, 255, dtype=np.uint8)
_LUT[np.frombuffer(_B64, dtype=np.uint8)] = np.arange(64, dtype=np.uint8)
#: Reports decoded per vectorised block (bounds the temporary arrays to a few tens of MB).
_BLOCK = 1 << 20


@dataclass(frozen=True)
class WindowAudit:
    """One window: the running tally, the tally recomputed from its reports, and whether equal."""

    window: str
    stored: Tally
    recomputed: Tally

    @property
    def ok(self) -> bool:
        return self.stored == self.recomputed

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "ok": self.ok,
            "stored": self.stored.to_dict(),
            "recomputed": self.recomputed.to_dict(),
        }


def _bitvector_rows(payloads: Sequence[object], k: int) -> np.ndarray | None:
    """``(n, ceil(k/8))`` uint8 rows of base64 bit-vector payloads, or None if any is unusual."""
    nbytes = (k + 7) // 8
    width = 4 * ((nbytes + 2) // 3)
    pad = 3 * (width // 4) - nbytes  # '=' characters at the end of every report
    try:
        blob = "".join(payloads).encode("ascii")  # type: ignore[arg-type]
    except (TypeError, UnicodeEncodeError):
        return None
    n = len(payloads)
    if len(blob) != n * width:
        return None
    chars = np.frombuffer(blob, dtype=np.uint8).reshape(n, width)
    data = chars[:, : width - pad] if pad else chars
    if pad and not (chars[:, width - pad :] == ord("=")).all():
        return None
    six = _LUT[data]
    if (six == 255).any():
        return None
    if pad:
        six = np.concatenate([six, np.zeros((n, pad), dtype=np.uint8)], axis=1)
    quads = six.reshape(n, -1, 4).astype(np.uint32)
    word = (quads[..., 0] << 18) | (quads[..., 1] << 12) | (quads[..., 2] << 6) | quads[..., 3]
    raw = np.stack([(word >> 16) & 255, (word >> 8) & 255, word & 255], axis=-1)
    rows = raw.reshape(n, -1)[:, :nbytes].astype(np.uint8)
    spare = 8 * nbytes - k
    if spare and (rows[:, -1] >> (8 - spare)).any():
        return None
    return np.ascontiguousarray(rows)


def recompute_tally(mechanism: Mechanism, payloads: Sequence[Payload]) -> Tally:
    """The tally of ``payloads`` (wire form); equal to ``mechanism.tally(payloads)``."""
    if isinstance(mechanism, (UnaryEncoding, SubsetSelection)) and payloads:
        k = mechanism.k
        support = np.zeros(k, dtype=np.int64)
        for start in range(0, len(payloads), _BLOCK):
            chunk = payloads[start : start + _BLOCK]
            rows = _bitvector_rows(chunk, k)
            if rows is None or (
                isinstance(mechanism, SubsetSelection)
                and (bitvector.popcounts(rows) != mechanism.d).any()
            ):
                return mechanism.tally(payloads)  # raises the precise error, or agrees
            support += mechanism.support_counts(rows)
        return Tally(len(payloads), support)
    return mechanism.tally(payloads)


def audit_windows(
    mechanism: Mechanism,
    stored: Mapping[str, Tally],
    payloads_of: Callable[[str], Iterable[Payload]],
) -> list[WindowAudit]:
    """Recompute every window of ``stored`` from ``payloads_of(window)`` and compare.

    A window's result is ``ok`` only if the recomputed tally equals the stored one exactly
    (same n, same support counts).
    """
    out = []
    for window in sorted(stored):
        payloads = list(payloads_of(window))
        out.append(WindowAudit(window, stored[window], recompute_tally(mechanism, payloads)))
    return out
