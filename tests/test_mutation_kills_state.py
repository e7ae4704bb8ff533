"""Kill test for ``client_sdk/mechanisms/state.py`` (docs/MUTATION.md).

``AggregateState.n`` is the number of reports, an attribute of every state (storage reads
``state.n`` and writes it beside the vector), not a method: the protocol declares it as a
property, which makes it a data member. A protocol with a data member refuses ``issubclass``
(only ``isinstance``, which looks at an object's attributes, can check it), and an object
whose ``n`` is an integer satisfies it.
"""

from __future__ import annotations

import pytest

from client_sdk.mechanisms import create
from client_sdk.mechanisms.state import AggregateState


def test_n_is_a_data_member_of_the_protocol() -> None:
    mech = create("grr", epsilon=1.0, domain=["a", "b", "c"])
    state = mech.tally([mech.perturb("a") for _ in range(5)])
    assert isinstance(state, AggregateState)
    assert state.n == 5 and not callable(state.n)
    with pytest.raises(TypeError, match="non-method members"):
        issubclass(type(state), AggregateState)
