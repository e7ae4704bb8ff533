"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/hashing.py`` (issue 21).

The sketch's hash functions are public campaign parameters: devices and the collector (and two
versions of them) must compute the same buckets. Known-answer test from the specification in the
module docstring, computed here with ``hashlib`` alone, for the three entry points.
"""

from __future__ import annotations

import hashlib

import numpy as np

from client_sdk.mechanisms.openended.hashing import all_buckets, bucket, row_buckets

ITEMS = [b"a", b"home.example", "été".encode(), b"\xff" * 7]
TAG = b"ldp-test"


def spec(data: bytes, row: int, width: int, tag: bytes) -> int:
    """h_row(data) = uint16 field (row mod 32) of BLAKE2b-512(data, key = row // 32 as 4
    little-endian bytes, person = tag), little-endian, mod width."""
    digest = hashlib.blake2b(
        data, digest_size=64, key=(row // 32).to_bytes(4, "little"), person=tag
    ).digest()
    field = row % 32
    return int.from_bytes(digest[2 * field : 2 * field + 2], "little") % width


def test_buckets_follow_the_published_specification() -> None:
    depth = 70  # three digest blocks
    for width in (2, 64, 1 << 16):
        expected = np.array([[spec(s, j, width, TAG) for j in range(depth)] for s in ITEMS])
        assert expected.max() < width and len(np.unique(expected)) > 1
        assert [[bucket(s, j, width, TAG) for j in range(depth)] for s in ITEMS] == (
            expected.tolist()
        )
        assert np.array_equal(all_buckets(ITEMS, depth, width, TAG), expected)
        for d in (1, 31, 32, 33):
            assert np.array_equal(all_buckets(ITEMS, d, width, TAG), expected[:, :d])
        # one (item, row) per report, items repeated, rows from every block
        gen = np.random.default_rng(1)
        idx = gen.integers(0, len(ITEMS), 300)
        rows = gen.integers(0, depth, 300)
        got = row_buckets([ITEMS[i] for i in idx.tolist()], rows, width, TAG)
        assert np.array_equal(got, expected[idx, rows])
        assert got.dtype == np.int64


def test_row_buckets_of_no_reports_is_empty() -> None:
    out = row_buckets([], np.zeros(0, dtype=np.int64), 64, TAG)
    assert out.shape == (0,) and out.dtype == np.int64
