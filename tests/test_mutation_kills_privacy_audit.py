"""The privacy audit's argument checks (issue 21, aggregator/privacy_audit.py).

A mutation survivor showed that a pair with one index outside the domain was only refused when
both were: ``audit(mech, pair=(0, k))`` would have sampled reports for a value the mechanism
does not have. Here each index alone outside ``[0, k)`` is refused.
"""

from __future__ import annotations

import pytest

from aggregator.privacy_audit import audit
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create


@pytest.mark.parametrize("pair", [(0, 4), (4, 0), (5, 0), (0, 5), (-1, 1), (1, -1), (2, 2)])
def test_a_pair_with_one_index_outside_the_domain_is_refused(pair: tuple[int, int]) -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    with pytest.raises(InvalidParameter, match="pair must be two distinct indices"):
        audit(mech, samples=100, pair=pair)


@pytest.mark.parametrize("path", ["device", "vectorised"])
def test_sample_reports_gives_exactly_the_samples_asked_for(path: str) -> None:
    # A report too many would let one input's event counts exceed `samples`, the denominator
    # of every Clopper-Pearson bound.
    import numpy as np

    from aggregator.privacy_audit import sample_reports

    mech = create("oue", epsilon=1.0, domain=4)
    seen: list[int] = []
    batch = sample_reports(
        mech, 1, 150, path=path, rng=np.random.default_rng(2), progress=seen.append
    )
    assert len(batch) == 150 and sum(seen) == 150


def test_each_event_bound_is_the_bonferroni_clopper_pearson_ratio() -> None:
    """Four events, each bounded at level alpha / 4: ``ln(p_lo(x) / p_hi(x2))`` with the exact
    Clopper-Pearson ends (SciPy's beta quantiles here), the complement's counts ``n - x2`` and
    ``n - x``."""
    import math

    import numpy as np
    from scipy.stats import beta

    def ends(hits: int, n: int, level: float) -> tuple[float, float]:
        lo = 0.0 if hits == 0 else float(beta.ppf(level / 2, hits, n - hits + 1))
        hi = 1.0 if hits == n else float(beta.ppf(1 - level / 2, hits + 1, n - hits))
        return lo, hi

    mech = create("grr", epsilon=1.0, domain=4)
    samples, alpha = 2000, 0.1
    result = audit(mech, samples=samples, alpha=alpha, rng=np.random.default_rng(3))
    assert len(result.events) == 4
    for event, complement in (result.events[:2], result.events[2:]):
        assert (complement.hits_first, complement.hits_second) == (
            samples - event.hits_second,
            samples - event.hits_first,
        )
        for e in (event, complement):
            p_lo, _ = ends(e.hits_first, samples, alpha / 4)
            _, p_hi = ends(e.hits_second, samples, alpha / 4)
            assert p_lo > 0
            assert e.epsilon_lower == pytest.approx(math.log(p_lo / p_hi), rel=1e-12)


def test_each_path_draws_through_what_it_names() -> None:
    # "device" is the SDK's perturb one call at a time, parsed back from the wire form;
    # "vectorised" is perturb_many. With the same seeded generator each path reproduces its
    # own draws exactly, and not the other's.
    import numpy as np

    from aggregator.privacy_audit import sample_reports

    mech = create("oue", epsilon=1.0, domain=4)
    rng = np.random.default_rng(9)
    by_device = mech.decode_many([mech.perturb_index(2, rng=rng) for _ in range(64)])
    by_batch = mech.perturb_many(np.full(64, 2), rng=np.random.default_rng(9))
    assert not np.array_equal(by_device, by_batch)
    got_device = sample_reports(mech, 2, 64, path="device", rng=np.random.default_rng(9))
    got_batch = sample_reports(mech, 2, 64, path="vectorised", rng=np.random.default_rng(9))
    assert np.array_equal(got_device, by_device)
    assert np.array_equal(got_batch, by_batch)
