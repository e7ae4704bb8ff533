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


def test_a_huge_int_domain_is_refused_before_any_label_is_built() -> None:
    """``domain=10**14`` built its labels "0" .. before the size check, for ever (``ldp
    mechanisms --k 99999999999999`` never returned). Run apart, so that a regression is a
    failed test (the 120 s guard; the answer takes milliseconds) rather than a hung suite."""
    import subprocess
    import sys

    code = (
        "from client_sdk.errors import InvalidParameter\n"
        "from client_sdk.mechanisms import compare, create\n"
        "for name in ('grr', 'oue', 'olh'):\n"
        "    try:\n"
        "        create(name, epsilon=1.0, domain=10**14)\n"
        "    except InvalidParameter as exc:\n"
        "        print(exc)\n"
        "try:\n"
        "    compare(1.0, 10**14)\n"
        "except InvalidParameter as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0].startswith("mechanism 'grr' allows at most 1048576 domain values")
    assert out[1].startswith("mechanism 'oue' allows at most 4096 domain values")
    assert out[2].startswith("mechanism 'olh' allows at most 1048576 domain values")
    assert out[3] == (
        "no mechanism takes a domain of 100000000000000 values (at most 1048576); an "
        "open-domain campaign (max_length) takes any string"
    )
