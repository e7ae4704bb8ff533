"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/sketch.py`` (issue 21).

Each test checks a documented contract of the sketch oracles exactly (no sampling): the per-report
variances ``v_hold`` and ``v_other`` against the exact output distribution pushed through the
collector's own ``block_counts`` and ``scores``, the report sizes, the default width limit, and
the wire form of rows >= 256.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import bitvector, create
from client_sdk.mechanisms.openended.sketch import CmsSketch, HcmsSketch, Sketch, check_sketch

WIDTH = 8


def _payload(sk: Sketch, key: tuple) -> list:
    """The wire payload of an ``output_distribution`` key."""
    if isinstance(sk, CmsSketch):
        row, bits = key
        raw = bytearray(sk.nbytes)
        for i, b in enumerate(bits):
            raw[i // 8] |= b << (i % 8)
        return [row, bitvector.encode_bytes(bytes(raw))]
    return list(key)


def _contribution(sk: Sketch, key: tuple, target: int) -> float:
    """What one report adds to ``X_d`` for a string ``d`` whose bucket (row 0) is ``target``."""
    block = sk.block_counts(sk.decode([_payload(sk, key)]))
    return float(sk.scores(block)[0, target])


def _moments(sk: Sketch, own: list[int], target: int) -> tuple[float, float]:
    """Exact mean and second moment of the contribution, the device's bucket uniform in ``own``."""
    mean = second = 0.0
    for b in own:
        for key, prob in sk.output_distribution([b]).items():
            c = _contribution(sk, key, target)
            weight = float(prob * Fraction(1, len(own)))
            mean += weight * c
            second += weight * c * c
    return mean, second


@pytest.mark.parametrize(
    "sk",
    [
        CmsSketch(epsilon=1.0, width=WIDTH, depth=1, tag=b"t", flips="symmetric"),
        CmsSketch(epsilon=2.0, width=WIDTH, depth=1, tag=b"t", flips="optimized"),
        HcmsSketch(epsilon=1.5, width=WIDTH, depth=1, tag=b"t"),
    ],
    ids=["cms-symmetric", "cms-optimized", "hcms"],
)
def test_per_report_variances_are_the_exact_ones(sk: Sketch) -> None:
    """``v_hold``: variance of a holder's contribution (mean 1); ``v_other``: of a non-holder's
    under random hashing (its bucket uniform over the width; mean 1/width). Computed from the
    exact output distribution and the collector's scores, to float rounding."""
    target = 3
    mean, second = _moments(sk, [target], target)
    assert mean == pytest.approx(1.0, rel=1e-9)
    assert second - mean**2 == pytest.approx(sk.v_hold, rel=1e-9)
    mean, second = _moments(sk, list(range(WIDTH)), target)
    assert mean == pytest.approx(1 / WIDTH, rel=1e-9)
    assert second - mean**2 == pytest.approx(sk.v_other, rel=1e-9)


def test_report_bits_are_the_fields_sizes() -> None:
    """hcms: 1 bit, log2 width bits of column, ceil(log2 depth) bits of row; cms: width bits
    and the row."""
    assert HcmsSketch(epsilon=1.0, width=64, depth=8, tag=b"t").report_bits == 1 + 6 + 3
    assert HcmsSketch(epsilon=1.0, width=2, depth=1, tag=b"t").report_bits == 1 + 1 + 0
    assert CmsSketch(epsilon=1.0, width=64, depth=5, tag=b"t").report_bits == 64 + 3
    assert CmsSketch(epsilon=1.0, width=16, depth=1, tag=b"t").report_bits == 16


def test_check_sketch_default_limit_is_two_to_the_sixteen() -> None:
    assert check_sketch(1 << 16, 1) == (1 << 16, 1)
    assert check_sketch(2, 4096) == (2, 4096)
    for width, depth in ((1 << 17, 1), (1, 1), (6, 1), (4, 0), (4, 4097), (True, 1)):
        with pytest.raises(InvalidParameter):
            check_sketch(width, depth)


def test_cms_rows_above_255_survive_the_wire() -> None:
    """The row is two bytes of the batch array: rows >= 256 (depth up to 4096) must encode to
    their own number and decode back to the same batch."""
    mech = create("cms", epsilon=1.0, max_length=4, width=8, depth=600)
    batch = mech.perturb_many(["ab", "cd", "e"] * 400, rng=5)
    rows = mech.sketch.rows_of(batch)
    assert rows.max() >= 512  # high rows are drawn
    payloads = json.loads(json.dumps(mech.encode_many(batch)))
    assert [p[0] for p in payloads] == rows.tolist()
    assert np.array_equal(mech.decode_many(payloads), batch)
    assert mech.tally(payloads) == mech.tally(batch)


def test_hcms_g_is_twice_the_keep_probability_minus_one() -> None:
    sk = HcmsSketch(epsilon=1.0, width=4, depth=1, tag=b"t")
    p = sk.threshold / 2**64
    assert sk.g == pytest.approx(2 * p - 1, rel=1e-12)
    assert sk.g == pytest.approx(math.tanh(0.5), rel=1e-9)  # (e - 1) / (e + 1)
