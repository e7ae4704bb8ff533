"""RSFD's per-value standard errors (issue 21, aggregator/multi.py).

A mutation survivor showed that RSFD's reported ``std_errors`` were never checked: the
multi-attribute tests compare the empirical variance of the counts with the closed form
(``_formula_variance`` in tests/test_multi_attribute.py, validated there by 200 runs), not the
standard errors the estimate serves. Here they must be that closed form plugged in at the
estimate's own counts (clipped to [0, n]). The later tests kill the survivors of the
2026-11-26 run: the joint estimate's identity equality, labels, interval half-width, the
consistency step's total correction and the ``min_reports`` boundary.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aggregator import estimate
from aggregator.errors import NotEnoughReports
from aggregator.estimate import Estimate, z_value
from aggregator.multi import MultiEstimate
from client_sdk.mechanisms.multi import create as create_multi
from tests.test_multi_attribute import ADULTISH, SMALL, _formula_variance, _population


def test_rsfd_std_errors_are_the_closed_form_at_the_estimate() -> None:
    n = 4000
    mech = create_multi("rsfd", epsilon=2.0, attributes=ADULTISH, oracle="grr")
    cols = _population(n)
    est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=5)))
    assert isinstance(est, MultiEstimate)
    for j, a in enumerate(ADULTISH):
        sub = est[a]
        assert isinstance(sub, Estimate)
        c = np.clip(np.asarray(sub.counts, dtype=float), 0, n)
        want = np.sqrt(_formula_variance(mech, j, n, c))
        np.testing.assert_allclose(sub.std_errors, want, rtol=1e-9)


def _small_estimate(protocol: str, *, oracle: str = "auto", n: int = 3000) -> MultiEstimate:
    mech = create_multi(
        protocol, epsilon=2.0, attributes=SMALL, pairs=[("colour", "size")], oracle=oracle
    )
    gen = np.random.default_rng(8)
    cols = {"colour": gen.integers(0, 3, n), "size": gen.integers(0, 2, n)}
    est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=gen)))
    assert isinstance(est, MultiEstimate)
    return est


def test_joint_estimates_compare_and_hash_by_identity() -> None:
    # Their fields are arrays: a generated __eq__ / __hash__ would raise on them.
    joint = _small_estimate("spl").joints[("colour", "size")]
    same_fields = dataclasses.replace(joint)
    assert joint == joint and joint != same_fields
    assert len({joint, same_fields}) == 2


def test_joint_labels_and_interval_half_width() -> None:
    joint = _small_estimate("spl").joints[("colour", "size")]
    assert joint.row_labels == ("red", "green", "blue") and joint.column_labels == ("S", "L")
    d = joint.to_dict(level=0.9)
    assert d["rows"] == ["red", "green", "blue"] and d["columns"] == ["S", "L"]
    half = z_value(0.9) * joint.std_errors
    np.testing.assert_allclose(d["ci_low"], joint.table - half, rtol=1e-12)
    np.testing.assert_allclose(d["ci_high"], joint.table + half, rtol=1e-12)


def test_a_consistent_table_sums_to_n_when_the_raw_one_does_not() -> None:
    # Unary encoding's raw counts need not sum to n (SS's and GRR's always do), so the
    # consistency step's total correction is exercised.
    est = _small_estimate("spl", oracle="oue")
    joint = est.joints[("colour", "size")]
    assert abs(joint.raw.sum() - est.n) > 1
    assert joint.table.sum() == pytest.approx(est.n, rel=1e-12)
    np.testing.assert_allclose(joint.table.sum(axis=1), est.consistent_counts("colour"))
    np.testing.assert_allclose(joint.table.sum(axis=0), est.consistent_counts("size"))


def test_min_reports_equal_to_every_part_is_accepted_and_one_more_refused() -> None:
    mech = create_multi("spl", epsilon=2.0, attributes=SMALL, pairs=[("colour", "size")])
    n = 50
    gen = np.random.default_rng(9)
    tally = mech.tally(
        mech.perturb_many({"colour": gen.integers(0, 3, n), "size": gen.integers(0, 2, n)}, rng=gen)
    )
    assert all(part.n == n for part in tally.parts)
    assert isinstance(estimate(mech, tally, min_reports=n), MultiEstimate)
    with pytest.raises(NotEnoughReports):
        estimate(mech, tally, min_reports=n + 1)
