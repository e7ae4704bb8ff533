"""RSFD's per-value standard errors (issue 21, aggregator/multi.py).

A mutation survivor showed that RSFD's reported ``std_errors`` were never checked: the
multi-attribute tests compare the empirical variance of the counts with the closed form
(``_formula_variance`` in tests/test_multi_attribute.py, validated there by 200 runs), not the
standard errors the estimate serves. Here they must be that closed form plugged in at the
estimate's own counts (clipped to [0, n]).
"""

from __future__ import annotations

import numpy as np

from aggregator import estimate
from aggregator.estimate import Estimate
from aggregator.multi import MultiEstimate
from client_sdk.mechanisms.multi import create as create_multi
from tests.test_multi_attribute import ADULTISH, _formula_variance, _population


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
