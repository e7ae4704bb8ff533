"""Wire form of bit-vector reports (unary encoding, subset selection).

A report over k values is ``ceil(k/8)`` bytes, bit ``i`` of the domain in byte ``i // 8`` at
position ``i % 8`` (little-endian bit order), padding bits zero, sent as standard base64.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

import numpy as np

from client_sdk.errors import InvalidReport

# BIT_TABLE[b, j] = bit j of byte b (little-endian bit order).
BIT_TABLE = np.unpackbits(
    np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"
).astype(np.int64)


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """``(n, k)`` booleans to ``(n, ceil(k/8))`` uint8."""
    return np.packbits(bits, axis=1, bitorder="little")


def encode_rows(packed: np.ndarray) -> list[str]:
    """Base64 strings of packed rows."""
    width = packed.shape[1]
    blob = packed.tobytes()
    return [
        base64.b64encode(blob[i : i + width]).decode("ascii") for i in range(0, len(blob), width)
    ]


def decode_one(payload: object, k: int) -> bytes:
    """Bytes of one base64 bit-vector report over ``k`` values; raises ``InvalidReport``."""
    nbytes = (k + 7) // 8
    if not isinstance(payload, str):
        raise InvalidReport(f"a bit-vector report is a base64 string, got {type(payload).__name__}")
    if len(payload) != 4 * ((nbytes + 2) // 3):
        raise InvalidReport(
            f"a bit-vector report over {k} values is {4 * ((nbytes + 2) // 3)} base64 characters, "
            f"got {len(payload)}"
        )
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidReport("report is not valid base64") from None
    if len(raw) != nbytes:
        raise InvalidReport(
            f"a bit-vector report over {k} values has {nbytes} bytes, got {len(raw)}"
        )
    pad = 8 * nbytes - k
    if pad and raw[-1] >> (8 - pad):
        raise InvalidReport(f"padding bits beyond the {k} domain values must be zero")
    return raw


def decode_rows(payloads: Sequence[object], k: int) -> np.ndarray:
    """``(n, ceil(k/8))`` uint8 rows; ``InvalidReport.index`` names the first bad report."""
    nbytes = (k + 7) // 8
    rows = []
    for i, payload in enumerate(payloads):
        try:
            rows.append(decode_one(payload, k))
        except InvalidReport as exc:
            raise InvalidReport(f"report #{i}: {exc.reason}", index=i) from None
    if not rows:
        return np.zeros((0, nbytes), dtype=np.uint8)
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), nbytes)


def column_sums(packed: np.ndarray, k: int) -> np.ndarray:
    """Number of set bits per domain position over all rows (int64, length k).

    One ``bincount`` per byte column and a 256x8 table: O(n) per byte, no unpacking.
    """
    n, nbytes = packed.shape
    out = np.zeros(nbytes * 8, dtype=np.int64)
    for j in range(nbytes):
        hist = np.bincount(packed[:, j], minlength=256)
        out[8 * j : 8 * j + 8] = hist @ BIT_TABLE
    return out[:k]


def bit(packed: np.ndarray, index: int) -> np.ndarray:
    """Bit ``index`` of every row, as booleans."""
    return ((packed[:, index // 8] >> (index % 8)) & 1).astype(bool)


def popcounts(packed: np.ndarray) -> np.ndarray:
    """Set bits per row."""
    return np.bitwise_count(packed).sum(axis=1, dtype=np.int64)
