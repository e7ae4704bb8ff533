"""Tests that kill surviving mutants of ``aggregator/openended.py`` (issue 21).

The pooled count of a string over several prefix levels (``_Pool``): weights ``1/null``, the
randomisation's variance ``sum a_t^2 var_t`` and the role sampling's ``c (sum a_t^2 f_t - 1)``
with ``a_t`` the normalised weights (``pem_level_estimates``' docstring), checked on figures
computed by hand.
"""

from __future__ import annotations

import pytest

from aggregator.openended import _Pool


def test_pooled_count_and_variance_follow_the_documented_formula() -> None:
    levels = [  # (count, var, null var, f = n / n_t)
        (100.0, 400.0, 300.0, 4.0),
        (130.0, 900.0, 600.0, 2.5),
        (90.0, 250.0, 150.0, 5.0),
    ]
    pool = _Pool()
    for level in levels:
        pool.add(*level)
    weights = [1 / null for _, _, null, _ in levels]
    a = [w / sum(weights) for w in weights]
    count = sum(ai * c for ai, (c, _, _, _) in zip(a, levels, strict=True))
    randomisation = sum(ai**2 * v for ai, (_, v, _, _) in zip(a, levels, strict=True))
    role = sum(ai**2 * f for ai, (_, _, _, f) in zip(a, levels, strict=True)) - 1
    assert role > 0
    assert pool.count == pytest.approx(count, rel=1e-12)
    assert pool.null == pytest.approx(1 / sum(weights), rel=1e-12)
    assert pool.variance(10_000) == pytest.approx(randomisation + count * role, rel=1e-12)
    # the role term counts at most n devices and at least none
    assert pool.variance(50) == pytest.approx(randomisation + 50 * role, rel=1e-12)


def test_one_level_of_every_device_has_no_role_variance() -> None:
    pool = _Pool()
    pool.add(-20.0, 400.0, 300.0, 1.0)
    assert pool.count == -20.0
    assert pool.variance(1000) == pytest.approx(400.0, rel=1e-12)


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_apples_separate_estimator_is_the_joint_one_for_a_single_key(name: str) -> None:
    """``joint=False`` (Apple's ``(X_d - n/w) w/(w-1)``) and the joint solve of one key (nothing
    to collide with: ``(1 - 1/w) c = X_d - n/w``) are the same count and variance."""
    import numpy as np

    from aggregator.openended import sketch_counts
    from client_sdk.mechanisms import create

    mech = create(name, epsilon=1.0, max_length=8, width=16, depth=4)
    tally = mech.tally(mech.perturb_many(["a"] * 300 + ["b"] * 100, rng=8))
    for value in ("a", "b", "zz"):
        buckets = mech.buckets([value.encode()])
        sep = sketch_counts(mech.sketch, tally.counts, buckets, joint=False)
        joint = sketch_counts(mech.sketch, tally.counts, buckets, joint=True)
        for x, y in zip(sep[:3], joint[:3], strict=True):
            assert np.allclose(x, y, rtol=1e-12, atol=1e-9)
        assert sep[3] == joint[3] == 400


def test_discovery_of_one_byte_strings() -> None:
    """``max_length = 1``: a single level, whose sketch gives the threshold's ``sigma0``."""
    import math

    import aggregator
    from client_sdk.mechanisms import create

    mech = create("pem", epsilon=4.0, max_length=1, width=64, depth=4)
    tally = mech.tally(mech.perturb_many(["a"] * 600 + ["b"] * 400, rng=2))
    found = aggregator.discover(mech, tally, top=2)
    assert set(found.values) == {"a", "b"}
    sk, w = mech.sketches[0], mech.width
    sigma0 = math.sqrt((w / (w - 1)) ** 2 * 1000 * sk.v_other)
    assert found.sigma0 == pytest.approx(sigma0, rel=1e-12)
    assert found.threshold == pytest.approx(found.z * sigma0, rel=1e-12)


def test_one_report_is_enough_and_none_never_is() -> None:
    """``min_reports`` is at least 1 whatever the caller gives: one report gives an estimate,
    an empty tally is refused even with ``min_reports=0``."""
    import aggregator
    from aggregator.errors import NotEnoughReports
    from client_sdk.mechanisms import create

    mech = create("cms", epsilon=1.0, max_length=4, width=8, depth=2)
    one = mech.tally(mech.perturb_many(["a"], rng=1))
    assert aggregator.estimate(mech, one, candidates=["a"]).n == 1
    with pytest.raises(NotEnoughReports):
        aggregator.estimate(mech, one, candidates=["a"], min_reports=2)
    for min_reports in (0, 1):
        with pytest.raises(NotEnoughReports):
            aggregator.estimate(mech, mech.empty_tally(), candidates=["a"], min_reports=min_reports)


def test_a_key_sharing_every_bucket_with_a_heavy_one_is_explained_by_it() -> None:
    """Peeling the heavy key subtracts its collisions in count units, ``(r - 1/w) rhs_h /
    (1 - 1/w)``: a key in the same bucket of every row keeps ``rhs_d - rhs_h`` and is not
    taken; a key in no shared bucket is."""
    import numpy as np

    from aggregator.openended import _peel

    same = np.array([[0, 1, 2], [0, 1, 2]])
    assert _peel(same, np.array([10.0, 10.1]), 2, 1.0).tolist() == [1]
    apart = np.array([[0, 0, 0], [1, 1, 1]])
    assert sorted(_peel(apart, np.array([10.0, 10.1]), 2, 1.0).tolist()) == [0, 1]


def test_at_most_256_keys_are_peeled() -> None:
    """``PEEL_LIMIT``: 300 keys far above the bar, in buckets no other key uses: 256 taken."""
    import numpy as np

    from aggregator.openended import _peel

    keys = np.arange(300)
    buckets = np.stack([keys, keys], axis=1)
    chosen = _peel(buckets, np.full(300, 100.0) + keys * 1e-3, 512, 1.0)
    assert chosen.tolist() == list(range(299, 299 - 256, -1))
