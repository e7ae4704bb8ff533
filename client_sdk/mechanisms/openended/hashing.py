"""The sketch's public hash functions: keyed BLAKE2b (``hashlib``), nothing hand-rolled.

Row ``j`` of a sketch of width ``w`` (a power of two, at most 2**16) hashes bytes ``s`` to

    h_j(s) = uint16 field (j mod 32) of BLAKE2b-512(s, key = block j // 32, person = tag)  mod w

(little-endian fields, ``key`` the block index as 4 little-endian bytes). One 64-byte digest
gives 32 independent-looking 16-bit hash values, so a collector evaluates every row of a
candidate with one or two BLAKE2b calls. ``tag`` (at most 16 bytes) separates mechanisms and the
discovery protocol's prefix levels. The hash functions are public campaign parameters: they
affect utility (collisions), never privacy, which comes from the randomisation alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Hash values per BLAKE2b digest (64 bytes of 16-bit fields).
PER_DIGEST = 32


def block_digest(data: bytes, block: int, tag: bytes) -> bytes:
    """The 64-byte BLAKE2b digest of ``data`` for hash block ``block``."""
    return hashlib.blake2b(
        data, digest_size=64, key=block.to_bytes(4, "little"), person=tag
    ).digest()


def block_digests(items: Sequence[bytes], block: int, tag: bytes) -> bytes:
    """``block_digest(s, block, tag)`` of every item, concatenated (the keyed state is set up
    once and copied per item: a third faster than building it each time)."""
    copy = hashlib.blake2b(digest_size=64, key=block.to_bytes(4, "little"), person=tag).copy

    def one(data: bytes) -> bytes:
        h = copy()
        h.update(data)
        return h.digest()

    return b"".join(map(one, items))


def bucket(data: bytes, row: int, width: int, tag: bytes) -> int:
    """``h_row(data)``: the bucket in ``[0, width)`` of row ``row``."""
    digest = block_digest(data, row // PER_DIGEST, tag)
    field = row % PER_DIGEST
    return int.from_bytes(digest[2 * field : 2 * field + 2], "little") & (width - 1)


def all_buckets(items: Sequence[bytes], depth: int, width: int, tag: bytes) -> np.ndarray:
    """``(len(items), depth)`` int64 array: every row's bucket of every item."""
    import numpy as np

    blocks = -(-depth // PER_DIGEST)
    out = np.empty((len(items), blocks * PER_DIGEST), dtype=np.int64)
    for b in range(blocks):
        blob = block_digests(items, b, tag)
        fields = np.frombuffer(blob, dtype="<u2").reshape(len(items), PER_DIGEST)
        out[:, b * PER_DIGEST : (b + 1) * PER_DIGEST] = fields
    result: np.ndarray = out[:, :depth] & (width - 1)
    return result


def row_buckets(items: Sequence[bytes], rows: np.ndarray, width: int, tag: bytes) -> np.ndarray:
    """``h_rows[i](items[i])`` for each i (int64), hashing each distinct (item, block) once."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty(rows.size, dtype=np.int64)
    if rows.size == 0:
        return out
    uniq, inverse = np.unique(np.asarray(items, dtype=object), return_inverse=True)
    blocks = rows // PER_DIGEST
    keys = inverse.astype(np.int64) * (int(blocks.max()) + 1) + blocks
    ukeys, kinv = np.unique(keys, return_inverse=True)
    nb = int(blocks.max()) + 1
    blob = b"".join(block_digest(uniq[k // nb], int(k % nb), tag) for k in ukeys.tolist())
    fields = np.frombuffer(blob, dtype="<u2").reshape(ukeys.size, PER_DIGEST)
    out[:] = fields[kinv, rows % PER_DIGEST]
    result: np.ndarray = out & (width - 1)
    return result
