"""Post-processing on hand-computed inputs whose outputs are known exactly.

Negative estimates between -1 and 0 are the common case (a rare value under noise); Norm-Sub
must clamp them like any other negative, then subtract one common delta from the positives.
Each expected vector below is worked by hand from docs/MECHANISMS.md §11.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.postprocess import base_cut, clip_to_zero, norm_sub


@pytest.mark.parametrize(
    ("counts", "total", "expected"),
    [
        # clamp -0.5; positives 0.5 + 2 = 2.5; delta (2 - 2.5) / 2 = -0.25
        ([-0.5, 0.5, 2.0], 2.0, [0.0, 0.25, 1.75]),
        # clamp -0.5, -0.2; positives 1 + 3 = 4; delta (3 - 4) / 2 = -0.5
        ([-0.5, -0.2, 1.0, 3.0], 3.0, [0.0, 0.0, 0.5, 2.5]),
        # clamp -0.9; positives sum 1; delta (4 - 1) / 2 = 1.5: raised, not lowered
        ([-0.9, 0.25, 0.75], 4.0, [0.0, 1.75, 2.25]),
        # second pass: 0.2 - 0.6 < 0 is dropped, then delta over the remaining two
        ([0.2, 1.0, 2.0, -0.3], 1.4, [0.0, 0.2, 1.2, 0.0]),
    ],
)
def test_norm_sub_clamps_small_negatives_too(
    counts: list[float], total: float, expected: list[float]
) -> None:
    out = norm_sub(np.array(counts), total)
    assert out.tolist() == pytest.approx(expected, abs=1e-12)
    assert out.sum() == pytest.approx(total, abs=1e-9) and out.min() >= 0


def test_clip_and_base_cut_at_their_edges() -> None:
    assert clip_to_zero(np.array([-0.5, -0.0, 0.0, 0.25])).tolist() == [0.0, 0.0, 0.0, 0.25]
    c = np.array([-0.5, 0.5, 1.0, 1.0000001])
    assert base_cut(c, 1.0).tolist() == [0.0, 0.0, 0.0, 1.0000001]
    assert base_cut(c, -1.0).tolist() == c.tolist()


def test_norm_sub_takes_a_zero_total() -> None:
    # A window with no reports (n = 0) post-processes to zeros, not an error.
    assert norm_sub(np.array([-0.5, 0.5, 2.0]), 0.0).tolist() == [0.0, 0.0, 0.0]
