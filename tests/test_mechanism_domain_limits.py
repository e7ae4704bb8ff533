"""Each mechanism's domain-size cap, at the edge: the cap itself is accepted, one more refused.

The caps bound a report's size (a k-bit vector for unary encoding, subset selection and RAPPOR;
a binary domain for randomized response); an off-by-one either refuses a documented size or
lets a device build a report larger than the collector was sized for.
"""

from __future__ import annotations

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, create

CAPS = {"oue": 4096, "sue": 4096, "ss": 4096, "rappor": 4096, "rr": 2}


@pytest.mark.parametrize(("name", "cap"), sorted(CAPS.items()))
def test_the_cap_is_accepted_and_one_more_refused(name: str, cap: int) -> None:
    mech = create(name, epsilon=1.0, domain=cap)
    assert mech.k == cap == MECHANISMS[name].max_k
    with pytest.raises(InvalidParameter, match=f"at most {cap} domain values, got {cap + 1}"):
        create(name, epsilon=1.0, domain=cap + 1)


@pytest.mark.parametrize("name", sorted(set(MECHANISMS) - set(CAPS)))
def test_uncapped_mechanisms_take_large_domains(name: str) -> None:
    assert create(name, epsilon=1.0, domain=5000).k == 5000
