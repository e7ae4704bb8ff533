"""A bad value in a multi-attribute record names its attribute (fifth sweep, values).

"value 'X' is not in the domain (2 values)" did not say which of a record's attributes held
it (``sex`` and ``smoker`` may both be F/M-like); the message now starts with the attribute,
for one record and for batches of records or columns, and the exception keeps its class.
"""

from __future__ import annotations

from typing import Any

import pytest

from client_sdk.errors import InvalidParameter, ValueNotInDomain
from client_sdk.mechanisms import create

ATTRIBUTES = {"occupation": ["Sales", "Tech"], "sex": ["F", "M"], "age": {"bounds": [0, 100]}}


@pytest.mark.parametrize("protocol", ["spl", "smp"])
@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda m: m.perturb({"occupation": "Salse", "sex": "F", "age": 3}),
            ValueNotInDomain,
            r"^attribute 'occupation': value 'Salse' is not in the domain .*'Sales'",
        ),
        (
            lambda m: m.perturb_many([{"occupation": "Tech", "sex": "X", "age": 3}], rng=1),
            ValueNotInDomain,
            r"^attribute 'sex': value 'X' is not in the domain",
        ),
        (
            lambda m: m.perturb_many({"occupation": ["Tech"], "sex": ["Q"], "age": [3]}, rng=1),
            ValueNotInDomain,
            r"^attribute 'sex': value 'Q' is not in the domain",
        ),
        (
            lambda m: m.perturb({"occupation": "Tech", "sex": "F", "age": "old"}),
            InvalidParameter,
            r"^attribute 'age': ",
        ),
    ],
)
def test_the_message_names_the_attribute(
    protocol: str, call: Any, error: type[Exception], match: str
) -> None:
    mech = create(protocol, epsilon=2.0, attributes=ATTRIBUTES)
    with pytest.raises(error, match=match) as raised:
        call(mech)
    assert type(raised.value) is error  # the class callers catch is kept
