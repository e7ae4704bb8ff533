"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/oracles.py`` (issue 21).

The documented defaults of the sketch oracles, and ``count_variance`` (the SDK's closed form)
against the variance the estimator serves for the same tally: they must agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import create


def test_documented_default_sketches() -> None:
    """cms: 1024 x 32 (Apple's), symmetric flips; hcms: 2**16 x 16; pem: 1024 x 16, cms."""
    cms = create("cms", epsilon=1.0, max_length=8)
    assert (cms.width, cms.depth) == (1024, 32)
    assert cms.params() == {"width": 1024, "depth": 32, "flips": "symmetric"}
    hcms = create("hcms", epsilon=1.0, max_length=8)
    assert (hcms.width, hcms.depth) == (1 << 16, 16)
    assert hcms.params() == {"width": 1 << 16, "depth": 16}
    assert hcms.report_bits == 1 + 16 + 4
    pem = create("pem", epsilon=1.0, max_length=8)
    assert (pem.width, pem.depth, pem.oracle) == (1024, 16, "cms")


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("cms", {"width": 16, "depth": 4}),
        ("cms", {"width": 32, "depth": 2, "flips": "optimized"}),
        ("hcms", {"width": 8, "depth": 4}),
    ],
)
def test_count_variance_is_the_variance_the_estimator_serves(name: str, params: dict) -> None:
    """One candidate at a time (nothing to solve jointly): its served standard error squared is
    ``count_variance(n, count clipped to [0, n])`` to float rounding."""
    mech = create(name, epsilon=1.5, max_length=8, **params)
    values = ["heavy"] * 700 + ["other"] * 200 + [f"u{i}" for i in range(100)]
    tally = mech.tally(mech.perturb_many(values, rng=4))
    for candidate in ("heavy", "other", "absent"):
        est = aggregator.estimate(mech, tally, candidates=[candidate])
        count = float(np.clip(est.counts[0], 0, tally.n))
        expected = float(mech.count_variance(tally.n, count))
        assert est.std_errors[0] ** 2 == pytest.approx(expected, rel=1e-9)
    # and the closed form at count 0 and at n, from the per-report variances
    w, s = mech.width, mech.sketch
    assert mech.count_variance(1000, 0) == pytest.approx((w / (w - 1)) ** 2 * 1000 * s.v_other)
    assert mech.count_variance(1000, [1000])[0] == pytest.approx(
        (w / (w - 1)) ** 2 * 1000 * s.v_hold
    )


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_output_key_refuses_what_is_not_a_list(name: str) -> None:
    mech = create(name, epsilon=1.0, max_length=4, width=8, depth=2)
    payload = mech.encode_many(mech.perturb_many(["a"], rng=1))[0]
    assert mech.output_key(payload) in mech.output_distribution("a")
    for bad in (tuple(payload), None, "x"):
        with pytest.raises(InvalidReport):
            mech.output_key(bad)


def test_parameters_are_keyword_only() -> None:
    """``CountMeanSketch(1.0, 8)`` would read a bare number as epsilon or max_length: refused."""
    from client_sdk.mechanisms.openended import CountMeanSketch, HadamardCountMeanSketch

    for cls in (CountMeanSketch, HadamardCountMeanSketch):
        assert cls(epsilon=1.0, max_length=8, width=8, depth=2).width == 8
        with pytest.raises(TypeError):
            cls(1.0, 8)  # type: ignore[misc]
        with pytest.raises(TypeError):
            cls(1.0, max_length=8)  # type: ignore[misc]
