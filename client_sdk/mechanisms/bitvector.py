"""Wire form of bit-vector reports (unary encoding, subset selection).

A report over k values is ``ceil(k/8)`` bytes, bit ``i`` of the domain in byte ``i // 8`` at
position ``i % 8`` (little-endian bit order), padding bits zero, sent as standard base64.

One report (:func:`encode_bytes`, :func:`decode_one`) is pure Python; the batch functions import
NumPy when first called.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from client_sdk.errors import InvalidReport

if TYPE_CHECKING:
    import numpy as np


@functools.cache
def _bit_table() -> np.ndarray:
    """``table[b, j]`` = bit j of byte b (little-endian bit order), as int64."""
    import numpy as np

    return np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
        np.int64
    )


def encode_bytes(raw: bytes) -> str:
    """The wire form of one report from its ``ceil(k/8)`` packed bytes."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """``(n, k)`` booleans to ``(n, ceil(k/8))`` uint8."""
    import numpy as np

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


_BLOCK = 1 << 20


def _decode_block(payloads: Sequence[object], k: int) -> np.ndarray | None:
    """All payloads decoded at once in C (``binascii``), or None if any is unusual.

    Accepts exactly what :func:`decode_one` accepts (length, alphabet, '=' padding, zero
    padding bits); anything else makes the caller fall back to the per-report parser. Every
    report has the same layout, so after checking that each ends with its '=' padding and
    replacing that by 'A' (zero bits) the reports concatenate into one base64 text, decoded
    strictly (any character outside the alphabet, '=' included, is refused).
    """
    import numpy as np

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
    if pad:
        chars = np.frombuffer(blob, dtype=np.uint8).reshape(n, width).copy()
        if not (chars[:, width - pad :] == ord("=")).all():
            return None
        chars[:, width - pad :] = ord("A")
        blob = chars.tobytes()
    try:
        raw = binascii.a2b_base64(blob, strict_mode=True)
    except binascii.Error:
        return None
    if len(raw) != n * (width // 4) * 3:
        return None
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(n, -1)[:, :nbytes]
    spare = 8 * nbytes - k
    if spare and (rows[:, -1] >> (8 - spare)).any():
        return None
    return np.ascontiguousarray(rows)


def decode_rows_fast(payloads: Sequence[object], k: int) -> np.ndarray | None:
    """``(n, ceil(k/8))`` uint8 rows of well-formed payloads, vectorised; None (never an error)
    if any is unusual, for the caller to check one by one."""
    import numpy as np

    blocks = []
    for start in range(0, len(payloads), _BLOCK):
        block = _decode_block(payloads[start : start + _BLOCK], k)
        if block is None:
            return None
        blocks.append(block)
    if not blocks:
        return np.zeros((0, (k + 7) // 8), dtype=np.uint8)
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def decode_rows(payloads: Sequence[object], k: int) -> np.ndarray:
    """``(n, ceil(k/8))`` uint8 rows; ``InvalidReport.index`` names the first bad report.

    Well-formed batches are decoded vectorised; a batch holding anything unusual goes through
    the per-report parser, which names the first bad report and why.
    """
    import numpy as np

    nbytes = (k + 7) // 8
    if not payloads:
        return np.zeros((0, nbytes), dtype=np.uint8)
    blocks = []
    for start in range(0, len(payloads), _BLOCK):
        block = _decode_block(payloads[start : start + _BLOCK], k)
        if block is None:
            break
        blocks.append(block)
    else:
        return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
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
    import numpy as np

    table = _bit_table()
    n, nbytes = packed.shape
    out = np.zeros(nbytes * 8, dtype=np.int64)
    for j in range(nbytes):
        hist = np.bincount(packed[:, j], minlength=256)
        out[8 * j : 8 * j + 8] = hist @ table
    return out[:k]


def bit(packed: np.ndarray, index: int) -> np.ndarray:
    """Bit ``index`` of every row, as booleans."""
    return ((packed[:, index // 8] >> (index % 8)) & 1).astype(bool)


def popcounts(packed: np.ndarray) -> np.ndarray:
    """Set bits per row."""
    import numpy as np

    counts: np.ndarray = np.bitwise_count(packed).sum(axis=1, dtype=np.int64)
    return counts
