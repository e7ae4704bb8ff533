"""Bit-vector wire form: the batch encoder, the vectorised decoder and the messages (issue 21).

The vectorised decoder falls back to the per-report parser on anything unusual, so a broken
fast path gave the same rows, only slower; here it must decode well-formed batches itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms.bitvector import (
    _decode_block,
    decode_one,
    decode_rows,
    encode_bytes,
    encode_rows,
    pack_rows,
)

SIZES = [1, 5, 8, 9, 16, 17, 24, 100]


def _rows(k: int, n: int = 6) -> np.ndarray:
    bits = np.random.default_rng(k).random((n, k)) < 0.5
    return pack_rows(bits)


@pytest.mark.parametrize("k", SIZES)
def test_encode_rows_is_one_base64_report_per_row(k: int) -> None:
    packed = _rows(k)
    assert encode_rows(packed) == [encode_bytes(row.tobytes()) for row in packed]


@pytest.mark.parametrize("k", SIZES)
def test_well_formed_batches_are_decoded_by_the_vectorised_path(k: int) -> None:
    packed = _rows(k)
    payloads = encode_rows(packed)
    block = _decode_block(payloads, k)
    assert block is not None
    np.testing.assert_array_equal(block, packed)
    np.testing.assert_array_equal(decode_rows(payloads, k), packed)
    assert [decode_one(p, k) for p in payloads] == [row.tobytes() for row in packed]


@pytest.mark.parametrize("k", SIZES)
def test_no_reports_decode_to_an_empty_array_of_the_row_width(k: int) -> None:
    empty = decode_rows([], k)
    assert empty.shape == (0, (k + 7) // 8) and empty.dtype == np.uint8


def test_a_report_of_the_wrong_length_is_told_the_right_one() -> None:
    with pytest.raises(InvalidReport, match="over 17 values is 4 base64 characters, got 3"):
        decode_one("AAA", 17)
    with pytest.raises(InvalidReport, match="over 40 values is 8 base64 characters, got 4"):
        decode_one("AAAA", 40)
