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


@pytest.mark.parametrize("pair", [(0, 4), (4, 0), (-1, 1), (1, -1), (2, 2)])
def test_a_pair_with_one_index_outside_the_domain_is_refused(pair: tuple[int, int]) -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    with pytest.raises(InvalidParameter, match="pair must be two distinct indices"):
        audit(mech, samples=100, pair=pair)
