"""Estimate refusals that mutation testing found unchecked (issue 21).

``estimate`` must refuse a tally whose length differs from the mechanism's domain in either
direction: a longer one would otherwise debias cleanly and serve counts for values the campaign
does not have.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator import estimate
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_a_tally_of_another_length_is_refused_both_ways(size: int) -> None:
    mech = create("oue", epsilon=1.0, domain=4)
    tally = Tally(10, np.full(size, 3, dtype=np.int64))
    with pytest.raises(InvalidParameter, match=f"tally has {size} counts"):
        estimate(mech, tally)
